"""numba's decorator for nsysdiag's compiled loops (``adapters/_sqlite_records.py``,
``views/_compiled.py``, ``compute/compiled.py``).

Machine code is cached on disk (``cache=True``: beside the source, else in the user's cache
directory), so a loop is compiled once per installation, not once per run. Where neither
is writable (a read-only container with no home), numba refuses to cache; the loops are
then compiled in each process instead of failing.

numba itself is imported when a loop is first called, not when a module that defines one
is imported: the command line's start-up (``--version``, ``--help``) and the commands
that read no large table never pay for it (tests/test_startup.py).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

_lock = threading.RLock()


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit``, imported on first use."""
    from numba import njit as numba_njit

    return numba_njit(*args, **options)


class _Loop:
    """A loop compiled on its first call. Compiling it first compiles the loops it calls
    (numba must see their dispatchers, not this wrapper) and puts each dispatcher in place
    of its wrapper among its module's names, so that later calls go straight to numba."""

    def __init__(self, fn: Any, options: dict[str, Any]) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._options = options
        self._dispatcher: Any = None

    def compiled(self) -> Any:
        if self._dispatcher is None:
            with _lock:
                if self._dispatcher is None:
                    names = self._fn.__globals__
                    for name in self._fn.__code__.co_names:
                        if isinstance(names.get(name), _Loop):
                            names[name] = names[name].compiled()
                    try:
                        dispatcher = njit(cache=True, **self._options)(self._fn)
                    except RuntimeError:  # "cannot cache function ...: no locator available"
                        dispatcher = njit(**self._options)(self._fn)
                    if names.get(self._fn.__name__) is self:
                        names[self._fn.__name__] = dispatcher
                    self._dispatcher = dispatcher
        return self._dispatcher

    def __call__(self, *args: Any) -> Any:
        return self.compiled()(*args)


def jit(inline: bool = False, allocates: bool = False):
    """``numba.njit(nogil=True, cache=True)``, uncached where no cache can be written,
    compiled (and numba imported) on the loop's first call.

    Only a loop that ``allocates`` arrays runs with numba's runtime (NRT): its atomic
    reference counts, which numba's pruning leaves in branching code (numba issues 2345,
    2350: ``_nrt=False`` is the workaround given there), cost the SQLite decoder much of
    its time when two threads share one buffer (docs/performance.md).
    """
    options = {"nogil": True, **({"inline": "always"} if inline else {}),
               **({} if allocates else {"_nrt": False})}

    def wrap(fn):
        return _Loop(fn, options)

    return wrap
