#!/usr/bin/env python3
"""The "no hang, ever" check of issue 24: hostile copies of the H200 baseline and every
corpus export, each through ``nsysdiag diagnose --json`` in its own process.

Each run must finish within the limit (60 s) with exit 0, 3 or 4, print no traceback and at
most three lines on stderr, and leave its input unchanged (bytes, size, mtime). The
hostile inputs are made in a scratch directory from a copy of
``/work/shared/corpus/h200/baseline.sqlite`` (its runtime table, 252k rows, is read by the
parallel readers): invalid UTF-8 in names, no StringIds, renamed and dropped columns,
truncation at several offsets, text in integer columns, NULL keys. Prints one Markdown
table row per input and a summary line; exits 1 if any run fails the checks.

Examples
--------
::

    python bench/hostile.py                  # hostile inputs and the whole corpus
    python bench/hostile.py --hostile-only --jobs 2
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPUS = Path("/work/shared/corpus")
BASELINE = CORPUS / "h200" / "baseline.sqlite"
K, R = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"
NOT_UTF8 = "CAST(x'ff' || CAST({c} AS BLOB) AS TEXT)"

EDITS: dict[str, tuple[str, ...]] = {
    "invalid_utf8_names": (f"UPDATE StringIds SET value = {NOT_UTF8.format(c='value')}",
                           f"UPDATE NVTX_EVENTS SET text = {NOT_UTF8.format(c='text')} "
                           "WHERE text IS NOT NULL"),
    "missing_stringids": ("DROP TABLE StringIds",),
    "renamed_columns": (f"ALTER TABLE {K} RENAME COLUMN start TO begin_ns",
                        f"ALTER TABLE {R} RENAME COLUMN correlationId TO corr"),
    "dropped_columns": (f"ALTER TABLE {R} DROP COLUMN globalTid",
                        f"ALTER TABLE {K} DROP COLUMN correlationId"),
    "text_in_integer_columns": (f"UPDATE {K} SET start = 'abc', globalPid = 'pid' "
                                "WHERE rowid % 10007 = 7",
                                f"UPDATE {R} SET correlationId = 'x', globalTid = x'00ff' "
                                "WHERE rowid % 40009 = 11"),
    "null_keys": (f"UPDATE {K} SET correlationId = NULL, globalPid = NULL WHERE rowid % 3 = 0",
                  f"UPDATE {R} SET globalTid = NULL, correlationId = NULL WHERE rowid % 5 = 0"),
}
TRUNCATE_PCT = (5, 25, 50, 75, 95, 99)


def hostile(d: Path) -> list[Path]:
    out = []
    for name, statements in EDITS.items():
        p = d / name / "baseline.sqlite"
        p.parent.mkdir()
        shutil.copyfile(BASELINE, p)
        db = sqlite3.connect(p)
        for s in statements:
            db.execute(s)
        db.commit()
        db.close()
        out.append(p)
    data = BASELINE.read_bytes()
    for pct in TRUNCATE_PCT:
        p = d / f"truncated_{pct}pct" / "baseline.sqlite"
        p.parent.mkdir()
        p.write_bytes(data[: len(data) * pct // 100])
        out.append(p)
    return out


def corpus() -> list[Path]:
    files = sorted(CORPUS.rglob("*.sqlite"))
    dirs = sorted({p.parent for p in CORPUS.rglob("*.parquet")})
    return files + dirs


def fingerprint(path: Path) -> list:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    out = []
    for f in files:
        st = f.stat()
        out.append((str(f), hashlib.sha256(f.read_bytes()).hexdigest(), st.st_size,
                    st.st_mtime_ns))
    return out


def check(path: Path, limit: float, cache: Path) -> dict:
    before = fingerprint(path)
    env = {**os.environ, "NSYSDIAG_CACHE_DIR": str(cache)}
    t = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "nsysdiag", "--no-cache", "diagnose",
                               str(path), "--json"], capture_output=True, text=True,
                              timeout=limit, env=env)
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = "timeout"
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    seconds = time.monotonic() - t
    lines = err.strip().splitlines()
    unchanged = fingerprint(path) == before
    ok = (rc in (0, 3, 4) and "Traceback" not in err and len(lines) <= 3 and unchanged)
    return {"path": path, "rc": rc, "s": seconds, "lines": len(lines), "unchanged": unchanged,
            "ok": ok, "first": lines[0][:110] if lines else ""}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--limit", type=float, default=60.0, help="seconds per run (default 60)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("--hostile-only", action="store_true")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nsysdiag-hostile-") as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        inputs = hostile(root / "in")
        if not args.hostile_only:
            inputs += corpus()
        print("| input | exit | s | stderr lines | unchanged | first stderr line |")
        print("|---|---|---|---|---|---|")
        results = []
        with cf.ThreadPoolExecutor(args.jobs) as pool:
            runs = [pool.submit(check, path, args.limit, root / f"cache{i}")
                    for i, path in enumerate(inputs)]
            for run in runs:
                r = run.result()
                results.append(r)
                name = (r["path"].parent.name if r["path"].is_relative_to(root)
                        else str(r["path"].relative_to(CORPUS)))
                print(f"| {name} | {r['rc']} | {r['s']:.1f} | {r['lines']} | "
                      f"{'yes' if r['unchanged'] else 'NO'} | {r['first']} |", flush=True)
    bad = [r for r in results if not r["ok"]]
    codes: dict = {}
    for r in results:
        codes[r["rc"]] = codes.get(r["rc"], 0) + 1
    print(f"\n{len(results)} runs, {len(bad)} failing the checks; exits {codes}; "
          f"slowest {max(r['s'] for r in results):.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
