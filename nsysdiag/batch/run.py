"""Diagnose many reports: local processes or a Dask cluster, resumable, failures recorded.

Every finished report is saved at once as ``<output>.parts/<key>.json`` (written to a
temporary file and renamed), so a batch that is killed loses nothing it finished and a
rerun skips those reports unless ``force``. At the end the parts are combined into three
Parquet files, each written atomically:

``<output>``                one row per report: key figures and the verdict, or the error
``<stem>.findings.parquet`` one row per finding, keyed by ``report``
``<stem>.kernels.parquet``  one row per (report, kernel name): per-kernel summary
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..engine import threads
from ..errors import StageTimeout, UsageError
from ..fileio import write_atomic

EXPORT_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")

# The three tables' columns. The schemas are explicit because the records differ: a failed
# report carries ``exit_code`` and no figures, a diagnosed one figures and no exit code;
# a schema inferred from the first record would drop the other kind's columns.
#: ``<output>``: one row per report (figures null for a failed one, ``exit_code`` null for
#: a diagnosed one)
REPORTS_SCHEMA = pa.schema(
    [
        ("report", pa.string()),
        ("status", pa.string()),  # ok or error
        ("error", pa.string()),  # the one-line error of a failed report
        ("exit_code", pa.int64()),  # the exit code the command line gives that error
        ("verdict", pa.string()),
        ("confidence", pa.float64()),
        ("summary", pa.string()),
        ("unit", pa.string()),
        ("n", pa.int64()),
        ("p50_ns", pa.float64()),
        ("p90_ns", pa.float64()),
        ("p99_ns", pa.float64()),
        ("p99_over_p50", pa.float64()),
        ("shape", pa.string()),
        ("shape_confidence", pa.float64()),
        ("launch_gap_count", pa.int64()),
        ("launch_gap_p50_ns", pa.float64()),
        ("launch_gap_p99_ns", pa.float64()),
        ("cuda_graphs", pa.bool_()),
    ]
)
#: ``<stem>.findings.parquet``: one row per finding (``evidence`` lines joined by newlines)
FINDINGS_SCHEMA = pa.schema(
    [
        ("report", pa.string()),
        ("layer", pa.string()),
        ("severity", pa.string()),
        ("title", pa.string()),
        ("evidence", pa.string()),
        ("fix", pa.string()),
        ("check", pa.string()),
    ]
)
#: ``<stem>.kernels.parquet``: one row per (report, kernel name); durations in ns
KERNELS_SCHEMA = pa.schema(
    [
        ("report", pa.string()),
        ("name", pa.string()),
        ("instances", pa.int64()),
        ("total_ns", pa.int64()),
        ("avg_ns", pa.float64()),
        ("med_ns", pa.float64()),
        ("min_ns", pa.int64()),
        ("max_ns", pa.int64()),
    ]
)


def expand_inputs(inputs: Iterable[str]) -> list[Path]:
    """Files, directories (searched recursively for exports) and glob patterns -> paths.

    A directory holding ``*.parquet`` tables is itself one (Parquet) export.
    """
    out: list[Path] = []
    for item in inputs:
        matches = [Path(m) for m in sorted(glob.glob(item, recursive=True))] or [Path(item)]
        for p in matches:
            if p.is_dir() and not any(p.glob("*.parquet")):
                for f in sorted(p.rglob("*")):
                    if f.suffix.lower() in EXPORT_SUFFIXES and f.is_file():
                        out.append(f)
                    elif f.is_dir() and any(f.glob("*.parquet")):
                        out.append(f)
            else:
                out.append(p)
    seen: set[Path] = set()
    unique = []
    for p in out:
        r = p.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(p)
    return unique


def report_key(path: Path) -> str:
    """Identity of an input for resuming: resolved path, size and mtime."""
    try:
        st = path.stat()
        ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        ident = f"{path.resolve()}|missing"
    return hashlib.sha256(ident.encode()).hexdigest()[:20]


def diagnose_one(path: str, options: dict[str, Any]) -> dict[str, Any]:
    """Diagnose one report; never raises: errors become an ``error`` record."""
    from .. import diagnose
    from ..analyses.kernel_summary import KernelSummaryResult
    from ..errors import NsysdiagError
    from ..report import Report

    record: dict[str, Any] = {"report": path, "status": "ok", "error": None}
    try:
        with Report(
            path,
            cache=options.get("cache", True),
            cache_dir=options.get("cache_dir"),
            nsys=options.get("nsys"),
        ) as rep:
            d = diagnose(rep, range_name=options.get("range_name"))
            ks = rep.analysis("kernel_summary")
            kernels = ks.per_name() if isinstance(ks, KernelSummaryResult) and ks.ok else []
        t, v, g = d.tail, d.verdict, d.launch_gaps
        record.update(
            {
                "verdict": v.layer,
                "confidence": v.confidence,
                "summary": v.summary,
                "unit": t.unit,
                "n": t.n,
                "p50_ns": t.p50_ns,
                "p90_ns": t.p90_ns,
                "p99_ns": t.p99_ns,
                "p99_over_p50": t.p99_over_p50,
                "shape": t.shape,
                "shape_confidence": t.shape_confidence,
                "launch_gap_count": g.count,
                "launch_gap_p50_ns": g.p50_ns,
                "launch_gap_p99_ns": g.p99_ns,
                "cuda_graphs": bool(d.cuda_graphs.in_use),
                "findings": [f.to_dict() for f in d.findings],
                "kernels": [
                    {
                        "name": k.name,
                        "instances": k.instances,
                        "total_ns": k.total_ns,
                        "avg_ns": k.avg_ns,
                        "med_ns": k.median_ns,
                        "min_ns": k.min_ns,
                        "max_ns": k.max_ns,
                    }
                    for k in kernels
                ],
            }
        )
    except NsysdiagError as exc:
        record.update(status="error", error=exc.one_line(), exit_code=exc.exit_code)
    except Exception as exc:  # one bad report must not stop the batch
        record.update(
            status="error", error=f"internal error: {type(exc).__name__}: {exc}", exit_code=70
        )
    return record


@dataclass(frozen=True)
class BatchSummary:
    """What a batch did."""

    output: Path
    total: int
    done: int
    skipped: int
    failed: int

    def __str__(self) -> str:
        return (
            f"{self.total} reports: {self.done} diagnosed, {self.skipped} already done, "
            f"{self.failed} failed -> {self.output}"
        )


def _save_part(parts: Path, key: str, record: dict[str, Any]) -> None:
    from ..formatting import dumps

    text = dumps(record)
    write_atomic(parts / f"{key}.json", lambda tmp: Path(tmp).write_text(text))


def _results(
    paths: list[Path],
    todo: list[tuple[str, Path]],
    options: dict[str, Any],
    workers: int | None,
    dask: str | None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, record) of each report as it finishes. A report's own failure is its record
    (``diagnose_one`` never raises); if no report finishes within the stage bound the batch
    stops with :class:`~nsysdiag.errors.StageTimeout` (the finished parts are kept), and
    when the batch stops early the reports not started are cancelled and local workers
    ended."""
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
            futures = {client.submit(diagnose_one, str(p), options, pure=False): k for k, p in todo}
            try:
                yield from _as_finished(futures, first_dask)
            finally:
                client.cancel([f for f in futures if not f.done()])
        return
    if workers == 1:
        for k, p in todo:
            yield k, diagnose_one(str(p), options)
        return

    def first_local(pending: set, bound: float) -> tuple[set, set]:
        done, rest = wait(pending, timeout=bound, return_when=FIRST_COMPLETED)
        return done, rest

    pool = ProcessPoolExecutor(max_workers=workers)
    finished = False
    try:
        futures = {pool.submit(diagnose_one, str(p), options): k for k, p in todo}
        yield from _as_finished(futures, first_local)
        finished = True
    finally:
        # a worker may be stuck in a report: when the batch stops early its processes are
        # ended, or the interpreter's exit would wait for them (the executor keeps them in
        # ``_processes``, which its shutdown clears)
        procs = [] if finished else list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=finished, cancel_futures=True)
        for proc in procs:
            proc.kill()


def _as_finished(futures: dict, first: Callable[[set, float], tuple[set, set]]
                 ) -> Iterator[tuple[str, dict[str, Any]]]:
    """(key, record) of the futures as they finish; ``first(pending, bound)`` waits for the
    first to finish, at most ``bound`` seconds (done, not done)."""
    pending = set(futures)
    while pending:
        bound = threads.stage_timeout()
        done, pending = first(pending, bound)
        if not done:
            raise StageTimeout("batch", bound, f"every one of {len(pending)} running reports")
        for fut in done:
            yield futures[fut], fut.result()


def run_batch(
    inputs: Iterable[str],
    output: str | Path,
    *,
    force: bool = False,
    workers: int | None = None,
    dask: str | None = None,
    range_name: str | None = None,
    cache: bool = True,
    cache_dir: str | None = None,
    nsys: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> BatchSummary:
    """Diagnose every report in ``inputs`` and write the combined results.

    Parameters
    ----------
    inputs
        Files, directories and glob patterns.
    output
        The per-report Parquet file; long tables go beside it.
    force
        Re-diagnose reports that a previous run finished.
    workers
        Local worker processes (default: the CPU count; 1 runs in this process).
    dask
        Address of a Dask distributed scheduler to run on instead of local processes.
    """
    out = Path(output)
    if out.suffix != ".parquet":
        raise UsageError(f"output must end in .parquet, not {out.name!r}")
    paths = expand_inputs(inputs)
    if not paths:
        raise UsageError("no reports found in the inputs")
    parts = out.with_name(out.name + ".parts")
    parts.mkdir(parents=True, exist_ok=True)
    keyed = [(report_key(p), p) for p in paths]
    todo = [(k, p) for k, p in keyed if force or not (parts / f"{k}.json").exists()]
    options = {"range_name": range_name, "cache": cache, "cache_dir": cache_dir, "nsys": nsys}
    done = 0
    for key, record in _results(paths, todo, options, workers, dask):
        _save_part(parts, key, record)
        done += 1
        if progress:
            progress(done, len(todo))
    records = [
        json.loads((parts / f"{k}.json").read_text())
        for k, _ in keyed
        if (parts / f"{k}.json").exists()
    ]
    _combine(records, out)
    failed = sum(1 for r in records if r["status"] != "ok")
    return BatchSummary(out, len(paths), done, len(paths) - len(todo), failed)


def _combine(records: list[dict[str, Any]], out: Path) -> None:
    main = [{k: v for k, v in r.items() if k not in ("findings", "kernels")} for r in records]
    findings = [{"report": r["report"], **f} for r in records for f in r.get("findings") or []]
    for f in findings:
        f["evidence"] = "\n".join(f.get("evidence") or [])
    kernels = [{"report": r["report"], **k} for r in records for k in r.get("kernels") or []]
    stem = out.name[: -len(".parquet")]
    for path, rows, schema in (
        (out, main, REPORTS_SCHEMA),
        (out.with_name(f"{stem}.findings.parquet"), findings, FINDINGS_SCHEMA),
        (out.with_name(f"{stem}.kernels.parquet"), kernels, KERNELS_SCHEMA),
    ):
        _check_columns(rows, schema)
        table = pa.Table.from_pylist(rows, schema=schema)
        write_atomic(path, lambda tmp, t=table: pq.write_table(t, tmp))


def _check_columns(rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    """A record key the schema lacks would be dropped silently: fail instead (a field added
    to the records needs its column)."""
    extra = {k for row in rows for k in row} - set(schema.names)
    if extra:
        raise AssertionError(f"batch records carry columns the schema lacks: {sorted(extra)}")
