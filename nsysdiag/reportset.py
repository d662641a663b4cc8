"""Several exports of one job analysed together: the ranks of a distributed run.

A :class:`ReportSet` holds one :class:`~nsysdiag.Report` per export (``nsys profile -o
rank%q{RANK}`` writes one per rank) and places them on one timeline: each export's times
count from its own session start, so an export's offset is its session start's wall-clock
time (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``) minus the first export's. That is as
good as the hosts' clocks agree (one host: exact; several: NTP or PTP); the cross-rank
analysis checks it against the collectives' ends, which NCCL's ranks reach together.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import UsageError
from .report import Report


class ReportSet:
    """Several exports opened together (a context manager, like :class:`Report`).

    Parameters
    ----------
    paths
        The exports, one per rank or one holding several processes/GPUs.
    open_kwargs
        Passed to each :class:`Report` (``cache``, ``cache_dir``, ...).
    """

    def __init__(self, paths: Sequence[str | Path], **open_kwargs: Any):
        if not paths:
            raise UsageError("no exports given")
        if len({Path(p).resolve() for p in paths}) < len(paths):
            raise UsageError("an export is given twice")
        self.reports: list[Report] = []
        try:
            for p in paths:
                self.reports.append(Report(p, **open_kwargs))
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[Report]:
        return iter(self.reports)

    def __len__(self) -> int:
        return len(self.reports)

    def session_offsets_ns(self) -> list[int | None]:
        """Each export's session start minus the first export's, ns (None where an export
        does not record its session start, or the first does not)."""
        starts = [r.session_start_utc_ns() for r in self.reports]
        ref = starts[0]
        return [None if s is None or ref is None else s - ref for s in starts]

    def close(self) -> None:
        for r in self.reports:
            r.close()

    def __enter__(self) -> ReportSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
