"""Diagnose many reports: local processes or a Dask cluster, resumable, failures recorded.

Every finished report is saved at once as ``<output>.parts/<key>.json`` (written to a
temporary file and renamed), so a batch that is killed loses nothing it finished and a
rerun skips those reports unless ``force``.

Each local report runs in a process of its own: a worker that dies (killed, out of
memory) costs that report only, recorded with the signal that ended it. Before a report
starts its part is written as "lost" with one more crash counted, so a report that takes
the whole batch down with it is counted too; a report whose runs crashed is retried once,
then recorded as crashing for good (``force`` tries it again). A failure that may pass
(the environment's: disk full, memory limit, Ctrl-C; exit 75 or 130) is recorded but not
final: a rerun tries the report again. At the end the parts are combined into three
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..engine import fanout
from ..errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_RESOURCE, UsageError
from ..fileio import content_identity, write_atomic

#: crashes (a worker or the batch dying during the report) after which a report is
#: recorded as crashing rather than tried again
CRASHES_FINAL = 2
#: exit codes of failures that may pass: recorded, but tried again by a rerun
TRANSIENT_EXIT_CODES = (EXIT_RESOURCE, EXIT_INTERRUPTED)
#: part fields that steer resuming, not results (left out of the combined tables)
PART_FIELDS = ("final", "crashes")

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
    """Identity of an input for resuming: its content identity
    (``fileio.content_identity``: resolved path, inode, size, mtime, ctime, sampled
    bytes)."""
    try:
        ident = content_identity(path)
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
            ks = rep.kernel_summary()
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
        from ..engine.database import environment_error

        other = environment_error(exc, options.get("cache_dir") and Path(options["cache_dir"]))
        if isinstance(other, NsysdiagError):
            record.update(status="error", error=other.one_line(), exit_code=other.exit_code)
        elif isinstance(other, KeyboardInterrupt):
            raise other from None
        else:
            record.update(status="error", error=f"internal error: {type(exc).__name__}: {exc}",
                          exit_code=EXIT_INTERNAL)
    return record


def _crash_record(path: str, why: str, crashes: int) -> dict[str, Any]:
    """The record of a report whose run ended without a result (``why``), after
    ``crashes`` such runs."""
    final = crashes >= CRASHES_FINAL
    return {"report": path, "status": "error", "exit_code": EXIT_INTERNAL,
            "error": f"{why}; " + (f"crashed {crashes} times: recorded as crashing "
                                   "(--force tries it again)" if final
                                   else "tried again by the next run"),
            "final": final, "crashes": crashes}


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


def _read_part(parts: Path, key: str) -> dict[str, Any] | None:
    try:
        record = json.loads((parts / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None  # absent, or damaged: run the report again
    return record if isinstance(record, dict) and "status" in record else None


def _final(record: dict[str, Any]) -> bool:
    """Whether a stored record is the report's last word (else a rerun tries again)."""
    if "final" in record:
        return bool(record["final"])
    return record["status"] == "ok" or record.get("exit_code") not in TRANSIENT_EXIT_CODES


def _results(
    todo: list[tuple[str, Path]],
    options: dict[str, Any],
    workers: int | None,
    dask: str | None,
) -> Iterator[tuple[str, dict[str, Any] | str]]:
    """(key, record) of each report as it finishes; (key, "started") as one starts where
    that is known (local runs), and (key, why) for one whose run ended without a record.
    A report's own failure is its record (``diagnose_one`` never raises); if no report
    finishes within the stage bound the batch stops with
    :class:`~nsysdiag.errors.StageTimeout` (the finished parts are kept), and when the
    batch stops early the reports not started are cancelled and local workers ended
    (:func:`~nsysdiag.engine.fanout.fan_out`)."""
    for key, out in fanout.fan_out(diagnose_one, [(k, str(p)) for k, p in todo], options,
                                   workers, dask, started=True, stage="batch", items="reports"):
        yield key, out.why if isinstance(out, fanout.Lost) else out


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
    stored = {k: _read_part(parts, k) for k, _ in keyed}
    todo = [(k, p) for k, p in keyed if force or stored[k] is None or not _final(stored[k])]
    # crashes counted by earlier runs of a report not finished since
    crashes = {k: 0 if force or stored[k] is None or stored[k]["status"] == "ok"
               else int(stored[k].get("crashes") or 0) for k, _ in todo}
    by_key = dict(keyed)
    options = {"range_name": range_name, "cache": cache, "cache_dir": cache_dir, "nsys": nsys}
    done, total = 0, len(todo)
    lost: dict[str, dict[str, Any] | None] = {}  # running: the part to restore if stopped
    try:
        while todo:
            retry = []
            for key, record in _results(todo, options, workers, dask):
                if record == "started":
                    # counted as a crash until it finishes: a run that takes the whole
                    # batch down with it (out of memory) still counts against the report
                    crashes[key] += 1
                    lost[key] = _read_part(parts, key)
                    _save_part(parts, key, _crash_record(
                        str(by_key[key]), "the batch stopped while it ran", crashes[key]))
                    continue
                marked = key in lost
                lost.pop(key, None)
                if isinstance(record, str):  # its worker died
                    if not marked:  # Dask does not say when a report starts
                        crashes[key] += 1
                    record = _crash_record(str(by_key[key]), record, crashes[key])
                    if not record["final"]:
                        retry.append((key, by_key[key]))
                        _save_part(parts, key, record)
                        continue
                else:
                    record = {**record, "final": _final(record), "crashes": 0}
                _save_part(parts, key, record)
                done += 1
                if progress:
                    progress(done, total)
            todo = retry
    finally:
        for key, previous in lost.items():  # stopped (Ctrl-C, a stage timeout): as before
            if previous is None:
                (parts / f"{key}.json").unlink(missing_ok=True)
            else:
                _save_part(parts, key, previous)
    records = [r for k, _ in keyed if (r := _read_part(parts, k)) is not None]
    _combine(records, out)
    failed = sum(1 for r in records if r["status"] != "ok")
    skipped = sum(1 for k, _ in keyed if not force and stored[k] is not None
                  and _final(stored[k]))
    return BatchSummary(out, len(paths), done, skipped, failed)


def _combine(records: list[dict[str, Any]], out: Path) -> None:
    main = [{k: v for k, v in r.items() if k not in ("findings", "kernels", *PART_FIELDS)}
            for r in records]
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
