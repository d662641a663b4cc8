"""The abandonable hand-offs of ``nsysdiag.engine.threads``, and the stage bound.

Each test that could hang if the rule were broken runs its body on a daemon thread joined
with a deadline (``finishes``), or in a subprocess with a timeout, so that a regression
fails here instead of stalling the suite. The bound is set small (``NSYSDIAG_STAGE_TIMEOUT``)
where a test waits for it.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable

import duckdb
import pytest
from conftest import ROOT, standard

from nsysdiag.engine import threads
from nsysdiag.errors import EXIT_INTERNAL, StageTimeout, UsageError

SMALL_BOUND = "0.5"


def finishes(fn: Callable[[], object], within: float = 20.0) -> object:
    """``fn()`` run on a daemon thread; fails the test if it has not returned in time."""
    out: dict = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(within)
    assert not t.is_alive(), f"still blocked after {within} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def endless():
    """A producer that never runs out."""
    i = 0
    while True:
        yield i
        i += 1


class Boom(Exception):
    pass


# ----------------------------------------------------------------------------- the bound

def test_stage_timeout_setting(monkeypatch):
    monkeypatch.delenv(threads.STAGE_TIMEOUT_ENV, raising=False)
    assert threads.stage_timeout() == threads.DEFAULT_STAGE_TIMEOUT_S
    monkeypatch.setenv(threads.STAGE_TIMEOUT_ENV, " 2.5 ")
    assert threads.stage_timeout() == 2.5
    for bad in ("0", "-1", "inf", "nan", "ten"):
        monkeypatch.setenv(threads.STAGE_TIMEOUT_ENV, bad)
        with pytest.raises(UsageError, match=threads.STAGE_TIMEOUT_ENV):
            threads.stage_timeout()


def test_stage_timeout_error_is_one_line_and_internal():
    exc = StageTimeout("reading KERNEL", 2.0, "a producer")
    assert exc.exit_code == EXIT_INTERNAL == 70
    line = exc.one_line()
    assert "\n" not in line
    assert "stage 'reading KERNEL' stopped: a producer made no progress for 2 s" in line
    assert "NSYSDIAG_STAGE_TIMEOUT" in line


# ------------------------------------------------------------------------------- merge

def test_merge_yields_every_item_of_every_source():
    got = finishes(lambda: sorted(threads.merge([range(0, 500), range(500, 700), []],
                                                stage="t")))
    assert got == list(range(700))


def _gone(stage: str, within: float = 10.0) -> bool:
    """Whether the threads of ``stage`` have all ended (waiting up to ``within`` s)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(t.name == f"nsysdiag: {stage}" for t in threading.enumerate()):
            return True
        time.sleep(0.02)
    return False


def test_merge_raises_the_first_error_once_and_stops_the_other_sources():
    def bad():
        yield -1
        raise Boom("first")

    def consume():
        with pytest.raises(Boom, match="first"):
            for _ in threads.merge([endless(), endless(), bad()], stage="merge-error"):
                pass
        return _gone("merge-error")

    assert finishes(consume) is True


def test_merge_consumer_that_stops_stops_the_producers():
    """The hang of issue 24: the consumer stops reading while producers are blocked on
    a full queue (or about to say they are done)."""

    def consume():
        gen = threads.merge([endless(), range(3)], stage="merge-stop", depth=1)
        next(gen)
        time.sleep(0.2)  # both producers now wait on the full hand-off
        gen.close()
        return _gone("merge-stop")

    assert finishes(consume) is True


def test_merge_producer_gone_silent_is_a_stage_timeout(monkeypatch):
    monkeypatch.setenv(threads.STAGE_TIMEOUT_ENV, SMALL_BOUND)
    never = threading.Event()

    def stuck():
        yield 1
        never.wait()
        yield 2

    def consume():
        with pytest.raises(StageTimeout, match="stage 'reading t' stopped: a producer"):
            list(threads.merge([stuck()], stage="reading t"))

    try:
        finishes(consume)
        assert threads.abandoned(), "the stuck producer thread is recorded"
    finally:
        never.set()


# ----------------------------------------------------------------------------- HandOff

def test_handoff_cancel_releases_a_blocked_producer():
    hand = threads.HandOff(1, stage="t")
    assert hand.put("a") is True
    result: list = []
    t = threading.Thread(target=lambda: result.append(hand.put("b")), daemon=True)
    t.start()
    time.sleep(0.2)
    assert t.is_alive()  # blocked: the queue is full
    hand.cancel()
    t.join(5)
    assert result == [False]
    assert hand.put("c") is False and hand.stopped


def test_handoff_consumer_gone_without_a_word_is_a_stage_timeout(monkeypatch):
    monkeypatch.setenv(threads.STAGE_TIMEOUT_ENV, SMALL_BOUND)
    hand = threads.HandOff(1, stage="t")
    hand.put("a")
    t0 = time.monotonic()
    with pytest.raises(StageTimeout, match="the consumer"):
        finishes(lambda: hand.put("b"))
    assert 0.4 < time.monotonic() - t0 < 10


def test_handoff_several_producers_done():
    hand = threads.HandOff(4, producers=2, stage="t")

    def produce(items):
        for i in items:
            hand.put(i)
        hand.finish()

    for items in ([1, 2], [3]):
        threading.Thread(target=produce, args=(items,), daemon=True).start()
    assert finishes(lambda: sorted(hand)) == [1, 2, 3]


# ----------------------------------------------------------------------------- Workers

def test_workers_results_and_errors():
    def run():
        with threads.Workers(2, stage="t") as pool:
            calls = [pool.submit(pow, 2, k) for k in range(6)]
            bad = pool.submit(lambda: (_ for _ in ()).throw(Boom("x")))
            assert [c.result() for c in calls] == [1, 2, 4, 8, 16, 32]
            with pytest.raises(Boom):
                bad.result()

    finishes(run)


def test_workers_keep_no_collected_result():
    # a stream of calls (the SQLite page decoder's batches) collected one by one: the
    # workers must not hold each result until the block ends (they did: a 22M-row table
    # stayed in memory while it was read)
    class Result:
        pass

    def run():
        with threads.Workers(2, stage="t") as pool:
            refs = []
            for _ in range(5):
                value = pool.submit(Result).result()
                refs.append(weakref.ref(value))
                del value
            assert [r() for r in refs] == [None] * 5

    finishes(run)


def test_workers_uncollected_error_is_raised_at_the_end():
    def run():
        with threads.Workers(1, stage="t") as pool:
            pool.submit(lambda: (_ for _ in ()).throw(Boom("late")))

    with pytest.raises(Boom, match="late"):
        finishes(run)


def test_workers_block_error_wins_cancels_queued_and_calls_on_cancel():
    started, release, interrupts, ran = threading.Event(), threading.Event(), [], []

    def slow():
        started.set()
        release.wait(10)
        return "slow"

    def on_cancel():
        interrupts.append(1)
        release.set()

    def run():
        with threads.Workers(1, stage="t", on_cancel=on_cancel) as pool:
            pool.submit(slow)
            pool.submit(ran.append, "queued")
            started.wait(5)
            raise Boom("the block's")

    with pytest.raises(Boom, match="the block's"):
        finishes(run)
    assert interrupts and ran == []


def test_workers_stuck_call_is_a_stage_timeout(monkeypatch):
    monkeypatch.setenv(threads.STAGE_TIMEOUT_ENV, SMALL_BOUND)
    never = threading.Event()

    def run():
        with threads.Workers(1, stage="jitter") as pool:
            pool.submit(never.wait).result()

    try:
        with pytest.raises(StageTimeout, match="stage 'jitter' stopped"):
            finishes(run)
        assert threads.abandoned()
    finally:
        never.set()


def test_workers_on_cancel_interrupts_a_duckdb_query():
    """The forked connections' hook: a long DuckDB query on a worker stops when the other
    side fails."""
    con = duckdb.connect()
    other = con.cursor()
    started = threading.Event()

    def query():
        started.set()
        return other.execute("SELECT sum(a * b) FROM range(10000000000) t(a), "
                             "(SELECT 1 b)").fetchall()

    def run():
        with threads.Workers(1, stage="t", on_cancel=other.interrupt) as pool:
            pool.submit(query)
            started.wait(5)
            time.sleep(0.2)
            raise Boom("main")

    t0 = time.monotonic()
    with pytest.raises(Boom):
        finishes(run, within=30)
    assert time.monotonic() - t0 < 15
    other.close()
    con.close()


def test_join_is_bounded():
    never = threading.Event()
    t = threading.Thread(target=never.wait, daemon=True)
    t.start()
    try:
        assert threads.join([t], bound=0.1) is False
        assert t in threads.abandoned()
    finally:
        never.set()
    t.join(5)
    assert threads.join([t], bound=0.1) is True


# ---------------------------------------------------- the SQLite reader's interleave

def test_sqlite_parallel_reader_abandoned_by_its_consumer(tmp_path, monkeypatch):
    """The parallel read of a table (two cursors, one hand-off), stopped by its consumer
    after one batch at every point of the producers' progress: it returns and closes its
    cursors."""
    from nsysdiag.adapters import sqlite as sqlite_adapter

    path = tmp_path / "t.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, \"end\" INTEGER)")
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?)",
                   [(i, i + 1) for i in range(40)])
    db.commit()
    db.close()
    monkeypatch.setattr(sqlite_adapter, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(sqlite_adapter, "BATCH_ROWS", 10)
    for pause in (0.0, 0.05, 0.3):
        source = sqlite_adapter.SqliteSource(path)

        def read_one(source=source, pause=pause):
            reader = source.read("CUPTI_ACTIVITY_KIND_KERNEL", {"start": "int", "end": "int"})
            it = iter(reader)
            first = next(it)
            time.sleep(pause)
            it.close() if hasattr(it, "close") else None
            del it, reader
            return first.num_rows

        assert finishes(read_one) == 10
        finishes(source.close)


# ------------------------------------------------------ the command line, stuck worker

_STUCK = textwrap.dedent("""
    import sys, threading
    import nsysdiag.analyses.{module} as target
    from nsysdiag.cli.main import run
    def stuck(*args, **kwargs):
        threading.Event().wait()
    {patch}
    sys.argv = ["nsysdiag", "--no-cache", "diagnose", sys.argv[1]]
    run()
""")


@pytest.mark.parametrize(("module", "patch", "stage"), [
    ("gpu_idle", "target.run = stuck", "gpu_idle"),
    ("launch_gaps", "target.run = stuck", "launch_gaps"),
])
def test_cli_stuck_worker_exits_70_naming_the_stage(module, patch, stage, tmp_path):
    """A worker thread that never returns: the command stops after the bound with exit 70
    and one line naming the stage, instead of waiting for it (gpu_idle's worker runs
    beside jitter: diagnosis/engine.py)."""
    path = standard("current").write(tmp_path / "t.sqlite")
    code = _STUCK.format(module=module, patch=patch)
    env = {**os.environ, threads.STAGE_TIMEOUT_ENV: "1", "NSYSDIAG_CACHE_DIR": str(tmp_path)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == EXIT_INTERNAL, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"nsysdiag: error: stage '{stage}' stopped: a worker made no "
                               "progress for 1 s")
    assert time.monotonic() - t0 < 60


def test_cli_stuck_reader_thread_exits_70_naming_the_table(tmp_path):
    """One of the parallel SQLite readers never delivers its next batch: the consumer (a
    DuckDB thread building a view) gives up after the bound; the stage names the table."""
    path = standard("current").write(tmp_path / "t.sqlite")
    code = textwrap.dedent("""
        import sys, threading
        import pyarrow as pa
        from nsysdiag.adapters import sqlite as s
        from nsysdiag.cli.main import run
        s.PARALLEL_MIN_ROWS = 1
        opened = s.SqliteSource._open_stream
        def open_stream(self, table, query):
            handle, reader = opened(self, table, query)
            if table != "CUPTI_ACTIVITY_KIND_RUNTIME" or "BETWEEN" not in query:
                return handle, reader
            def stuck():
                threading.Event().wait()
                yield from reader
            return handle, pa.RecordBatchReader.from_batches(reader.schema, stuck())
        s.SqliteSource._open_stream = open_stream
        sys.argv = ["nsysdiag", "--no-cache", "diagnose", sys.argv[1]]
        run()
    """)
    env = {**os.environ, threads.STAGE_TIMEOUT_ENV: "1", "NSYSDIAG_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == EXIT_INTERNAL, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "stage 'reading CUPTI_ACTIVITY_KIND_RUNTIME' stopped" in lines[0]


def test_cli_bad_stage_timeout_is_a_usage_error(tmp_path, monkeypatch, capsys):
    from nsysdiag.cli.main import main

    path = standard("current").write(tmp_path / "t.sqlite")
    monkeypatch.setenv(threads.STAGE_TIMEOUT_ENV, "soon")
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NSYSDIAG_STAGE_TIMEOUT must be a positive number" in err[0]


def test_cli_batch_with_every_worker_stuck_exits_70(tmp_path):
    """Local batch whose worker processes never finish a report: after the bound the batch
    stops (exit 70, one line naming the stage) and its worker processes are ended."""
    good = standard("current").write(tmp_path / "a.sqlite")
    code = textwrap.dedent("""
        import sys, time
        import nsysdiag.batch.run as batch
        from nsysdiag.cli.main import run
        def stuck(path, options):
            time.sleep(3600)
        batch.diagnose_one = stuck
        sys.argv = ["nsysdiag", "batch", sys.argv[1], sys.argv[1], "-o", sys.argv[2], "-j", "2"]
        run()
    """)
    env = {**os.environ, threads.STAGE_TIMEOUT_ENV: "2", "NSYSDIAG_CACHE_DIR": str(tmp_path)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(good), str(tmp_path / "r.parquet")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == EXIT_INTERNAL, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("nsysdiag: error: stage 'batch' stopped: every one of")
    assert time.monotonic() - t0 < 60
