#!/usr/bin/env python3
"""Issue 39's stress check of the cache, the batch and the exit codes: the probes below,
then three ``nsysdiag`` processes racing on one cold cache, ``--races`` times (100 by
default). Each probe makes its hostile condition itself, in a scratch directory, and runs
the command line in its own process; prints one line per probe and the race tally, then
``failures: N``, and exits 1 when N > 0.

Probes (class of issue 39 in brackets):

* ``stale_in_place`` [3] an export rewritten in place with its size and mtime kept is read
  again, not answered from the cache
* ``rewrite_while_read`` [3] an export flipped between two versions (same size) while
  runs read it: each run prints one version's result, or exits 3 saying it changed
* ``damaged_view`` / ``truncated_view`` / ``damaged_probe`` / ``damaged_result`` [3] a
  flipped byte, a cut file, an edited probe.json, a flipped byte of a cached result: exit 0,
  the clean result, one note
* ``batch_worker_killed`` [4] ``kill -9`` of one local worker: the batch finishes, every
  report ok (the killed one retried)
* ``batch_all_fail`` [4] every report fails: exit 5, each recorded
* ``terminal_injection`` [6] OSC 52 / OSC 8 / CSI in kernel and NVTX names: none printed raw
* ``sigint`` [7] Ctrl-C at five moments of a cold run: 130 (or 0 when already done)
* ``ulimit_f`` / ``full_disk`` / ``cache_clear`` / ``out_of_memory`` [7] exit 75 naming the
  cause (full_disk needs root for a tmpfs, out_of_memory the corpus baseline)
* ``no_cache`` [7] ``--no-cache`` writes nothing under the user cache directory

Examples
--------
::

    python bench/stress.py                 # probes + 100 races on a small export
    python bench/stress.py --races 20 --input /work/shared/corpus/h200/baseline.sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fixtures.make_fixtures import standard  # noqa: E402
from fixtures.nsysbuild import TraceBuilder  # noqa: E402

BASELINE = Path("/work/shared/corpus/h200/baseline.sqlite")
CLI = [sys.executable, "-m", "nsysdiag"]
TIMEOUT = 300
RAW_CONTROLS = ("\x1b]", "\x07", "\x1b[2J", "\u009b")


def run(args: list[str], cache: Path | None, *, env: dict | None = None,
        preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if cache is not None:
        e["NSYSDIAG_CACHE_DIR"] = str(cache)
    return subprocess.run([*CLI, *args], env=e, capture_output=True, text=True,
                          timeout=TIMEOUT, preexec_fn=preexec, cwd=ROOT)


def _trace(kernel_ns: int) -> TraceBuilder:
    b = TraceBuilder("current")
    for i in range(50):
        b.launch(1000 + i * 10000, 2000 + i * 10000, 3000 + i * 10000,
                 3000 + i * 10000 + kernel_ns + (i % 7) * 10, name=f"k{i % 5}")
    return b


def _sum(out: str) -> str:
    return out.strip().splitlines()[-1]


SUM_SQL = "SELECT count(*), sum(end_ns - start_ns) FROM kernels"


# ------------------------------------------------------------------------------ probes

def stale_in_place(d: Path) -> list[str]:
    a, b = _trace(1000).write(d / "a.sqlite"), _trace(2000).write(d / "b.sqlite")
    if a.stat().st_size != b.stat().st_size:
        return ["fixture: the two versions differ in size"]
    first = run(["sql", str(a), SUM_SQL], d / "c")
    st = a.stat()
    with open(a, "r+b") as fh:
        fh.write(b.read_bytes())
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = run(["sql", str(a), SUM_SQL], d / "c")
    want = run(["sql", str(b), SUM_SQL], d / "c2")
    return [] if _sum(again.stdout) == _sum(want.stdout) != _sum(first.stdout) else [
        f"stale result after an in-place rewrite: {_sum(again.stdout)!r}"]


def rewrite_while_read(d: Path, runs: int = 12) -> list[str]:
    a, b = _trace(1000).write(d / "a.sqlite"), _trace(2000).write(d / "b.sqlite")
    versions = [a.read_bytes(), b.read_bytes()]
    target = d / "t.sqlite"
    target.write_bytes(versions[0])
    want = {_sum(run(["sql", str(p), SUM_SQL], d / "cw").stdout) for p in (a, b)}
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            i ^= 1
            with open(target, "r+b") as fh:  # in place, page by page, like a slow writer
                data = versions[i]
                for off in range(0, len(data), 4096):
                    fh.write(data[off:off + 4096])
                    fh.flush()
            time.sleep(random.uniform(0.05, 0.6))

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    bad = []
    try:
        for i in range(runs):
            p = run(["sql", str(target), SUM_SQL], d / f"c{i}")
            if p.returncode == 0 and _sum(p.stdout) not in want:
                bad.append(f"mixed result with exit 0: {_sum(p.stdout)!r}")
            elif p.returncode not in (0, 3):
                bad.append(f"exit {p.returncode}: {p.stderr.strip()[:200]}")
    finally:
        stop.set()
        t.join()
    return bad


def _damaged(d: Path, edit: Callable[[Path], None], command: list[str]) -> list[str]:
    trace = standard("current").write(d / "t.sqlite")
    cache = d / "c"
    command = [str(trace) if c == "TRACE" else c for c in command]
    clean = run(command, cache)
    (entry,) = (cache / "views").iterdir()
    edit(entry)
    again = run(command, cache)
    bad = []
    if again.returncode != 0 or again.stdout != clean.stdout:
        same = "same" if again.stdout == clean.stdout else "differs"
        bad.append(f"exit {again.returncode}, output {same}: {again.stderr.strip()[:200]}")
    elif "nsysdiag: note:" not in again.stderr:
        bad.append("no note about the damage")
    return bad


def _view_file(entry: Path, view: str = "kernels") -> Path:
    return entry / json.loads((entry / f"{view}.json").read_text())["file"]


def _flip(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[len(data) // 3] ^= 0x10
    f.write_bytes(bytes(data))


def damaged_view(d: Path) -> list[str]:
    return _damaged(d, lambda e: _flip(_view_file(e)), ["sql", "TRACE", SUM_SQL])


def truncated_view(d: Path) -> list[str]:
    def cut(e: Path) -> None:
        f = _view_file(e)
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return _damaged(d, cut, ["sql", "TRACE", SUM_SQL])


def damaged_probe(d: Path) -> list[str]:
    def edit(e: Path) -> None:
        p = e / "probe.json"
        data = json.loads(p.read_text())
        data["views"]["kernels"]["source_rows"] = "many"
        p.write_text(json.dumps(data))
    return _damaged(d, edit, ["info", "TRACE"])


def damaged_result(d: Path) -> list[str]:
    return _damaged(d, lambda e: _flip(next((e / "results").glob("kernel_summary-*/0.arrow"))),
                    ["kernel-summary", "TRACE"])


def batch_worker_killed(d: Path) -> list[str]:
    import psutil
    import pyarrow.parquet as pq

    src = BASELINE if BASELINE.exists() else standard("current").write(d / "s.sqlite")
    ins = d / "in"
    ins.mkdir()
    for i in range(4):
        shutil.copy(src, ins / f"r{i}.sqlite")
    e = {**os.environ, "PYTHONPATH": str(ROOT), "NSYSDIAG_CACHE_DIR": str(d / "c")}
    proc = subprocess.Popen([*CLI, "batch", str(ins), "-o", str(d / "res.parquet"), "-j", "2"],
                            env=e, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and time.monotonic() < deadline and proc.poll() is None:
        kids = psutil.Process(proc.pid).children()
        if kids:
            time.sleep(0.5)
            try:
                kids[0].kill()
                killed = kids[0].pid
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.05)
    out, err = proc.communicate(timeout=TIMEOUT)
    bad = [] if killed else ["no worker seen to kill"]
    if proc.returncode != 0:
        bad.append(f"exit {proc.returncode}: {err.strip()[:200]}")
    else:
        rows = pq.read_table(d / "res.parquet").to_pylist()
        if len(rows) != 4 or any(r["status"] != "ok" for r in rows):
            bad.append(f"reports not all ok: {[(r['report'], r['error']) for r in rows]}")
    return bad


def batch_all_fail(d: Path) -> list[str]:
    ins = d / "in"
    ins.mkdir()
    for i in range(3):
        (ins / f"x{i}.sqlite").write_bytes(b"not a database")
    p = run(["batch", str(ins), "-o", str(d / "r.parquet"), "-j", "2"], d / "c")
    return [] if p.returncode == 5 and "3 failed" in p.stdout else [
        f"exit {p.returncode}: {p.stdout.strip()[:200]} {p.stderr.strip()[:200]}"]


def terminal_injection(d: Path) -> list[str]:
    b = TraceBuilder("current")
    evil = ("\x1b]52;c;cm0gLXJmIH4=\x07", "\x1b]8;;https://x.example\x1b\\l\x1b]8;;\x1b\\",
            "\x1b[2J", "\u009b31m")
    t = 0
    for i, s in enumerate(evil):
        for _ in range(6):
            b.launch(t, t + 500, t + 1000, t + 3000 + 100 * i, name=f"k{s}[link=file:///]x[/]")
            b.nvtx(t, t + 4000, f"step{s}")
            t += 10000
    trace = b.write(d / "evil.sqlite")
    bad = []
    for args in (["diagnose"], ["kernel-summary"], ["ranges"], ["info"]):
        p = run([args[0], str(trace), *args[1:]], d / "c")
        for raw in RAW_CONTROLS:
            if raw in p.stdout or raw in p.stderr:
                bad.append(f"{args[0]} printed {raw!r} raw")
    return bad


def sigint(d: Path) -> list[str]:
    trace = BASELINE if BASELINE.exists() else standard("current").write(d / "t.sqlite")
    bad = []
    for i, delay in enumerate((0.2, 0.7, 1.5, 2.5, 4.0)):
        e = {**os.environ, "PYTHONPATH": str(ROOT), "NSYSDIAG_CACHE_DIR": str(d / f"c{i}")}
        proc = subprocess.Popen([*CLI, "diagnose", str(trace)], env=e, cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT)
        # -SIGINT: Python's own end, before nsysdiag's code ran (a loaded machine)
        if proc.returncode not in (0, 130, -signal.SIGINT) or (
                proc.returncode == 130 and err.strip() != "nsysdiag: interrupted"):
            bad.append(f"SIGINT at {delay} s: exit {proc.returncode}: {err.strip()[-200:]}")
    return bad


def _exit_75(p: subprocess.CompletedProcess, words: str) -> list[str]:
    ok = p.returncode == 75 and words in p.stderr and len(p.stderr.strip().splitlines()) == 1
    return [] if ok else [f"exit {p.returncode}: {p.stderr.strip()[:300]}"]


def ulimit_f(d: Path) -> list[str]:
    trace = standard("current").write(d / "t.sqlite")
    return _exit_75(run(["kernel-summary", str(trace)], d / "c", preexec=lambda: (
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512)))), "File too large")


def full_disk(d: Path) -> list[str] | None:
    trace = standard("current").write(d / "t.sqlite")
    mnt = d / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                      capture_output=True).returncode:
        return None  # not root: skipped
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        return _exit_75(run(["kernel-summary", str(trace)], mnt), "No space left")
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def cache_clear(d: Path) -> list[str]:
    trace = BASELINE if BASELINE.exists() else standard("current").write(d / "t.sqlite")
    bad = []
    for i in range(3):
        cache = d / f"c{i}"
        e = {**os.environ, "PYTHONPATH": str(ROOT), "NSYSDIAG_CACHE_DIR": str(cache)}
        proc = subprocess.Popen([*CLI, "diagnose", str(trace)], env=e, cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5 + i)
        run(["cache", "clear"], cache)
        _, err = proc.communicate(timeout=TIMEOUT)
        if proc.returncode not in (0, 75):
            bad.append(f"exit {proc.returncode}: {err.strip()[:200]}")
    return bad


def out_of_memory(d: Path) -> list[str] | None:
    if not BASELINE.exists():
        return None
    return _exit_75(run(["diagnose", str(BASELINE)], d / "c",
                        env={"NSYSDIAG_MEMORY_LIMIT": "8MB"}), "NSYSDIAG_MEMORY_LIMIT")


def no_cache(d: Path) -> list[str]:
    trace = standard("current").write(d / "t.sqlite")
    home = d / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NSYSDIAG_CACHE_DIR", "XDG_CACHE_HOME")}
    p = subprocess.run([*CLI, "--no-cache", "diagnose", str(trace)], capture_output=True,
                       text=True, timeout=TIMEOUT, cwd=ROOT,
                       env={**env, "HOME": str(home), "PYTHONPATH": str(ROOT)})
    made = sorted(str(p) for p in home.rglob("*"))
    return ([] if p.returncode == 0 else [f"exit {p.returncode}"]) + (
        [f"created {made}"] if made else [])


PROBES = (stale_in_place, rewrite_while_read, damaged_view, truncated_view, damaged_probe,
          damaged_result, batch_worker_killed, batch_all_fail, terminal_injection, sigint,
          ulimit_f, full_disk, cache_clear, out_of_memory, no_cache)


# ------------------------------------------------------------------------------- races

def race(trace: Path, cache: Path) -> list[str]:
    """Three processes on one cold cache: all exit 0 with the same output."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), "NSYSDIAG_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([*CLI, "diagnose", "--json", str(trace)], env=e, cwd=ROOT,
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(3)]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    bad = [f"exit {p.returncode}: {err.strip()[:200]}" for p, (_, err) in zip(procs, outs)
           if p.returncode != 0]
    docs = {json.dumps({k: v for k, v in json.loads(o).items() if k != "timings"},
                       sort_keys=True) for o, _ in outs if o.strip()} if not bad else set()
    if len(docs) > 1:
        bad.append("the three runs disagree")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--races", type=int, default=100)
    ap.add_argument("--input", type=Path, default=None,
                    help="export for the races (default: the standard fixture)")
    ap.add_argument("--only", nargs="*", default=None, help="probe names to run")
    ap.add_argument("--no-probes", action="store_true")
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory(prefix="nsysdiag-stress-") as tmp:
        scratch = Path(tmp)
        if not args.no_probes:
            for probe in PROBES:
                if args.only and probe.__name__ not in args.only:
                    continue
                d = scratch / probe.__name__
                d.mkdir()
                t0 = time.monotonic()
                try:
                    bad = probe(d)
                except Exception as exc:  # a probe that breaks is a failure, not a crash
                    bad = [f"probe raised {type(exc).__name__}: {exc}"]
                took = time.monotonic() - t0
                if bad is None:
                    print(f"{probe.__name__:22s} skipped ({took:.1f} s)", flush=True)
                    continue
                failures += len(bad)
                print(f"{probe.__name__:22s} {'ok' if not bad else 'FAIL'} ({took:.1f} s)"
                      + "".join(f"\n    {b}" for b in bad), flush=True)
                shutil.rmtree(d, ignore_errors=True)
        if args.races:
            trace = args.input or standard("current").write(scratch / "race.sqlite")
            failed, t0 = 0, time.monotonic()
            for i in range(args.races):
                bad = race(trace, scratch / f"race-cache-{i}")
                shutil.rmtree(scratch / f"race-cache-{i}", ignore_errors=True)
                if bad:
                    failed += 1
                    print(f"race {i}: " + "; ".join(bad), flush=True)
            failures += failed
            print(f"races: {args.races} x 3 processes on a cold cache of {trace.name}, "
                  f"{failed} failed ({time.monotonic() - t0:.0f} s)")
    print(f"failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
