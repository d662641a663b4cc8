"""Detection benchmark: does the diagnosis name a planted mechanism, and stay quiet on clean runs?

Usage::

    python bench/detection.py [--quick] [--jobs 2] [--seed 7] [--dump rows.csv]
                              [--baseline PATH ...] [--no-corpus] [--mechanism NAME ...]
    python bench/detection.py --rows rows.csv   # the table of an earlier run's rows

Baselines are real exports with a repeated NVTX unit: the project's own captures that
plant nothing (``fixtures/h200/{baseline,pageable,graph}``, ``fixtures/h100/{openloop,
coldstart,tf_clean_0,cnn_clean_0,cupy_clean_0,tf_pcie_1}``: a transformer serving loop, a
conv-net training loop and a CuPy MLP, unlike the others' PyTorch MLP; tf_pcie_1 with
another process' pageable copies that raised no tail), corpus exports with clear units
(``/work/shared/corpus``, skipped when absent) and any ``--baseline``; a fixture this
checkout lacks is skipped. Each clean baseline, whole and cut into halves (the same run's
natural jitter twice more), is diagnosed as it is: a verdict other than healthy, or a
warning about a cause (cpu, gpu, pcie, workload), is a false alarm.

Into a copy of each baseline every mechanism of :mod:`bench.plant` is planted at graded
doses: a stall, queueing wait, other GPU work, copy slowdown, extra upload or extra work
of ``d`` ns (0.85-1.15x) in 3 % of the units (at least 4), with ``d`` chosen so that the
planted units reach 1.35, 1.8 and 3 times the median (``--quick``: 1.4, 1.7, 2.5). A
trace is binned by the P99/P50 *measured on the planted copy* (the units' NVTX
durations); a plant that raises it less than 1.1x over the baseline's own hides in the
baseline's tail and is counted apart. A planted trace is right when its
verdict names the planted layer and the mechanism (``Verdict.mechanism``; for an engine
without it, the mechanism its summary names).

Prints, per mechanism and P99/P50 band, the share right (layer, and layer + mechanism), the
false-alarm share on the clean traces, and the ECE of the verdict's confidence (10
equal-width bins) over all traces: a planted trace counts as right as above, a clean one
when its verdict is healthy. Goals (issue 35): layer + mechanism >= 90 % from P99/P50 1.3
up, false alarms <= 5 %, ECE <= 0.05. ``--quick``: two baselines, three doses.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import shutil
import sqlite3
import sys
import tarfile
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plant  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CLEAN_FIXTURES = ("h200/baseline", "h200/pageable", "h200/graph", "h100/openloop",
                  "h100/coldstart", "h100/tf_clean_0", "h100/cnn_clean_0",
                  "h100/cupy_clean_0", "h100/tf_pcie_1")
CORPUS = Path("/work/shared/corpus")
#: corpus exports with a clear repeated NVTX unit and no known cause in their tail
CORPUS_BASELINES = ("h200/baseline.sqlite",)
DOSES = (1.35, 1.8, 3.0)
QUICK_DOSES = (1.4, 1.7, 2.5)
BANDS = ((1.2, 1.3), (1.3, 1.5), (1.5, 2.0), (2.0, 3.0), (3.0, 5.0), (5.0, float("inf")))
#: what the verdict must name for each planted mechanism: layer, accepted mechanisms
EXPECTED = {
    "stall_between": ("cpu", ("host_stall",)),
    "stall_before": ("cpu", ("host_stall_before_work",)),
    "queueing": ("cpu", ("queueing",)),
    "other_gpu": ("gpu", ("other_gpu_work",)),
    "pcie": ("pcie", ("transfer_contention", "slow_transfers")),
    "volume": ("pcie", ("transfer_volume",)),
    "more_work": ("workload", ("more_work",)),
}
#: an engine without Verdict.mechanism: the mechanism its summary names
SUMMARY_WORDS = (
    ("more work per unit", "more_work"),
    ("transfer volume", "transfer_volume"),
    ("PCIe transfer contention", "transfer_contention"),
    ("slow host-device transfers", "slow_transfers"),
    ("other work:", "other_gpu_work"),
    ("GPU execution jitter", "gpu_execution"),
    ("CPU-side queueing", "queueing"),
)
CAUSES = ("cpu", "gpu", "pcie", "workload")
#: checks whose warnings are about the whole run's efficiency (launch overhead, transfer
#: speed), true of a clean run too, not a claim about its tail
RUN_CHECKS = ("C1", "E1")


@dataclass
class Row:
    baseline: str
    mechanism: str  #: planted mechanism, "clean" for none
    dose: float  #: the planted units' target, x the median
    ratio: float  #: P99/P50 measured on the planted copy
    layer: str  #: the verdict's layer
    named: str  #: the verdict's mechanism
    confidence: float
    right: bool  #: layer and mechanism (clean: healthy)
    layer_right: bool
    false_alarm: bool  #: clean only: not healthy, or a warning about a cause
    alarm: str  #: why it is a false alarm
    base_ratio: float = float("nan")  #: the clean baseline's own P99/P50
    run_warnings: str = ""  #: clean only: whole-run warnings (C1 launch overhead, E1
    #: transfers), true of the run, not a claim about its tail: counted apart
    level: str = ""  #: the tail's level (normal, elevated, abnormal)
    best: str = ""  #: the best-scoring cause layer and its score, "cpu:0.41"


def mechanism_of(verdict) -> str:
    m = getattr(verdict, "mechanism", None)
    if m is not None:
        return str(getattr(m, "value", m))
    for words, name in SUMMARY_WORDS:
        if words in verdict.summary:
            return name
    return ""


def ratio_of(path: str, unit: str) -> float:
    with sqlite3.connect(path) as db:
        d = np.array([r[0] for r in db.execute(
            "SELECT end - start FROM NVTX_EVENTS WHERE end IS NOT NULL AND coalesce(text, "
            "(SELECT value FROM StringIds WHERE id = textId)) = ?", (unit,))], dtype=float)
    d = d[1:] if d.size > 50 else d  # the first unit is often warm-up
    p50, p99 = np.percentile(d, [50, 99])
    return float(p99 / p50)


def diagnose(path: str, unit: str | None):
    from nsysdiag import diagnose as run
    from nsysdiag.settings import Settings

    return run(path, range_name=unit, settings=Settings())


#: a plant that raises P99/P50 less than this factor over the baseline's own is hidden by
#: the baseline's tail: no cause of the tail to find, counted apart
VISIBLE = 1.1


def judge(baseline: str, mechanism: str, dose: float, path: str, unit: str | None,
          base_ratio: float = float("nan")) -> Row:
    d = diagnose(path, unit)
    v = d.verdict
    named = mechanism_of(v) if v.layer in CAUSES else ""
    ratio = ratio_of(path, d.tail.unit) if d.tail.unit else float("nan")
    if mechanism == "clean":
        warnings = [f for f in d.findings if f.severity in ("warning", "critical")
                    and f.layer in CAUSES and f.check not in RUN_CHECKS]
        run = ", ".join(sorted({f.check for f in d.findings if f.check in RUN_CHECKS
                                and f.severity in ("warning", "critical")}))
        alarm = (f"verdict {v.layer}" if v.layer != "healthy" else
                 f"{warnings[0].severity} [{warnings[0].layer}] {warnings[0].title}"
                 if warnings else "")
        return Row(baseline, mechanism, dose, ratio, v.layer, named, v.confidence,
                   v.layer == "healthy", v.layer == "healthy", bool(alarm), alarm,
                   run_warnings=run, level=d.tail.level, best=_best(v))
    layer, accepted = EXPECTED[mechanism]
    layer_right = v.layer == layer
    return Row(baseline, mechanism, dose, ratio, v.layer, named, v.confidence,
               layer_right and named in accepted, layer_right, False, "", base_ratio,
               level=d.tail.level, best=_best(v))


def _best(verdict) -> str:
    scores = getattr(verdict, "scores", None) or {}
    if not scores:
        return ""
    layer = max(scores, key=lambda k: scores[k])
    return f"{layer}:{scores[layer]:.2f}"


def planted(task: tuple[str, str, str, str, float, int, str]) -> Row | None:
    """Plant one mechanism at one dose into a copy of a baseline and judge it."""
    label, src, unit, mechanism, dose, seed, work, base_ratio = task
    rng = np.random.default_rng(seed)
    path = os.path.join(work, f"{label.replace('/', '_')}-{mechanism}-{dose}.sqlite")
    shutil.copyfile(src, path)
    ex = plant.Export(path)
    units = ex.units(unit)
    d = np.array([u.end - u.start for u in units], dtype=float)
    p50 = float(np.median(d))
    k = max(4, int(round(0.03 * len(units))))
    chosen = sorted(rng.choice(np.arange(5, len(units)), size=k, replace=False))
    done = 0
    for i in reversed(chosen):  # latest first: earlier instants keep their place
        u = ex.unit(units[i].row)
        target = dose * p50 - (u.end - u.start)
        if target <= 0:
            target = 0.1 * p50
        done += plant.PLANTERS[mechanism](ex, u, int(target * rng.uniform(0.85, 1.15)), rng)
    ex.close()
    if done < k // 2:
        os.unlink(path)
        return None
    try:
        return judge(label, mechanism, dose, path, unit, base_ratio)
    finally:
        os.unlink(path)


def clean(task: tuple[str, str, str | None, str]) -> Row:
    label, src, unit, part = task
    return judge(label + part, "clean", 0.0, src, unit)


def halves(src: str, unit: str, work: str, label: str) -> list[tuple[str, str]]:
    """The baseline's first and second half (rows that start in each half of the units'
    span), as two more clean traces."""
    with sqlite3.connect(src) as db:
        starts = [r[0] for r in db.execute(
            "SELECT start FROM NVTX_EVENTS WHERE end IS NOT NULL AND coalesce(text, "
            "(SELECT value FROM StringIds WHERE id = textId)) = ? ORDER BY start", (unit,))]
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = "
                                           "'table'")]
        timed = [t for t in tables
                 if {"start", "end"} <= {c[1] for c in db.execute(f"PRAGMA table_info({t})")}]
    cut = starts[len(starts) // 2]
    out = []
    for part, keep in (("/1st", "start < ?"), ("/2nd", "start >= ?")):
        path = os.path.join(work, f"{label.replace('/', '_')}{part[1:]}.sqlite")
        shutil.copyfile(src, path)
        with sqlite3.connect(path) as db:
            for t in timed:
                db.execute(f"DELETE FROM {t} WHERE NOT ({keep})", (cut,))
        out.append((part, path))
    return out


def baselines(args, work: str) -> list[tuple[str, str]]:
    out = []
    for name in CLEAN_FIXTURES[:2] if args.quick else CLEAN_FIXTURES:
        group, scen = name.split("/")
        if not (FIXTURES / group / f"{scen}.tar.xz").exists():
            print(f"{name}: not in this checkout, skipped")
            continue
        with tarfile.open(FIXTURES / group / f"{scen}.tar.xz") as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith(".sqlite"))
            member.name = f"{group}_{scen}.sqlite"
            tar.extract(member, work, filter="data")
        out.append((name, os.path.join(work, member.name)))
    if not args.quick and not args.no_corpus:
        out += [(f"corpus/{c}", str(CORPUS / c)) for c in CORPUS_BASELINES
                if (CORPUS / c).exists()]
    out += [(Path(p).stem, p) for p in args.baseline]
    return out


def band_of(ratio: float) -> str | None:
    for lo, hi in BANDS:
        if lo <= ratio < hi:
            return f"{lo:g}-{hi:g}" if hi != float("inf") else f">={lo:g}"
    return None


def ece(rows: list[Row], bins: int = 10) -> float:
    conf = np.array([r.confidence for r in rows])
    right = np.array([r.right for r in rows], dtype=float)
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    return float(sum(abs(conf[idx == b].mean() - right[idx == b].mean()) * (idx == b).sum()
                     for b in range(bins) if (idx == b).any()) / len(rows))


def report(rows: list[Row]) -> None:
    hidden = [r for r in rows if r.mechanism != "clean" and r.ratio < VISIBLE * r.base_ratio]
    rows = [r for r in rows if r not in hidden]
    plantedrows = [r for r in rows if r.mechanism != "clean"]
    cleanrows = [r for r in rows if r.mechanism == "clean"]
    bands = [band_of(r.ratio) for r in plantedrows]
    names = [f"{lo:g}-{hi:g}" if hi != float("inf") else f">={lo:g}" for lo, hi in BANDS]
    print(f"\nplanted traces: right layer + mechanism / right layer, per P99/P50 band "
          f"(n in brackets)\n{'mechanism':<15}" + "".join(f"{b:>16}" for b in names)
          + f"{'>=1.3 all':>16}")
    for mech in EXPECTED:
        cells = []
        for b in [*names, "all"]:
            sel = [r for r, rb in zip(plantedrows, bands) if r.mechanism == mech
                   and (rb == b or (b == "all" and r.ratio >= 1.3))]
            cells.append(f"{np.mean([r.right for r in sel]):.0%}/"
                         f"{np.mean([r.layer_right for r in sel]):.0%} ({len(sel)})"
                         if sel else "-")
        print(f"{mech:<15}" + "".join(f"{c:>16}" for c in cells))
    up = [r for r in plantedrows if r.ratio >= 1.3]
    if up:
        print(f"{'all':<15}  from P99/P50 1.3: {np.mean([r.right for r in up]):.1%} right "
              f"layer + mechanism, {np.mean([r.layer_right for r in up]):.1%} right layer "
              f"(n = {len(up)}; goal >= 90%)")
    if cleanrows:
        fa = [r for r in cleanrows if r.false_alarm]
        print(f"clean traces: {len(fa)} of {len(cleanrows)} false alarms "
              f"({len(fa) / len(cleanrows):.1%}; goal <= 5%); whole-run warnings (C1 launch "
              f"overhead, E1 transfers; counted apart) on "
              f"{sum(bool(r.run_warnings) for r in cleanrows)}")
        for r in cleanrows:
            print(f"   {r.baseline:<28} P99/P50 {r.ratio:5.2f}  {r.layer} "
                  f"{r.confidence:.2f}  {r.alarm}"
                  + (f"  [whole-run warning: {r.run_warnings}]" if r.run_warnings else ""))
    print(f"verdict confidence ECE over {len(rows)} traces: {ece(rows):.3f} (goal <= 0.05)")
    if hidden:
        print(f"{len(hidden)} planted traces left out: their P99/P50 is under {VISIBLE:g}x "
              "their baseline's own (the plant hides in its tail); healthy on "
              f"{sum(r.layer == 'healthy' for r in hidden)}, the planted layer on "
              f"{sum(r.layer_right for r in hidden)}")
    wrong = [r for r in up if not r.right]
    if wrong:
        print("missed from 1.3 (baseline, mechanism, P99/P50: verdict, mechanism named):")
        for r in wrong[:40]:
            print(f"   {r.baseline:<22} {r.mechanism:<14} {r.ratio:5.2f}: {r.layer} "
                  f"{r.confidence:.2f} {r.named or '-'}")


def read_rows(path: str) -> list[Row]:
    """The rows a ``--dump`` wrote (of this version of Row)."""
    kinds = {f.name: f.type for f in fields(Row)}
    out = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            vals = {}
            for k, v in raw.items():
                t = kinds[k]
                vals[k] = (float(v) if t == "float" else v == "True" if t == "bool" else v)
            out.append(Row(**vals))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two baselines, three doses")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dump", help="write every row to this CSV")
    ap.add_argument("--baseline", action="append", default=[], help="another clean export")
    ap.add_argument("--no-corpus", action="store_true", help="only the project's captures")
    ap.add_argument("--mechanism", action="append", default=[], help="only these")
    ap.add_argument("--rows", help="print the table of the rows an earlier --dump wrote")
    args = ap.parse_args(argv)
    if args.rows:
        report(read_rows(args.rows))
        return
    work = tempfile.mkdtemp(prefix="nsysdiag-detection-")
    os.environ.setdefault("NSYSDIAG_CACHE_DIR", os.path.join(work, "cache"))
    try:
        base = baselines(args, work)
        rows: list[Row] = []
        tasks = []
        with ProcessPoolExecutor(args.jobs) as pool:
            units = {}
            for label, src in base:
                d = diagnose(src, None)
                if d.tail.unit is None or d.tail.unit_source != "nvtx_auto":
                    print(f"{label}: no NVTX unit ({d.tail.unit_source}), skipped")
                    continue
                units[label] = d.tail.unit
            cleans = [(label, src, units[label], "") for label, src in base if label in units]
            for label, src in base:
                if label in units:
                    cleans += [(label, p, units[label], part)
                               for part, p in halves(src, units[label], work, label)]
            seed = args.seed
            for label, src in base:
                if label not in units:
                    continue
                for mech in args.mechanism or EXPECTED:
                    for dose in QUICK_DOSES if args.quick else DOSES:
                        seed += 1
                        tasks.append((label, src, units[label], mech, dose, seed, work,
                                      ratio_of(src, units[label])))
            dump = open(args.dump, "w", newline="") if args.dump else None  # noqa: SIM115
            writer = None
            # each row is written as it comes: a run cut short keeps what it measured
            for r in itertools.chain(pool.map(clean, cleans), pool.map(planted, tasks)):
                if r is None:
                    continue
                rows.append(r)
                if dump is not None:
                    if writer is None:
                        writer = csv.DictWriter(dump, fieldnames=list(asdict(r)))
                        writer.writeheader()
                    writer.writerow(asdict(r))
                    dump.flush()
            if dump is not None:
                dump.close()
        report(rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
