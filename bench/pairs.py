#!/usr/bin/env python3
"""Alternating pairs: one nsysdiag command run by two checkouts, in turn, on the same load.

usage: python bench/pairs.py --old /tmp/base-eb4d90e [--new .] [--pairs 3] EXPORT ...
       python bench/pairs.py --old ... --args "--version" --no-path

Each pair runs the old checkout then the new one (the next pair the other way round, so
that neither always runs first), each a fresh process under ``/usr/bin/time -v`` with
``PYTHONPATH`` and the working directory at its checkout, a cold run (``--no-cache``) of
``-q diagnose`` unless ``--args`` says otherwise. The export is read once beforehand so
that both find it in the page cache. Printed per run: wall seconds, CPU seconds (user +
sys, which load disturbs less than wall time), peak RSS; per export the medians and the
new/old ratios.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def timed(checkout: Path, args: list[str]) -> tuple[float, float, float, int]:
    """(wall s, user+sys s, peak RSS MiB, exit code) of ``python -m nsysdiag ARGS``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        rc = subprocess.run(["/usr/bin/time", "-v", "-o", tf.name, sys.executable, "-m",
                             "nsysdiag", *args], env=env, cwd=checkout, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL).returncode
        text = Path(tf.name).read_text()
    h, m, s = (float(x) if x else 0.0 for x in re.search(
        r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text).groups())
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", text).group(1))
    sys_ = float(re.search(r"System time \(seconds\): ([\d.]+)", text).group(1))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
    return h * 3600 + m * 60 + s, user + sys_, rss, rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("exports", nargs="*", type=lambda s: Path(s).resolve())
    p.add_argument("--old", required=True, type=lambda s: Path(s).resolve(),
                   help="baseline checkout")
    p.add_argument("--new", default=Path(__file__).resolve().parents[1],
                   type=lambda s: Path(s).resolve())
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--args", default="--no-cache -q diagnose",
                   help="nsysdiag arguments before the export (default: %(default)s)")
    p.add_argument("--no-path", action="store_true", help="run --args alone, without exports")
    a = p.parse_args(argv)
    base = shlex.split(a.args)
    targets = [None] if a.no_path else a.exports
    print(f"old {a.old} ({_rev(a.old)}), new {a.new} ({_rev(a.new)}); nsysdiag {a.args}")
    for export in targets:
        if export is not None:
            with open(export, "rb") as f:  # page it in
                while f.read(1 << 24):
                    pass
        args = base + ([str(export)] if export is not None else [])
        runs: dict[str, list[tuple[float, float, float, int]]] = {"old": [], "new": []}
        for i in range(a.pairs):
            order = ("old", "new") if i % 2 == 0 else ("new", "old")
            for who in order:
                r = timed(a.old if who == "old" else a.new, args)
                runs[who].append(r)
                print(f"  {export.name if export else ''} pair {i + 1} {who}: wall {r[0]:.2f} s, "
                      f"cpu {r[1]:.2f} s, rss {r[2]:.0f} MiB, exit {r[3]}", flush=True)
        med = {w: [statistics.median(x[k] for x in runs[w]) for k in range(3)] for w in runs}
        o, n = med["old"], med["new"]
        print(f"{export.name if export else a.args}: median old wall {o[0]:.2f} s cpu {o[1]:.2f} s "
              f"rss {o[2]:.0f} MiB | new wall {n[0]:.2f} s cpu {n[1]:.2f} s rss {n[2]:.0f} MiB | "
              f"new/old wall {n[0] / o[0]:.2f}x cpu {n[1] / o[1]:.2f}x rss {n[2] / o[2]:.2f}x",
              flush=True)
    return 0


def _rev(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
