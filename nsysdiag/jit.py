"""numba's decorator for nsysdiag's compiled loops (``adapters/_sqlite_records.py``,
``views/_compiled.py``, ``analyses/_compiled.py``).

Machine code is cached on disk (``cache=True``: beside the source, else in the user's cache
directory), so a loop is compiled once per installation, not once per run. Where neither
is writable (a read-only container with no home), numba refuses to cache; the loops are
then compiled in each process instead of failing.
"""

from numba import njit


def jit(inline: bool = False, allocates: bool = False):
    """``numba.njit(nogil=True, cache=True)``, uncached where no cache can be written.

    Only a loop that ``allocates`` arrays runs with numba's runtime (NRT): its atomic
    reference counts, which numba's pruning leaves in branching code (numba issues 2345,
    2350: ``_nrt=False`` is the workaround given there), cost the SQLite decoder much of
    its time when two threads share one buffer (docs/performance.md).
    """
    options = {"nogil": True, **({"inline": "always"} if inline else {}),
               **({} if allocates else {"_nrt": False})}

    def wrap(fn):
        try:
            return njit(cache=True, **options)(fn)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return njit(**options)(fn)

    return wrap
