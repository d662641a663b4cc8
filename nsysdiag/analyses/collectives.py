"""Collectives across ranks: who arrives last, how long the others wait for it.

A cross-report analysis: it takes a :class:`~nsysdiag.reportset.ReportSet` (the exports
of one distributed run, or one export holding several processes and GPUs), not one
report. The method is ``sql/collectives.sql``: each export's NCCL kernels are numbered
per rank, communicator and collective; the instances every rank holds are paired, each
rank's arrival is its kernel's start on the aligned timeline, and the last arrival's
rank caused the others' waits. ``docs/analyses/collectives.md`` explains the figures.

Clock alignment: exports are placed by their session starts (``ReportSet``); the
collectives' ends then check it, since a collective's kernels end together on every
rank. Where an export records no session start, or the ends disagree by more than
``Settings.rank_clock_tolerance_ns``, each export's clock error is fitted as a line over
time (offset and drift: least squares on its kernels' end - the instance's median end)
and taken out (``alignment = "collective_ends"``). Pairing is by sequence, not by time,
so a clock error never pairs the wrong instances.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..engine.database import connect
from ..settings import Settings
from .base import EMPTY, OK, AnalysisResult, figure, load_sql, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report
    from ..engine.protocols import ReportSetLike as ReportSet

NAME = "collectives"

#: the instances with the longest waits whose every rank's arrival and end is kept
#: (table ``slowest``), for the timeline of the slowest collectives
SLOWEST = 5


@dataclass(frozen=True)
class RankId:
    """One rank: a process on a GPU in one export (GPU -1: an MPI rank whose collectives
    were read from its calls, not from a GPU's kernels)."""

    index: int  #: position in the run, 0-based, in the order of :func:`label_ranks`
    label: str  #: "rank 3" (from the export's name or the order of the ranks)
    export: int  #: index of its export in the :class:`ReportSet`
    pid: int
    device_id: int


@dataclass(frozen=True)
class RankFigures:
    """One rank's part in the run's collectives."""

    rank: int  #: index of the rank (``CollectivesResult.ranks``)
    instances: int  #: collective instances it took part in
    waited_ns: int  #: time it spent waiting for the last rank to arrive, ns
    times_last: int  #: instances it arrived last at (with someone waiting)
    caused_wait_ns: int  #: the other ranks' waits at those instances, summed, ns
    delay_ns: int  #: at those instances, its arrival minus the next-latest one, summed, ns


@dataclass(frozen=True)
class RankOverlap:
    """How much of a rank's communication ran beside its compute."""

    rank: int
    nccl_ns: int  #: time in NCCL kernels, ns
    compute_ns: int  #: time in its other kernels, ns
    nccl_overlapped_ns: int  #: NCCL time during which one of its other kernels ran, ns


@dataclass(frozen=True)
class CollectivesResult(AnalysisResult):
    """Who the others waited for at the run's collectives."""

    analysis: str = "collectives"
    status: str = OK
    ranks: tuple[RankId, ...] = figure("the ranks: process and GPU in each export", ())
    alignment: str = figure("how the exports were placed on one timeline: session_start, "
                            "collective_ends or one_timeline (a single export)", "one_timeline")
    offsets_ns: tuple[int, ...] = figure("per export, the shift applied to its times, ns", ())
    drift_ppm: tuple[float, ...] = figure(
        "per export, the clock drift taken out with the collectives' ends (parts per million "
        "of elapsed time; 0 where placed by session start)", ())
    clock_residual_ns: int | None = figure(
        "after alignment, the largest over exports of |the median of (its kernels' end - "
        "the instance's median end)|, ns: how well the clocks agree", None)
    paired_by: str = figure("what the collectives were read from: nccl_kernels (each rank's "
                            "NCCL kernels; arrival = kernel start) or mpi_ranges (the MPI "
                            "calls nsys traces as NVTX ranges; arrival = call start)",
                            "nccl_kernels")
    instances: int = figure("collective instances every rank took part in", 0)
    unpaired: int = figure("NCCL kernels left out: their (communicator, collective, sequence) "
                           "is missing on some rank (the captures cover different stretches)", 0)
    collective_ns: int = figure("sum over instances of first arrival to median end, ns", 0)
    wait_ns: int = figure("all ranks' waits for the last arrival, summed, ns", 0)
    per_rank: tuple[RankFigures, ...] = figure("per rank: waits, times last, waits caused", ())
    overlap: tuple[RankOverlap, ...] = figure("per rank: NCCL time overlapped by compute", ())
    straggler: int | None = figure(
        "the rank that caused the largest share of the waits, when that share is above "
        "straggler_share_pct; None when lateness is spread over the ranks", None)
    straggler_share_pct: float = figure("the straggler's share of all waits caused, %", 0.0)

    def rank_label(self, index: int) -> str:
        return self.ranks[index].label

    def figure_json(self, name: str) -> Any:
        value = getattr(self, name)
        if isinstance(value, tuple):
            return [asdict(v) if is_dataclass(v) else v for v in value]
        return super().figure_json(name)


@dataclass(frozen=True)
class ExportPart:
    """What the pairing reads of one export, each export read on its own
    (``ReportSet.map``): its NCCL kernels and MPI collective calls on its own clock, its
    processes' NCCL and compute time, and its session start."""

    kernels: pa.Table | None  #: the `nccl_kernels` step's rows (None: no kernels)
    overlap: tuple[dict[str, Any], ...]  #: the `overlap` step's rows, per process and GPU
    session_start_ns: int | None  #: the export's session start, wall clock (ns)
    mpi: pa.Table | None = None  #: the `mpi_calls` step's rows (None: no NVTX ranges)

    def collectives(self, paired_by: str) -> pa.Table | None:
        """The rows pairing reads when the run is ``paired_by`` one source."""
        return self.kernels if paired_by == "nccl_kernels" else self.mpi


def export_part(rep: Report) -> ExportPart:
    """One export's part of the pairing (a module-level function: it runs in workers)."""
    start = rep.session_start_utc_ns()
    mpi = run_query(rep, NAME, "mpi_calls") if rep.probe.present("nvtx_ranges") else None
    if not rep.probe.present("kernels"):
        return ExportPart(None, (), start, mpi)
    return ExportPart(run_query(rep, NAME, "nccl_kernels"),
                      tuple(run_query(rep, NAME, "overlap").to_pylist()), start, mpi)


def _paired_by(parts: Sequence[ExportPart]) -> str:
    """NCCL kernels where any export holds some (an MPI call and a kernel of one
    collective are not one arrival), else the MPI calls."""
    return ("nccl_kernels" if any(p.kernels is not None and p.kernels.num_rows for p in parts)
            else "mpi_ranges")


def _per_rank_kernels(paths: Sequence[str | Path], parts: Sequence[ExportPart], paired_by: str
                      ) -> tuple[list[RankId], pa.Table]:
    """Every export's collectives (NCCL kernels or MPI calls, ``paired_by``) with their
    rank, times still on the export's own clock."""
    read = [(e, p.collectives(paired_by)) for e, p in enumerate(parts)]
    tables = [t.append_column("export", pa.array([e] * t.num_rows, pa.int64()))
              for e, t in read if t is not None]
    if not tables:
        return [], pa.table({})
    kernels = pa.concat_tables(tables)
    keys = list(zip(*(kernels.column(c).to_pylist() for c in ("export", "pid", "device_id"))))
    ranks = label_ranks(paths, sorted(set(keys)))
    index = {(r.export, r.pid, r.device_id): r.index for r in ranks}
    rank_col = [index[k] for k in keys]
    return ranks, kernels.append_column("rank", pa.array(rank_col, pa.int64()))


_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def label_ranks(paths: Sequence[str | Path], found: Sequence[tuple[int, int, int]]
                ) -> list[RankId]:
    """Name the ranks ``found`` ((export, pid, device_id) triples).

    One rank per export whose names all carry a distinct number ("rank3", "run_3") takes
    that number; otherwise ranks are numbered in export order, then device, then process.
    """
    ordered = sorted(found, key=lambda t: (t[0], t[2], t[1]))
    per_export = [sum(1 for t in ordered if t[0] == e) for e in range(len(paths))]
    numbers = []
    for p in paths:
        stem = Path(p).name
        m = _RANK_IN_NAME.search(stem) or _LAST_NUMBER.search(stem.split(".")[0])
        numbers.append(int(m.group(1)) if m else None)
    by_name = (all(n == 1 for n in per_export) and None not in numbers
               and len(set(numbers)) == len(numbers))
    if by_name:
        ordered.sort(key=lambda t: numbers[t[0]])
    return [RankId(i, f"rank {numbers[e] if by_name else i}", e, pid, dev)
            for i, (e, pid, dev) in enumerate(ordered)]


def _shift(kernels: pa.Table, offsets: list[int], fits: list[tuple[float, float]] | None = None
           ) -> pa.Table:
    """Times moved by each export's offset, then (``fits``) less its clock error
    ``a + b * t`` at that time."""
    export = kernels.column("export")
    off = pc.take(pa.array(offsets, pa.int64()), export)
    if fits is not None:
        a = pc.take(pa.array([f[0] for f in fits], pa.float64()), export)
        b = pc.take(pa.array([f[1] for f in fits], pa.float64()), export)
    out = kernels
    for col in ("start_ns", "end_ns"):
        t = pc.add(kernels.column(col), off)
        if fits is not None:
            err = pc.add(a, pc.multiply(b, pc.cast(t, pa.float64())))
            t = pc.subtract(t, pc.cast(pc.round(err), pa.int64()))
        out = out.set_column(out.schema.get_field_index(col), col, t)
    return out


def _complete(con, kernels: pa.Table, n_ranks: int) -> pa.Table:
    """The kernels of the instances every rank holds, registered as `arrivals`."""
    con.register("k", kernels)
    arrivals = con.sql(load_sql(NAME)["complete"], params={"n": n_ranks}).to_arrow_table()
    con.register("arrivals", arrivals)
    return arrivals


def _per_export(con, query: str, n_exports: int, empty: Any) -> list[Any]:
    """One row per export of ``query`` over `arrivals` (its columns after the export as a
    tuple, or the one value), ``empty`` for an export without a row."""
    out = [empty] * n_exports
    for e, *values in con.sql(load_sql(NAME)[query]).fetchall():
        out[e] = values[0] if len(values) == 1 else tuple(values)
    return out


def run(reports: ReportSet, *, settings: Settings | None = None) -> CollectivesResult:
    """Pair the collectives of the ranks in ``reports`` and measure who waited for whom."""
    settings = settings or Settings()
    parts = reports.map(export_part)
    paired_by = _paired_by(parts)
    ranks, kernels = _per_rank_kernels(reports.paths, parts, paired_by)
    if len(ranks) < 2:
        message = ("fewer than two ranks run NCCL kernels or MPI collectives: nothing to pair"
                   if ranks else "no NCCL kernels or traced MPI collectives in these exports")
        return CollectivesResult(status=EMPTY, ranks=tuple(ranks), paired_by=paired_by,
                                 message=message)
    n_exports = len(reports)
    con = connect()
    try:
        if n_exports == 1:
            alignment, offsets = "one_timeline", [0]
        else:
            starts = [p.session_start_ns for p in parts]
            session = [None if s is None or starts[0] is None else s - starts[0]
                       for s in starts]
            alignment = "session_start" if None not in session else "collective_ends"
            offsets = [s or 0 for s in session]
        drift = [0.0] * n_exports
        arrivals = _complete(con, _shift(kernels, offsets), len(ranks))
        residual = _per_export(con, "end_residuals", n_exports, None)
        known = [abs(r) for r in residual if r is not None]
        if n_exports > 1 and known and (alignment == "collective_ends"
                                         or max(known) > settings.rank_clock_tolerance_ns):
            alignment = "collective_ends"
            fits = [(float(a or 0.0), float(b)) for a, b in
                    _per_export(con, "end_fits", n_exports, (0.0, 0.0))]
            drift = [b for _, b in fits]
            arrivals = _complete(con, _shift(kernels, offsets, fits), len(ranks))
            offsets = [o - round(a) for o, (a, _) in zip(offsets, fits)]
            residual = _per_export(con, "end_residuals", n_exports, None)
        if not arrivals.num_rows:
            return CollectivesResult(status=EMPTY, ranks=tuple(ranks), alignment=alignment,
                                     paired_by=paired_by, offsets_ns=tuple(offsets),
                                     unpaired=kernels.num_rows,
                                     message="no collective instance is held by every rank")
        inst = con.sql(load_sql(NAME)["instances"]).to_arrow_table()
        con.register("instances", inst)
        per_rank = records(con.sql(load_sql(NAME)["per_rank"]).to_arrow_table(), RankFigures)
        slowest = con.sql(load_sql(NAME)["slowest"], params={"n": SLOWEST}).to_arrow_table()
    finally:
        con.close()
    overlap = _overlap(parts, ranks)
    caused = [r.caused_wait_ns for r in per_rank]
    total_caused = sum(caused)
    top = max(range(len(per_rank)), key=caused.__getitem__)
    share = 100.0 * caused[top] / total_caused if total_caused else 0.0
    straggler = per_rank[top].rank if share > settings.straggler_share_pct else None
    known = [abs(r) for r in residual if r is not None]
    return CollectivesResult(
        ranks=tuple(ranks), alignment=alignment, paired_by=paired_by, offsets_ns=tuple(offsets),
        drift_ppm=tuple(round(b * 1e6, 3) for b in drift),
        clock_residual_ns=max(known) if known else None, instances=inst.num_rows,
        unpaired=kernels.num_rows - arrivals.num_rows,
        collective_ns=int(pc.sum(pc.add(pc.subtract(inst.column("last_arrival_ns"),
                                                    inst.column("first_arrival_ns")),
                                        inst.column("transfer_ns"))).as_py()),
        wait_ns=int(sum(r.waited_ns for r in per_rank)), per_rank=tuple(per_rank),
        overlap=tuple(overlap), straggler=straggler, straggler_share_pct=round(share, 1),
        tables={"instances": inst, "slowest": slowest}, main="instances",
        message=f"{inst.num_rows} collective instances over {len(ranks)} ranks")


def _overlap(parts: Sequence[ExportPart], ranks: list[RankId]) -> list[RankOverlap]:
    index = {(r.export, r.pid, r.device_id): r.index for r in ranks}
    out = []
    for e, part in enumerate(parts):
        for row in part.overlap:
            i = index.get((e, row["pid"], row["device_id"]))
            if i is not None:
                out.append(RankOverlap(i, int(row["nccl_ns"]), int(row["compute_ns"]),
                                       int(row["nccl_overlapped_ns"])))
    return sorted(out, key=lambda o: o.rank)
