#!/usr/bin/env python3
"""The hostile-input probes of issue 39 (hangs, globbed paths, WAL exports, SQL escapes),
each run as its own ``nsysdiag`` process, over several rounds with fresh inputs.

Every probe makes its input in a scratch directory (``fixtures/hostile_inputs.py``),
runs one command under a time limit and checks: the exit code the probe expects, no
traceback, at most one line on stderr naming the problem, the right figure where the
command prints one (counts of glob-named exports), and every file of the scratch
directory unchanged (the input, its ``-wal``, the cache's views, files the SQL aimed at).
Prints one Markdown row per probe (runs, failures, slowest run) and ``failures: N``; exits
1 when any run failed.

Examples
--------
::

    python bench/stress_inputs.py                 # 5 rounds
    python bench/stress_inputs.py --rounds 20 --jobs 2
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fixtures import hostile_inputs as hostile  # noqa: E402

COUNT = "SELECT count(*) AS n FROM kernels"


@dataclass
class Probe:
    """One hostile input and the command run on it."""

    name: str
    #: makes the input in the directory given; returns the path to hand to nsysdiag
    make: Callable[[Path], Path]
    #: the command after the path ("{out}" and "{input}" are replaced by quoted paths)
    args: tuple[str, ...]
    code: int
    #: a phrase the error line holds, or the stdout expected (csv) when code is 0
    expect: str
    env: dict[str, str] = field(default_factory=dict)
    #: a cache directory name under the scratch directory; None: --no-cache
    cache: str | None = None
    #: warm the cache first (the probe then aims at the cached views)
    warm: bool = False


def _kernel_count(rows: int) -> str:
    return f"n\n{rows}"


def _glob_dir(name: str) -> Callable[[Path], Path]:
    return lambda d: hostile.glob_named_parquet(d)[name]


def _export(d: Path) -> Path:
    return hostile.small_export(d / "trace.sqlite")


def _fifo_journal(d: Path) -> Path:
    path = _export(d)
    os.mkfifo(f"{path}-journal")
    return path


def _quoted(path: str) -> str:
    return "'" + path.replace("'", "''") + "'"


PROBES = [
    Probe("fifo", lambda d: hostile.fifo(d / "trace.sqlite"), ("info",), 3, "(a FIFO)"),
    Probe("btree_bomb_2", lambda d: hostile.btree_bomb(d / "trace.sqlite", 2), ("diagnose",),
          3, "more than a file of"),
    Probe("btree_bomb_3", lambda d: hostile.btree_bomb(d / "trace.sqlite", 3), ("diagnose",),
          3, "more than a file of"),
    Probe("btree_bomb_4", lambda d: hostile.btree_bomb(d / "trace.sqlite", 4), ("info",), 3,
          "more than a file of"),
    Probe("btree_bomb_4_bound_2s", lambda d: hostile.btree_bomb(d / "trace.sqlite", 4),
          ("info",), 3, "took longer than 2 s", env={"NSYSDIAG_STAGE_TIMEOUT": "2"}),
    Probe("recursive_view", lambda d: hostile.recursive_view(d / "trace.sqlite"),
          ("diagnose",), 3, "is a view"),
    Probe("cpu_view", lambda d: hostile.cpu_view(d / "trace.sqlite"), ("diagnose",), 3,
          "is a view"),
    Probe("disguised_view", lambda d: hostile.disguised_view(d / "trace.sqlite"),
          ("diagnose",), 3, "malformed database schema"),
    Probe("virtual_table", lambda d: hostile.virtual_table(d / "trace.sqlite"), ("diagnose",),
          3, "is a virtual table"),
    Probe("fifo_as_journal", _fifo_journal, ("sql", COUNT, "--format", "csv"), 0,
          _kernel_count(20)),
    Probe("wal_export", lambda d: hostile.wal_export(d / "trace.sqlite"), ("info",), 3,
          "WAL mode"),
    Probe("parquet_dir_pq[1]", _glob_dir("pq[1]"), ("sql", COUNT, "--format", "csv"), 0,
          _kernel_count(5)),
    Probe("parquet_dir_pq*", _glob_dir("pq*"), ("sql", COUNT, "--format", "csv"), 0,
          _kernel_count(7)),
    Probe("parquet_dir_pq?", _glob_dir("pq?"), ("sql", COUNT, "--format", "csv"), 0,
          _kernel_count(7)),
    Probe("cache_dir_c*", _export, ("sql", COUNT, "--format", "csv"), 0, _kernel_count(20),
          cache="c*", warm=True),
    Probe("sql_read_file", _export, ("sql", "SELECT * FROM read_csv('/etc/passwd')"), 2,
          "file system operations are disabled"),
    Probe("sql_copy_over_input", _export,
          ("sql", "COPY (SELECT 1 AS x) TO {input} (FORMAT csv)"), 2, "not COPY"),
    Probe("sql_copy_over_view", _export,
          ("sql", "SELECT 1; COPY (SELECT * FROM kernels LIMIT 1) TO {view}"), 2, "not COPY",
          cache="c", warm=True),
    Probe("sql_copy_allow_files", _export, ("sql", "COPY kernels TO {out}", "--allow-files"),
          2, "not COPY"),
    Probe("sql_attach", _export, ("sql", "ATTACH {input} AS x"), 2, "not ATTACH"),
    Probe("sql_install", _export, ("sql", "INSTALL sqlite"), 2, "not LOAD"),
    Probe("sql_set", _export, ("sql", "SET enable_external_access = true"), 2, "not SET"),
]


def fingerprint(root: Path) -> dict:
    """sha256, size and mtime of every file under ``root`` (a FIFO: its mode only)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        if p.is_fifo():
            out[str(p)] = ("fifo",)
        elif p.is_file():
            out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_size,
                           st.st_mtime_ns)
    return out


def nsysdiag(args: list[str], cache: Path | None, env: dict[str, str], limit: float
             ) -> tuple[int | str, str, str]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    cache_args = ["--cache-dir", str(cache)] if cache else ["--no-cache"]
    try:
        proc = subprocess.run([sys.executable, "-m", "nsysdiag", *cache_args, *args],
                              capture_output=True, text=True, timeout=limit, env=environ)
    except subprocess.TimeoutExpired:
        return "timeout", "", ""
    return proc.returncode, proc.stdout, proc.stderr


def run(probe: Probe, scratch: Path, limit: float) -> tuple[bool, float, str]:
    """(passed, seconds, what failed) of one run of ``probe`` on a fresh input."""
    scratch.mkdir(parents=True)
    path = probe.make(scratch)
    cache = scratch / probe.cache if probe.cache else None
    if probe.warm:
        if probe.cache != "c*":
            nsysdiag(["sql", str(path), COUNT], cache, {}, limit)
        else:  # "c*" matches "c": the views of both directories would be read as one
            nsysdiag(["sql", str(path), COUNT], scratch / "c", {}, limit)
            nsysdiag(["sql", str(path), COUNT], cache, {}, limit)
    views = sorted(cache.glob("views/*/kernels-*.parquet")) if cache else []
    fill = {"input": _quoted(str(path)), "out": _quoted(str(scratch / "out.csv")),
            "view": _quoted(str(views[0])) if views else "''"}
    args = [probe.args[0], str(path), *(a.format(**fill) for a in probe.args[1:])]
    before = fingerprint(scratch)
    t = time.monotonic()
    rc, out, err = nsysdiag(args, cache, probe.env, limit)
    seconds = time.monotonic() - t
    lines = err.strip().splitlines()
    problems = []
    if rc != probe.code:
        problems.append(f"exit {rc} ({lines[-1][:200] if lines else 'no message'})")
    if "Traceback" in err:
        problems.append("traceback")
    if probe.code == 0:
        if out.strip() != probe.expect:
            problems.append(f"printed {out.strip()!r}")
    elif len(lines) != 1 or probe.expect not in lines[0]:
        problems.append(f"stderr {err.strip()[:200]!r}")
    if fingerprint(scratch) != before:
        problems.append("files changed")
    return not problems, seconds, "; ".join(problems)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="runs of each probe (default 5)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument("--limit", type=float, default=60.0, help="seconds per run (default 60)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nsysdiag-stress-") as tmp:
        with cf.ThreadPoolExecutor(args.jobs) as pool:
            # scratch directories by number: a probe's name may hold glob characters
            runs = {probe.name: [pool.submit(run, probe, Path(tmp) / f"{k}-{i}", args.limit)
                                 for i in range(args.rounds)]
                    for k, probe in enumerate(PROBES)}
            print("| probe | runs | failures | slowest s | first failure |")
            print("|---|---|---|---|---|")
            failures = 0
            for name, futures in runs.items():
                results = [f.result() for f in futures]
                bad = [r for r in results if not r[0]]
                failures += len(bad)
                print(f"| {name} | {len(results)} | {len(bad)} | "
                      f"{max(r[1] for r in results):.1f} | {bad[0][2] if bad else ''} |",
                      flush=True)
    print(f"\n{len(PROBES) * args.rounds} runs of {len(PROBES)} probes; failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
