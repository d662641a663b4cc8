"""One function over many exports, each in a worker process of its own, or on Dask.

``fan_out(fn, todo, options)`` runs ``fn(path, options)`` for each ``(key, path)`` of
``todo`` and yields ``(key, result)`` as each finishes. ``fn`` must be a module-level
function whose result pickles; it should not raise (a batch turns a report's own
failure into a record). A worker that dies without a result (killed, out of memory)
yields a :class:`Lost` with why, and the run carries on. Either side can abandon the
hand-over: when no result comes within the stage bound (``threads.stage_timeout()``)
the run stops with :class:`~nsysdiag.errors.StageTimeout`, and when the caller stops
early the workers still running are ended and the items not started are cancelled.

Local workers are processes, not threads: one export's DuckDB queries and numeric passes
hold a core each, and a worker that dies (out of memory) takes no other one with it.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from ..errors import StageTimeout
from . import threads

#: marks the start of an item in a local run (``fan_out(..., started=True)``)
STARTED = "started"


@dataclass(frozen=True)
class Lost:
    """A worker ended without a result."""

    why: str


def signal_name(exitcode: int | None) -> str:
    """How a worker process ended, in words ("SIGKILL (out of memory?)")."""
    if exitcode is None or exitcode >= 0:
        return f"exit status {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    return name + (" (out of memory?)" if -exitcode == signal.SIGKILL else "")


def _child(conn: Any, fn: Callable[[str, dict[str, Any]], Any], path: str,
           options: dict[str, Any]) -> None:
    """A worker process: run ``fn`` on one item, send its result."""
    try:
        conn.send(fn(path, options))
    except KeyboardInterrupt:
        pass  # the run was interrupted: the caller says so
    finally:
        conn.close()


_NOTHING = object()


class _Started:
    """An item running in a worker process of its own."""

    def __init__(self, ctx: Any, fn: Callable[[str, dict[str, Any]], Any], key: str,
                 path: str, options: dict[str, Any]):
        self.key, self.path = key, path
        self.conn, theirs = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_child, args=(theirs, fn, path, options), daemon=True)
        self.proc.start()
        theirs.close()

    def result(self) -> Any:
        """The result sent, or :class:`Lost` when the worker died without one."""
        try:
            out = self.conn.recv()
        except (EOFError, OSError):
            out = _NOTHING
        self.conn.close()
        self.proc.join(timeout=threads.stage_timeout())
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        return Lost(f"its worker died ({signal_name(self.proc.exitcode)})") \
            if out is _NOTHING else out

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


def _local(fn: Callable[[str, dict[str, Any]], Any], todo: list[tuple[str, str]],
           options: dict[str, Any], workers: int | None, started: bool, stage: str,
           items: str) -> Iterator[tuple[str, Any]]:
    """(key, result) of each item as it finishes, each in a process of its own, at most
    ``workers`` at once."""
    ctx = multiprocessing.get_context()
    queue = [(k, str(p)) for k, p in reversed(todo)]
    running: dict[Any, _Started] = {}
    try:
        while queue or running:
            while queue and len(running) < (workers or multiprocessing.cpu_count()):
                key, path = queue.pop()
                if started:
                    yield key, STARTED
                item = _Started(ctx, fn, key, path, options)
                running[item.conn] = item
            bound = threads.stage_timeout()
            ready = wait(list(running), timeout=bound)
            if not ready:
                raise StageTimeout(stage, bound, f"every one of {len(running)} running {items}")
            for conn in ready:
                item = running.pop(conn)
                yield item.key, item.result()
    finally:
        for item in running.values():  # the caller stops early: end the items running
            item.kill()


def _as_finished(futures: dict, first: Callable[[set, float], tuple[set, set]], stage: str,
                 items: str) -> Iterator[tuple[str, Any]]:
    """(key, result) of the futures as they finish, (key, Lost) for one that raised;
    ``first(pending, bound)`` waits for the first to finish, at most ``bound`` seconds
    (done, not done)."""
    pending = set(futures)
    while pending:
        bound = threads.stage_timeout()
        done, pending = first(pending, bound)
        if not done:
            raise StageTimeout(stage, bound, f"every one of {len(pending)} running {items}")
        for fut in done:
            try:
                yield futures[fut], fut.result()
            except Exception as exc:  # a worker lost by the cluster
                yield futures[fut], Lost(f"its worker died ({type(exc).__name__}: {exc})")


def fan_out(
    fn: Callable[[str, dict[str, Any]], Any],
    todo: list[tuple[str, str]],
    options: dict[str, Any],
    workers: int | None = None,
    dask: str | None = None,
    started: bool = False,
    stage: str = "fan-out",
    items: str = "items",
) -> Iterator[tuple[str, Any]]:
    """(key, ``fn(path, options)``) for each (key, path) of ``todo`` as it finishes.

    ``workers``: local worker processes (None: the CPU count; 1 runs in this process, one
    item after another); ``dask``: the address of a Dask scheduler to run them on instead.
    ``started``: also yield (key, :data:`STARTED`) as an item starts, where that is known
    (local runs). ``stage`` and ``items`` name the run and its items in the error when
    none finishes within the stage bound."""
    if not todo:
        return
    if dask:
        from distributed import Client
        from distributed import wait as dask_wait

        def first_dask(pending: set, bound: float) -> tuple[set, set]:
            try:
                got = dask_wait(list(pending), timeout=bound, return_when="FIRST_COMPLETED")
            except TimeoutError:
                return set(), pending
            return set(got.done), set(got.not_done)

        with Client(dask) as client:
            futures = {client.submit(fn, str(p), options, pure=False): k for k, p in todo}
            try:
                yield from _as_finished(futures, first_dask, stage, items)
            finally:
                client.cancel([f for f in futures if not f.done()])
        return
    if workers == 1:
        for k, p in todo:
            if started:
                yield k, STARTED
            yield k, fn(str(p), options)
        return
    yield from _local(fn, todo, options, workers, started, stage, items)
