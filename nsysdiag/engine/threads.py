"""Hand-offs between threads that either side can abandon.

nsysdiag reads, decodes and analyses on several threads at once (``docs/concurrency.md``
lists every one). Each place where one thread waits for another follows one rule, and
the primitives here are how it is kept:

* **A worker that fails reports once and stops.** Its first error is kept and raised
  once, in the thread that waits for it (the consumer of a :class:`HandOff`, the caller of
  :meth:`Call.result`); the other producers of the same hand-off are told to stop.
* **A consumer that stops tells its producers to stop.** :meth:`HandOff.cancel` makes
  every blocked or later :meth:`HandOff.put` return False; leaving a :class:`Workers`
  block with an error drops the calls not yet started and calls the ``on_cancel`` hook
  (for example a DuckDB connection's ``interrupt``) of the running ones.
* **Nothing blocks without a bound once the other side is gone.** Every wait on another
  thread is bounded by :func:`stage_timeout` (``NSYSDIAG_STAGE_TIMEOUT`` seconds, default
  600, far beyond any wait of a healthy run); past it the waiting side raises
  :class:`~nsysdiag.errors.StageTimeout` (exit 70), which names the stage. The worker
  threads are daemons, and those still running past a bound are recorded
  (:func:`abandoned`), so that the command line can end the process without waiting for
  them.

The primitives: :class:`HandOff` (a bounded queue with cancel, for producer threads and
one consumer), :func:`merge` (several iterators drained on threads of their own into one),
:class:`Workers` (a few daemon threads running calls whose results are waited for with a
bound) and :func:`join`.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from ..errors import StageTimeout, UsageError

T = TypeVar("T")

STAGE_TIMEOUT_ENV = "NSYSDIAG_STAGE_TIMEOUT"
#: seconds: a healthy run never waits this long for another thread (a 10-million-kernel
#: diagnose runs whole in a small fraction of it)
DEFAULT_STAGE_TIMEOUT_S = 600.0
#: seconds between two looks of a blocked wait at the other side (has it stopped?)
POLL_S = 0.05

_abandoned: list[threading.Thread] = []
_timeouts: list[StageTimeout] = []
_lock = threading.Lock()


def stage_timeout() -> float:
    """The bound, in seconds, of any wait of one thread for another:
    ``$NSYSDIAG_STAGE_TIMEOUT`` (a positive, finite number), default 600.

    Raises
    ------
    UsageError
        The variable is set to something else.
    """
    raw = os.environ.get(STAGE_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_STAGE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0 < value < math.inf):
        raise UsageError(f"{STAGE_TIMEOUT_ENV} must be a positive number of seconds, "
                         f"not {raw!r}")
    return value


def _timeout(stage: str, bound: float, what: str = "a worker") -> StageTimeout:
    """A :class:`~nsysdiag.errors.StageTimeout`, kept for :func:`quoted_timeout`."""
    exc = StageTimeout(stage, bound, what)
    with _lock:
        _timeouts.append(exc)
        del _timeouts[:-16]
    return exc


def quoted_timeout(message: str) -> StageTimeout | None:
    """The :class:`~nsysdiag.errors.StageTimeout` that ``message`` quotes, if any.

    DuckDB reads Arrow streams on threads of its own and passes a Python error raised
    there on as its message only: this finds the error itself again (it is dropped from
    the record), so that it reaches the user as the internal error it is."""
    with _lock:
        for exc in reversed(_timeouts):
            if exc.message in message:
                _timeouts.remove(exc)
                return exc
    return None


def abandoned() -> list[threading.Thread]:
    """Threads that were still running when a bounded wait for them ended, and still run.

    A process that has some should end without joining them (``os._exit`` after flushing
    its output): they may never return.
    """
    with _lock:
        _abandoned[:] = [t for t in _abandoned if t.is_alive()]
        return list(_abandoned)


def _abandon(threads: Iterable[threading.Thread]) -> None:
    with _lock:
        _abandoned.extend(t for t in threads if t.is_alive())


def join(threads: Sequence[threading.Thread], *, bound: float | None = None) -> bool:
    """Wait for ``threads`` to end, all together at most ``bound`` seconds (default
    :func:`stage_timeout`). Returns whether they all ended; those that did not are recorded
    in :func:`abandoned`."""
    deadline = time.monotonic() + (stage_timeout() if bound is None else bound)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t for t in threads if t.is_alive()]
    _abandon(alive)
    return not alive


_DONE = object()


class HandOff(Generic[T]):
    """A bounded queue from producer threads to one consumer, which either side can leave.

    Producers call :meth:`put` for each item, then :meth:`finish`, or :meth:`fail` with
    their error. The consumer iterates: it gets the items until every producer finished,
    and raises the first producer's error (once; later errors are dropped). When the
    consumer stops early it calls :meth:`cancel`, and the producers' :meth:`put` returns
    False. Each wait, on either side, is bounded by :func:`stage_timeout`.

    Parameters
    ----------
    maxsize
        Items held at most (a producer waits while the queue is full).
    producers
        How many producers will call :meth:`finish` (or :meth:`fail`).
    stage
        What the hand-off is part of, for :class:`~nsysdiag.errors.StageTimeout`.
    """

    def __init__(self, maxsize: int, producers: int = 1, *, stage: str):
        if maxsize < 1 or producers < 1:
            raise ValueError("maxsize and producers must be at least 1")
        self.stage = stage
        self._queue: queue.Queue = queue.Queue(maxsize)
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._left = producers

    @property
    def stopped(self) -> bool:
        """Whether the consumer cancelled or a producer failed: producers should stop."""
        return self._stopped.is_set()

    def put(self, item: T) -> bool:
        """Hand ``item`` over, waiting while the queue is full. Returns False (without
        handing it over) once the hand-off is stopped.

        Raises
        ------
        StageTimeout
            The consumer neither took an item nor cancelled within the bound.
        """
        bound = stage_timeout()
        deadline = time.monotonic() + bound
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
            except queue.Full:
                if time.monotonic() >= deadline:
                    raise _timeout(self.stage, bound, "the consumer") from None
                continue
            if self._stopped.is_set():  # stopped meanwhile: nobody will take it
                self._drop()
                return False
            return True
        return False

    def finish(self) -> None:
        """One producer is done (nothing is handed over if the hand-off is stopped)."""
        self.put(_DONE)  # type: ignore[arg-type]

    def fail(self, exc: BaseException) -> None:
        """One producer failed with ``exc``: the consumer raises the first such error, and
        the other producers are told to stop."""
        with self._lock:
            if self._error is None:
                self._error = exc
        self._stopped.set()

    def cancel(self) -> None:
        """The consumer stops: producers' :meth:`put` returns False from now on; what is
        queued is dropped (and its memory freed)."""
        self._stopped.set()
        self._drop()

    def _drop(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def __iter__(self) -> Iterator[T]:
        bound = stage_timeout()
        while self._left:
            deadline = time.monotonic() + bound
            while True:
                if self._error is not None:
                    raise self._error
                try:
                    item = self._queue.get(timeout=POLL_S)
                    break
                except queue.Empty:
                    if self._stopped.is_set() and self._error is None:
                        return  # cancelled
                    if time.monotonic() >= deadline:
                        raise _timeout(self.stage, bound, "a producer") from None
            if item is _DONE:
                self._left -= 1
            else:
                yield item


def merge(sources: Sequence[Iterable[T]], *, stage: str, depth: int = 2) -> Iterator[T]:
    """The items of several iterables, each drained by a daemon thread of its own into one
    :class:`HandOff` of ``depth`` items per source; order across sources is not kept.

    The first error of a source is raised here once, and the other sources stop. When the
    consumer stops early (closes this generator, or an error passes through it), the
    threads are told to stop and waited for, within the bound. The sources' resources
    (cursors, files) may be released once this generator has ended, unless it raised
    :class:`~nsysdiag.errors.StageTimeout`: then a thread may still be inside a source.
    """
    hand: HandOff[T] = HandOff(max(1, depth * len(sources)), max(1, len(sources)), stage=stage)

    def drain(source: Iterable[T]) -> None:
        try:
            for item in source:
                if not hand.put(item):
                    return
            hand.finish()
        except BaseException as exc:  # reported once, by the consumer
            hand.fail(exc)

    threads = [threading.Thread(target=drain, args=(s,), name=f"nsysdiag: {stage}", daemon=True)
               for s in sources]
    for t in threads:
        t.start()
    bound = stage_timeout()
    try:
        yield from hand
    except GeneratorExit:  # the consumer stopped reading
        hand.cancel()
        if not join(threads, bound=bound):
            raise _timeout(stage, bound, "a reader thread") from None
        raise
    except BaseException:  # the first error wins: no second one about the threads
        hand.cancel()
        join(threads, bound=bound)
        raise
    hand.cancel()
    if not join(threads, bound=bound):
        raise _timeout(stage, bound, "a reader thread")


class Call(Generic[T]):
    """A call submitted to :class:`Workers`: its result is waited for with a bound."""

    def __init__(self, workers: Workers, future: cf.Future):
        self._workers = workers
        self._future = future
        self.collected = False

    def done(self) -> bool:
        """Whether the call has ended (or was cancelled before it started)."""
        return self._future.done()

    def result(self) -> T:
        """The call's return value, or its error raised here (once).

        Raises
        ------
        StageTimeout
            It did not end within the bound; the workers are then cancelled.
        """
        self.collected = True
        bound = stage_timeout()
        try:
            value = self._future.result(timeout=bound)
        except cf.TimeoutError:
            if self._future.done():  # the call's own TimeoutError
                self._workers._forget(self)
                raise
            self._workers.cancel()
            raise _timeout(self._workers.stage, bound) from None
        except BaseException:
            self._workers._forget(self)
            raise
        self._workers._forget(self)
        return value


class Workers:
    """A few daemon threads that run submitted calls, used as a context manager.

    Leaving the block waits for the calls, within the bound, and raises the error of a call
    whose result was not collected. Leaving it with an error cancels first: calls not yet
    started never start, and ``on_cancel`` is called (again every :data:`POLL_S` while a
    call runs, since a DuckDB interrupt that comes between two queries is lost); the block's
    error is the one raised.

    Parameters
    ----------
    n
        Threads.
    stage
        What the calls are, for :class:`~nsysdiag.errors.StageTimeout`.
    on_cancel
        Tells running calls to stop, e.g. the ``interrupt`` method of the DuckDB connection
        they use. Calls can also poll :attr:`cancelled`.
    """

    def __init__(self, n: int = 1, *, stage: str, on_cancel: Callable[[], Any] | None = None):
        self.stage = stage
        self.cancelled = threading.Event()
        self._on_cancel = on_cancel
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        #: the calls submitted and not yet collected (a collected call's result belongs to
        #: its caller alone: kept here, the results of a long stream of calls, such as
        #: the decoded batches of a table, would all stay in memory until the block ends)
        self._calls: list[Call] = []
        self._calls_lock = threading.Lock()
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"nsysdiag: {stage}",
                                          daemon=True) for _ in range(n)]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            future, fn, args, kwargs = task
            del task
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # kept for Call.result
                    future.set_exception(exc)
            del future, fn, args, kwargs

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Call[T]:
        """Run ``fn(*args, **kwargs)`` on the next free thread."""
        if self._closed:
            raise RuntimeError("submit after the workers were closed")
        future: cf.Future = cf.Future()
        call: Call[T] = Call(self, future)
        with self._calls_lock:
            self._calls.append(call)
        self._tasks.put((future, fn, args, kwargs))
        return call

    def _forget(self, call: Call) -> None:
        """Stop tracking ``call``, collected (callers mostly collect in submission order:
        it is found first)."""
        with self._calls_lock:
            try:
                self._calls.remove(call)
            except ValueError:
                pass

    def cancel(self) -> None:
        """Calls not yet started never start; running calls are told to stop."""
        self.cancelled.set()
        with self._calls_lock:
            calls = list(self._calls)
        for call in calls:
            call._future.cancel()
        self._interrupt()

    def _interrupt(self) -> None:
        if self._on_cancel is not None:
            try:
                self._on_cancel()
            except Exception:  # the connection is already closed or idle: nothing to stop
                pass

    def close(self, *, failed: bool = False) -> None:
        """End the workers: cancel first when ``failed``; wait for the calls within the
        bound; unless ``failed``, raise the first error of a call nobody collected, or
        :class:`~nsysdiag.errors.StageTimeout` when a call did not end."""
        if self._closed:
            return
        self._closed = True
        if failed:
            self.cancel()
        for _ in self._threads:
            self._tasks.put(None)
        bound = stage_timeout()
        deadline = time.monotonic() + bound
        futures = [c._future for c in self._calls]
        while not all(f.done() for f in futures) and time.monotonic() < deadline:
            cf.wait(futures, timeout=min(POLL_S, max(0.0, deadline - time.monotonic())))
            if self.cancelled.is_set():
                self._interrupt()
        ended = join(self._threads,
                     bound=max(0.0, deadline - time.monotonic()) + POLL_S)
        if failed:
            return
        if not ended or not all(f.done() for f in futures):
            raise _timeout(self.stage, bound)
        for call in self._calls:
            if not call.collected and not call._future.cancelled():
                call.result()

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)
