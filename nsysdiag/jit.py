"""numba's decorator for nsysdiag's compiled loops (``adapters/_sqlite_records.py``,
``views/_compiled.py``, ``analyses/_compiled.py``).

Machine code is cached on disk (``cache=True``: beside the source, else in the user's cache
directory), so a loop is compiled once per installation, not once per run. Where neither
is writable (a read-only container with no home), numba refuses to cache; the loops are
then compiled in each process instead of failing.
"""

from numba import njit


def jit(inline: bool = False):
    """``numba.njit(nogil=True, cache=True)``, uncached where no cache can be written."""
    options = {"nogil": True, **({"inline": "always"} if inline else {})}

    def wrap(fn):
        try:
            return njit(cache=True, **options)(fn)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return njit(**options)(fn)

    return wrap
