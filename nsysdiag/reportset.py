"""Several exports of one job analysed together: the ranks of a distributed run.

A :class:`ReportSet` names one export per rank (``nsys profile -o rank%q{RANK}`` writes
one per rank) and places them on one timeline: each export's times count from its own
session start, so an export's offset is its session start's wall-clock time
(``TARGET_INFO_SESSION_START_TIME.utcEpochNs``) minus the first export's. That is as
good as the hosts' clocks agree (one host: exact; several: NTP or PTP); the cross-rank
analysis checks it against the collectives' ends, which NCCL's ranks reach together
(``analyses.collectives``).

A cross-report analysis reads each export on its own (:meth:`ReportSet.map`): one export
open at a time, or each in a worker process (``workers``) or on a Dask cluster
(``dask``), so a run of many ranks neither holds every export open nor reads them one
after another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .engine import fanout
from .errors import NsysdiagError, UsageError
from .report import Report

T = TypeVar("T")


@dataclass(frozen=True)
class _Failed:
    """An export's own error, sent back from a worker (an exception may not pickle)."""

    kind: type[NsysdiagError]
    message: str
    path: str | None
    hint: str | None

    def error(self) -> NsysdiagError:
        kind = self.kind if self.kind.__init__ is NsysdiagError.__init__ else NsysdiagError
        return kind(self.message, path=self.path, hint=self.hint)


def _run_on(path: str, options: dict[str, Any]) -> Any:
    """A worker's part: open the export, run the function on it, close it."""
    try:
        with Report(path, **options["open"]) as rep:
            return options["fn"](rep)
    except NsysdiagError as exc:
        return _Failed(type(exc), exc.message, exc.path or path, exc.hint)
    except Exception as exc:  # noqa: BLE001 - a fault of ours: one line there, not a traceback
        return _Failed(NsysdiagError, f"internal error: {type(exc).__name__}: {exc}", path,
                       None)


class ReportSet:
    """Several exports read together (a context manager, like :class:`Report`).

    Parameters
    ----------
    paths
        The exports, one per rank or one holding several processes/GPUs.
    workers
        Worker processes for :meth:`map` (1: this process, one export at a time; None:
        the CPU count).
    dask
        The address of a Dask scheduler for :meth:`map` (instead of local workers).
    open_kwargs
        Passed to each :class:`Report` (``cache``, ``cache_dir``, ...).
    """

    def __init__(self, paths: Sequence[str | Path], *, workers: int | None = 1,
                 dask: str | None = None, **open_kwargs: Any):
        if not paths:
            raise UsageError("no exports given")
        if len({Path(p).resolve() for p in paths}) < len(paths):
            raise UsageError("an export is given twice")
        if workers is not None and workers < 1:
            raise UsageError(f"workers must be at least 1, got {workers!r}")
        self.paths = [Path(p) for p in paths]
        self.workers, self.dask, self.open_kwargs = workers, dask, open_kwargs
        self._open: dict[int, Report] = {}

    def __len__(self) -> int:
        return len(self.paths)

    def report(self, index: int) -> Report:
        """The export at ``index``, opened (and kept open until :meth:`close`)."""
        if index not in self._open:
            self._open[index] = Report(self.paths[index], **self.open_kwargs)
        return self._open[index]

    def __iter__(self) -> Iterator[Report]:
        """The exports, opened, in the order given (each kept open until :meth:`close`)."""
        return (self.report(i) for i in range(len(self)))

    def map(self, fn: Callable[[Report], T]) -> list[T]:
        """``fn(report)`` of each export, in the order given. Each export is opened for it
        and closed after, in this process one at a time or in the set's workers (``fn``
        must then be a module-level function whose result pickles). An export's own
        error is raised here, as it was raised there; a worker that died without a result
        raises :class:`~nsysdiag.errors.NsysdiagError` naming the export."""
        if self.workers == 1 and not self.dask:
            out = []
            for i, path in enumerate(self.paths):
                if i in self._open:
                    out.append(fn(self._open[i]))
                    continue
                with Report(path, **self.open_kwargs) as rep:
                    out.append(fn(rep))
            return out
        todo = [(str(i), str(p)) for i, p in enumerate(self.paths)]
        got: dict[int, Any] = {}
        for key, value in fanout.fan_out(_run_on, todo, {"fn": fn, "open": self.open_kwargs},
                                         self.workers, self.dask, stage="reading the exports",
                                         items="exports"):
            if isinstance(value, fanout.Lost):
                raise NsysdiagError(value.why, path=str(self.paths[int(key)]))
            if isinstance(value, _Failed):
                raise value.error()
            got[int(key)] = value
        return [got[i] for i in range(len(self))]

    def close(self) -> None:
        for r in self._open.values():
            r.close()
        self._open.clear()

    def __enter__(self) -> ReportSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

