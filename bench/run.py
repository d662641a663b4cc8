"""Benchmark `nsysdiag diagnose` cold (empty cache) and warm against nsys-ai's diagnose.

usage: python bench/run.py [--kernels N ...] [--nsys-ai PATH] [--out bench/out]

For each size it makes (or reuses) a large export with bench/make_large.py, then runs, in
this order and as separate processes under /usr/bin/time (wall seconds, peak RSS); each
cold run starts with the export read once into the page cache (see page_in):

  nsysdiag cold   diagnose with an empty cache (reads SQLite, writes the Parquet cache)
  nsysdiag warm   diagnose again (cached views, probe and analysis results)
  nsysdiag views  diagnose with the analysis results removed (analyses rerun on the
                  cached Parquet views: what a new option or nsysdiag version costs)
  nsys-ai cold    `nsys-ai diagnose` on a copy of the file with no .nsys-cache
  nsys-ai warm    the same again (its cache built)

nsys-ai runs on a copy because it writes indexes into the .sqlite it is given; see
bench/nsys_ai.md for its offline setup. It prints a table with ratios, and the scaling of
nsysdiag cold time between the smallest and largest size.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float = 3600
) -> tuple[float, float, int]:
    """(wall s, peak RSS MiB, exit code) of one command under /usr/bin/time -v."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        full = ["/usr/bin/time", "-v", "-o", tf.name, *cmd]
        try:
            rc = subprocess.run(full, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return float("nan"), float("nan"), 124
        text = Path(tf.name).read_text()
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text)
    h, m, s = (float(x) if x else 0.0 for x in wall.groups())
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
    return h * 3600 + m * 60 + s, rss, rc


def page_in(path: Path) -> float:
    """Read ``path`` once so that a cold run starts with it in the page cache; seconds taken.

    The development VM reclaims page cache aggressively (a 1.9 GB export read at about
    200 MB/s from disk when evicted), which otherwise makes cold timings depend on what ran
    before. Both tools get the same treatment before their cold runs.
    """
    t = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass
    return time.perf_counter() - t


def ensure_export(kernels: int, out: Path) -> Path:
    path = out / f"large_{kernels // 1_000_000}m.sqlite" if kernels >= 1_000_000 else \
        out / f"large_{kernels // 1000}k.sqlite"
    if not path.exists():
        subprocess.run([sys.executable, str(HERE / "make_large.py"), "--kernels", str(kernels),
                        "--out", str(path)], check=True)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--out", type=Path, default=HERE / "out")
    ap.add_argument("--nsys-ai", default=shutil.which("nsys-ai"),
                    help="nsys-ai executable (default: on PATH); omit to skip the comparison")
    ap.add_argument("--timeout", type=float, default=3600)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.kernels:
        src = ensure_export(n, args.out)
        cache = Path(tempfile.mkdtemp(prefix="nsysdiag-bench-cache-"))
        env = {**os.environ, "NSYSDIAG_CACHE_DIR": str(cache)}
        cmd = [sys.executable, "-m", "nsysdiag", "-q", "diagnose", str(src), "--json"]
        page_in(src)
        cold = timed(cmd, env, args.timeout)
        warm = timed(cmd, env, args.timeout)
        for results in cache.glob("views/*/results"):  # keep the views, drop the results
            shutil.rmtree(results)
        views = timed(cmd, env, args.timeout)
        shutil.rmtree(cache, ignore_errors=True)
        ai_cold = ai_warm = (float("nan"), float("nan"), -1)
        if args.nsys_ai:
            work = Path(tempfile.mkdtemp(prefix="nsysai-bench-", dir=args.out))
            copy = work / src.name
            shutil.copyfile(src, copy)
            ai = [args.nsys_ai, "diagnose", str(copy), "--format", "json",
                  "-o", str(work / "f.json")]
            # a session store of its own: nsys-ai keys sessions by the file's content and
            # fails (SESSION_CORRUPT) on one left by an earlier run from a deleted folder
            ai_env = {**os.environ, "NSYS_AI_ARTIFACT_ROOT": str(work / "artifacts")}
            page_in(copy)
            ai_cold = timed(ai, ai_env, args.timeout)
            ai_warm = timed(ai, ai_env, args.timeout)
            shutil.rmtree(work, ignore_errors=True)
        rows.append((n, src.stat().st_size, cold, warm, views, ai_cold, ai_warm))

    print(f"{'kernels':>10} {'file MB':>8} | {'cold s':>7} {'cold MiB':>8} |"
          f" {'warm s':>7} {'warm MiB':>8} | {'views s':>7} {'views MiB':>9} |"
          f" {'nsys-ai cold s':>14} {'MiB':>7} | {'nsys-ai warm s':>14} |"
          f" {'speedup':>7} {'mem ratio':>9}")
    for n, size, cold, warm, views, aic, aiw in rows:
        speed = aic[0] / cold[0] if aic[2] == 0 and cold[0] else float("nan")
        mem = cold[1] / aic[1] if aic[2] == 0 else float("nan")
        print(f"{n:>10} {size / 1e6:>8.0f} | {cold[0]:>7.1f} {cold[1]:>8.0f} | {warm[0]:>7.1f} "
              f"{warm[1]:>8.0f} | {views[0]:>7.1f} {views[1]:>9.0f} | {aic[0]:>14.1f} "
              f"{aic[1]:>7.0f} | {aiw[0]:>14.1f} | {speed:>6.2f}x {mem:>9.2f}"
              + ("" if cold[2] == 0 else f"  (nsysdiag exit {cold[2]})")
              + ("" if aic[2] in (0, -1) else f"  (nsys-ai exit {aic[2]})"))
    if len(rows) > 1:
        (n0, _, c0, *_), (n1, _, c1, *_) = rows[0], rows[-1]
        print(f"scaling: {n1 / n0:.1f}x the kernels cost {c1[0] / c0[0]:.2f}x the cold time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
