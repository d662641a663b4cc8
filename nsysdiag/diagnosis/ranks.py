"""One diagnosis over a distributed run: the straggler at the collectives and its cause.

``diagnose_ranks(paths)`` opens the exports as a :class:`~nsysdiag.reportset.ReportSet`,
pairs their collectives (:mod:`nsysdiag.analyses.collectives`: who arrived last, how long
the others waited), and where one rank caused most of the waits, diagnoses that rank's
own export with the single-rank chain (:func:`nsysdiag.diagnose`): its latency tail's
layer and mechanism are the straggler's cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..analyses import collectives
from ..analyses.collectives import CollectivesResult
from ..formatting import dumps, fmt_ns, format_rows
from ..report import Report
from ..reportset import ReportSet
from ..settings import Settings
from .engine import diagnose
from .model import Diagnosis


@dataclass(frozen=True)
class RanksDiagnosis:
    """The straggler of a distributed run, what it cost, and its own diagnosis."""

    paths: tuple[str, ...]
    collectives: CollectivesResult
    #: the straggler's own diagnosis: its export's, or where its export holds other ranks
    #: too, its process' alone (None when no straggler, or when one process drives the
    #: straggler's GPU and another rank's: its tail is then not the straggler's alone)
    straggler_diagnosis: Diagnosis | None = None

    @property
    def straggler_label(self) -> str | None:
        c = self.collectives
        return None if c.straggler is None else c.rank_label(c.straggler)

    def headline(self) -> str:
        """The verdict in one line."""
        c = self.collectives
        if not c.ok:
            return f"NO VERDICT: {c.message}"
        if c.straggler is None:
            return (f"NO SINGLE STRAGGLER: the waits at {c.instances} collectives are spread "
                    f"over the ranks (the most any rank caused is {c.straggler_share_pct:.0f}%)")
        s = c.per_rank[c.straggler]
        line = (f"STRAGGLER: {self.straggler_label} arrived last at {s.times_last} of "
                f"{c.instances} collectives; the others waited {fmt_ns(s.caused_wait_ns)} for "
                f"it ({c.straggler_share_pct:.0f}% of all waits), and the run lost "
                f"{fmt_ns(s.delay_ns)} to it")
        d = self.straggler_diagnosis
        if d is not None and d.verdict.mechanism is not None:
            line += f". Its own cause: {d.verdict.layer.upper()} - {d.verdict.mechanism.words}"
        elif d is not None:
            line += f". Its own diagnosis: {d.verdict.layer} ({d.verdict.summary})"
        return line

    def to_dict(self) -> dict[str, Any]:
        c = self.collectives
        return {
            "paths": list(self.paths),
            "headline": self.headline(),
            "straggler": self.straggler_label,
            "collectives": c.to_dict(tables=False),
            "ranks": [{"label": r.label, "export": self.paths[r.export], "pid": r.pid,
                       "device_id": r.device_id} for r in c.ranks],
            "straggler_diagnosis": (self.straggler_diagnosis.to_dict()
                                    if self.straggler_diagnosis is not None else None),
        }

    def to_json(self) -> str:
        return dumps(self.to_dict())

    def __str__(self) -> str:
        c = self.collectives
        lines = [self.headline(), ""]
        if c.ok:
            lines.append(f"clocks      {c.alignment.replace('_', ' ')}; the collectives' ends "
                         f"agree to {fmt_ns(c.clock_residual_ns)} (the worst export's median)")
            source = "kernels" if c.paired_by == "nccl_kernels" else "MPI calls"
            lines.append(f"collectives {c.instances} instances paired over {len(c.ranks)} "
                         f"ranks, {c.unpaired} {source} unpaired; first arrival to end "
                         f"{fmt_ns(c.collective_ns)} in all, of which waiting "
                         f"{fmt_ns(c.wait_ns)} summed over ranks")
            overlap = {o.rank: o for o in c.overlap}
            rows = []
            for r in c.per_rank:
                o = overlap.get(r.rank)
                share = (f"{100 * o.nccl_overlapped_ns / o.nccl_ns:.0f}%"
                         if o is not None and o.nccl_ns else "-")
                device = c.ranks[r.rank].device_id
                rows.append([c.rank_label(r.rank), c.ranks[r.rank].pid,
                             device if device >= 0 else "-", r.times_last,
                             fmt_ns(r.caused_wait_ns), fmt_ns(r.waited_ns), share])
            lines += ["", format_rows(["rank", "pid", "gpu", "last at", "others waited",
                                       "it waited", "comm overlapped"], rows)]
        d = self.straggler_diagnosis
        if d is not None:
            where = self.paths[c.ranks[c.straggler].export]
            if d.pid is not None:
                where = f"process {d.pid} of {where}"
            lines += ["", f"the straggler's own diagnosis ({where}):", f"  {d.verdict.summary}"]
            if d.verdict.mechanism is not None:
                lines.append(f"  what to do: {d.verdict.mechanism.action}")
        return "\n".join(lines)


def diagnose_ranks(paths: list[str | Path], *, settings: Settings | None = None,
                   workers: int | None = 1, dask: str | None = None,
                   **open_kwargs: Any) -> RanksDiagnosis:
    """Diagnose a distributed run from its exports (one per rank, or one holding several
    processes/GPUs): the straggler at the collectives, its cost and its own cause.

    Each export is read on its own: in this process one at a time (``workers`` 1, each
    query using every core), in ``workers`` processes (None: the CPU count) or on the
    Dask scheduler at ``dask``."""
    settings = settings or Settings()
    with ReportSet(paths, workers=workers, dask=dask, **open_kwargs) as rs:
        result = collectives.run(rs, settings=settings)
        straggler_diagnosis = None
        if result.ok and result.straggler is not None:
            rank = result.ranks[result.straggler]
            sharing = [r for r in result.ranks if r.export == rank.export and r is not rank]
            if not sharing:
                straggler_diagnosis = diagnose(rs.report(rank.export), settings=settings)
            elif all(r.pid != rank.pid for r in sharing):
                # one export of several ranks: the straggler's process read alone
                with Report(paths[rank.export], pid=rank.pid, **open_kwargs) as rep:
                    straggler_diagnosis = diagnose(rep, settings=settings)
    return RanksDiagnosis(tuple(str(p) for p in paths), result, straggler_diagnosis)
