"""The host side's layout of a tail (analyses/host_stall.py, check C3) on hand-built exports.

100 units of 1 ms on one thread, 10 ms apart (2 ms for queueing); each holds 10 launch
calls of 5 us, 100 us apart from 50 us in (a kernel of 20 us after each): stretches
without a CUDA call of 50 us (the lead), 95 us (between calls) and 45 us (after the last).
Three units are made 3 ms longer by the mechanism under test.
"""

from __future__ import annotations

import dataclasses

import pytest

import nsysdiag
from nsysdiag.analyses import host_stall
from nsysdiag.analyses.host_stall import Layout

MS = 1_000_000
SLOW = (40, 60, 80)


def build(builder, tmp_path, mechanism: str):
    b = builder("current")
    for i in range(100):
        s = i * (2 if mechanism == "queueing" else 10) * MS
        start, extra = s, 0
        if i in SLOW and mechanism == "queueing":
            start = s - 3 * MS  # the range opens 3 ms before its work can begin
        for k in range(10):
            if i in SLOW and ((mechanism == "between" and k == 5)
                              or (mechanism == "before" and k == 0)):
                extra = 3 * MS  # the thread stalls 3 ms before this call
            t = s + 50_000 + k * 100_000 + extra
            b.launch(t, t + 5_000, t + 10_000, t + 30_000)
        b.nvtx(start, s + MS + extra, "request")
    return b.write(tmp_path / f"{mechanism}.sqlite")


def measure(path):
    with nsysdiag.open(path, cache=False) as rep:
        r = rep.analysis("ranges", range_name="request")
        return r, host_stall.measure(rep, r, rep.probe.present("os_runtime"), 3.0)


@pytest.mark.parametrize("mechanism,layout,verdict", [
    ("between", Layout.STALL_BETWEEN, "host_stall"),
    ("before", Layout.STALL_BEFORE, "host_stall_before_work"),
    ("queueing", Layout.QUEUED, "queueing"),
])
def test_each_layout_is_told_apart(builder, tmp_path, mechanism, layout, verdict):
    path = build(builder, tmp_path, mechanism)
    r, hs = measure(path)
    assert r.tail_n <= len(SLOW)  # the slow set holds planted units only
    assert hs.layout is layout
    assert hs.longest_median_ns == pytest.approx(95_000)
    assert hs.threshold_ns == pytest.approx(3 * 95_000)
    assert hs.duration_growth_ns == pytest.approx(3 * MS)
    if mechanism == "queueing":
        # the range was open 2 ms while the previous unit still ran (it ended 1 ms after
        # its start, 2 ms before this one's work): 2 of the 3 ms of growth
        assert hs.queued_growth_ns == pytest.approx(2 * MS)
    else:
        # one stretch of 3 ms + its ordinary length, none in the median band
        stretch = 3 * MS + (50_000 if mechanism == "before" else 95_000)
        assert (hs.long_slow_ns, hs.long_median_ns, hs.long_count) == (stretch, 0, 1)
        assert hs.lead_share == (1.0 if mechanism == "before" else 0.0)
    d = nsysdiag.diagnose(path, range_name="request", cache=False)
    assert d.verdict.layer == "cpu" and d.verdict.mechanism.value == verdict, d.verdict.summary
    assert d.to_dict()["verdict"]["mechanism"] == verdict
    assert d.lines()[0].startswith("VERDICT: CPU - ")
    assert any(f.check == "C3" and f.severity == "warning" for f in d.findings)


def test_natural_jitter_is_spread(builder, tmp_path):
    """Every stretch between the slow units' calls a little longer (150 us more each, 1.5
    ms in all): each is 245 us, under 3x the median band's longest (95 us), so no long
    stretch: the layout is spread, and C3 names no stall."""
    b = builder("current")
    for i in range(100):
        s = i * 10 * MS
        grow = 150_000 if i in SLOW else 0
        for k in range(10):
            t = s + 50_000 + k * (100_000 + grow)
            b.launch(t, t + 5_000, t + 10_000, t + 30_000)
        b.nvtx(s, s + MS + 10 * grow, "request")
    path = b.write(tmp_path / "spread.sqlite")
    _, hs = measure(path)
    assert hs.layout is Layout.SPREAD
    assert hs.long_slow_ns == 0
    d = nsysdiag.diagnose(path, range_name="request", cache=False)
    assert not any(f.check == "C3" for f in d.findings)
    assert d.verdict.mechanism is None or d.verdict.mechanism.value == "host_work"


def test_no_runtime_times_measures_no_layout(tmp_path):
    """An export whose runtime table lost its start column has no host side: the layout is
    not measured (None), and the diagnosis still runs (found by test_fuzz_full)."""
    from fixtures.fuzz import Mutation, exercise, known_bug, write_case

    path = write_case("graphs", [Mutation(op="drop_table", table="CUPTI_ACTIVITY_KIND_RUNTIME",
                                          column="start", value=None, fraction=0.0)],
                      tmp_path / "t.sqlite")
    assert exercise(path, full=True, tolerate=known_bug) == []


# -- the accelerated pass (host_stall.accelerated) against the SQL (host_stall.method) ------

def _sorted(table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist()) if table is not None else []


def both_ways(rep, ranges):
    """(method's tables, the pass's) on the units host_stall.measure would measure: the
    slow ones and the median band (here simply every counted unit and a sample of them)."""
    import pyarrow as pa

    from nsysdiag.engine.steps import registered
    t = ranges.tables["instances"]
    t = t.filter(t.column("counted"))
    cols = ["instance", "start_ns", "end_ns", "pid", "tid"]
    every = pa.table({c: t.column(c).cast(pa.int64()) for c in cols})
    units = every.take(pa.array(range(0, every.num_rows, 3)))
    osrt = rep.probe.present("os_runtime")
    assert host_stall._passable(units, every)
    with registered(rep, "hs_units", units), registered(rep, "hs_all", every):
        want = host_stall.method(rep, osrt)
        got = host_stall.accelerated(rep, units, every, osrt)
    return [_sorted(x) for x in want], [_sorted(x) for x in got]


def _with_waits(path, waits):
    """The export with an OSRT_API table of ``waits``: (start, end, name) on the main
    thread of the builder's process."""
    import sqlite3

    db = sqlite3.connect(path)
    (top,), = db.execute("SELECT coalesce(max(id), 0) FROM StringIds")
    names = {n: top + 1 + i for i, n in enumerate(sorted({n for *_, n in waits}))}
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in names.items()])
    db.execute('CREATE TABLE OSRT_API (start INTEGER, "end" INTEGER, globalTid INTEGER, '
               "nameId INTEGER, eventClass INTEGER, returnValue INTEGER, nestingLevel INTEGER, "
               "callchainId INTEGER)")
    (gtid,), = db.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1")
    db.executemany("INSERT INTO OSRT_API VALUES (?, ?, ?, ?, 27, 0, 0, NULL)",
                   [(s, e, gtid, names[n]) for s, e, n in waits])
    db.commit()
    db.close()
    return path


@pytest.mark.parametrize("mechanism", ["between", "before", "queueing"])
def test_the_pass_gives_the_method_rows(builder, tmp_path, mechanism):
    """The three layouts, plus OS calls on the thread: a wait holding each slow unit's
    start (queueing: 1 ms of its lead), a read (no wait) holding it, and waits inside the
    units (their own): the pass's stretches and blocked rows are the method's, and a slow
    unit's blocked time is, by hand, the wait's 1 ms after its start where its lead is
    longer (queueing and a stall before: 3 ms + 50 us), else its whole 50 us lead."""
    path = build(builder, tmp_path, mechanism)
    waits = []
    for i in range(100):
        s = i * (2 if mechanism == "queueing" else 10) * MS
        start = s - 3 * MS if (i in SLOW and mechanism == "queueing") else s
        if i in SLOW:
            waits.append((start - 500_000, start + MS, "pthread_cond_wait"))
            waits.append((start - 200_000, start + 100, "read"))
        waits.append((s + 60_000, s + 70_000, "futex"))
    _with_waits(path, waits)
    with nsysdiag.open(path, cache=False) as rep:
        r = rep.analysis("ranges", range_name="request")
        want, got = both_ways(rep, r)
        assert got == want
        blocked = dict(want[1])
        units = {row["instance"]: row for row in r.tables["instances"].to_pylist()}
        for inst, ns in blocked.items():
            slow = units[inst]["start_ns"] in {
                i * (2 if mechanism == "queueing" else 10) * MS
                - (3 * MS if mechanism == "queueing" else 0) for i in SLOW}
            assert ns == ((MS if mechanism != "between" else 50_000) if slow else 0)


def test_measure_is_the_same_either_way(builder, tmp_path, monkeypatch):
    path = build(builder, tmp_path, "queueing")
    got = {}
    for how in ("never", "always"):
        monkeypatch.setenv("NSYSDIAG_ACCELERATE", how)
        got[how] = measure(path)[1]
    assert got["always"] == got["never"] and got["never"].layout is Layout.QUEUED


def test_overlapping_units_and_calls_without_an_end(builder, tmp_path):
    """Units that overlap on the thread (the later one waits for the earlier one's end),
    calls nested in calls, ties of start, and calls whose end is missing: the pass's rows
    are the method's."""
    b = builder("current")
    for i in range(40):
        s = i * 10 * MS
        b.nvtx(s, s + 2 * MS, "request")
        if i % 4 == 1:  # a second unit opening inside this one
            b.nvtx(s + MS, s + 4 * MS, "request")
        for k in range(6):
            t = s + 100_000 + k * 300_000
            b.launch(t, t + 50_000, t + 60_000, t + 70_000)
            if k == 2:
                b.api(t + 10_000, t + 20_000, "cudaGetLastError")  # nested in the launch
                b.api(t, t + 5_000, "cudaPeekAtLastError")  # same start, shorter
    path = b.write(tmp_path / "overlap.sqlite")
    import sqlite3
    db = sqlite3.connect(path)
    db.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = NULL WHERE rowid % 17 = 3')
    db.commit()
    db.close()
    with nsysdiag.open(path, cache=False) as rep:
        r = rep.analysis("ranges", range_name="request")
        want, got = both_ways(rep, r)
    assert got == want
    assert any(ov > 0 for *_, ov in want[0])  # some unit waited for the one before


def test_threads_are_told_apart_by_pid_and_tid_alone(builder, tmp_path):
    """Three threads whose ids collide (pid 100 tids 100 and 200, pid 200 tid 100) run
    units at once, each its first launch 50, 150 or 250 us after its unit opens; calls
    under other hardware bits of globalTid with pid 100 tid 100 come 20 us in. The pass
    keys a thread by its pid and tid (global_tid's low 48 bits): its rows are the
    method's (a join on pid and tid), and each unit's lead stretches are, by hand, its
    own thread's (pid 100 tid 100: 20 us to the call under other bits, 25 us from its
    return to the launch)."""
    from fixtures.nsysbuild import global_tid

    b = builder("current")
    threads = [((100, 100), 50_000), ((100, 200), 150_000), ((200, 100), 250_000)]
    for i in range(30):
        for j, ((pid, tid), lead) in enumerate(threads):
            u = i * 10 * MS + (i + j) % 3 * 1_000  # each thread first in turn
            b.nvtx(u, u + 2 * MS, "request", pid=pid, tid=tid)
            for k in range(4):
                t = u + lead + k * 300_000
                b.launch(t, t + 5_000, t + 10_000, t + 30_000, pid=pid, tid=tid)
            if (pid, tid) == (100, 100):
                b.add("CUPTI_ACTIVITY_KIND_RUNTIME", start=u + 20_000, end=u + 25_000,
                      eventClass=0, globalTid=1 << 56 | global_tid(pid, tid),
                      correlationId=b.next_corr(), nameId=b.string("cudaGetLastError"),
                      returnValue=0, callchainId=None)
    path = b.write(tmp_path / "threads.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        r = rep.analysis("ranges", range_name="request")
        want, got = both_ways(rep, r)
        thread = {u["instance"]: (u["pid"], u["tid"])
                  for u in r.tables["instances"].to_pylist()}
    assert got == want
    leads: dict[tuple[int, int], set[int]] = {}
    for inst, ns, lead, _ in want[0]:
        if lead:
            leads.setdefault(thread[inst], set()).add(ns)
    assert leads == {(100, 100): {20_000, 25_000}, (100, 200): {150_000},
                     (200, 100): {250_000}}


def test_the_calls_of_the_units_threads_are_counted_as_pid_and_tid_match(builder, tmp_path):
    """measure's count of the calls on the measured units' threads (which picks the pass or
    the method) by global_tid's low 48 bits: the (pid, tid) IN query's count, for threads
    that collide on pid or tid, a tid past 24 bits whose key would alias pid 100 tid 100,
    and units without a thread (NULL pid and tid match the calls without one, as IN
    compares them; a NULL beside a value matches nothing)."""
    import pyarrow as pa

    from nsysdiag.engine.steps import registered

    b = builder("current")
    for i, (pid, tid) in enumerate([(100, 100), (100, 200), (200, 100), (100, 100)]):
        b.launch(i * MS, i * MS + 5_000, i * MS + 10_000, i * MS + 30_000, pid=pid, tid=tid)
    for i in range(3):
        b.add("CUPTI_ACTIVITY_KIND_RUNTIME", start=10 * MS + i, end=10 * MS + i + 5,
              eventClass=0, globalTid=None, correlationId=b.next_corr(),
              nameId=b.string("cudaGetLastError"), returnValue=0, callchainId=None)
    path = b.write(tmp_path / "threads.sqlite")
    cases = [[(100, 100)], [(200, 100)], [(100, 200), (200, 100)], [(96, 4 << 24 | 100)],
             [(None, None)], [(None, 100)], [(100, None), (100, 100)], [(300, 1)], []]
    counts = []
    with nsysdiag.open(path, cache=False) as rep:
        for threads in cases:
            units = pa.table({"pid": pa.array([p for p, _ in threads], pa.int64()),
                              "tid": pa.array([t for _, t in threads], pa.int64())})
            with registered(rep, "hs_units", units):
                (want,), = rep.execute("SELECT count(*) FROM api_calls WHERE (pid, tid) IN "
                                       "(SELECT (pid, tid) FROM hs_units)")
                assert host_stall._threads_calls(rep) == want, threads
                counts.append(want)
    assert counts == [2, 1, 2, 0, 3, 0, 2, 0, 0]  # by hand
    # 96 << 24 | (4 << 24 | 100) would be pid 100 tid 100's key: the pass keys it apart
    assert host_stall._thread_key(96, 4 << 24 | 100) == -1


def _corpus():
    from conftest import corpus_sqlite_files
    return corpus_sqlite_files()


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.stem)
def test_corpus_pass_equals_the_method(path):
    from conftest import open_corpus

    from nsysdiag.analyses.ranges import RangesResult
    with open_corpus(path) as rep:
        r = rep.analysis("ranges")
        if not isinstance(r, RangesResult) or not r.ok or "counted" not in \
                r.tables["instances"].column_names or not rep.probe.present("api_calls"):
            pytest.skip("no units with host times")
        want, got = both_ways(rep, r)
        assert got == want


def test_own_captures_pass_equals_the_method(labelled):
    from nsysdiag.analyses.ranges import RangesResult
    for name, path in labelled.items():
        with nsysdiag.open(path, cache=False) as rep:
            r = rep.analysis("ranges")
            if not isinstance(r, RangesResult) or not r.ok:
                continue
            want, got = both_ways(rep, r)
            assert got == want, name


def test_a_stall_after_the_input_copy_is_before_the_work(builder, tmp_path):
    """A training step: an input copy 20 us in, then 5 launches, a 1 ms wait in every step
    (the backward pass on another thread), 5 more launches. Three steps stall 2.5 ms after
    their copy, before their first kernel launch (data loading). The median band's longest
    stretch is the 1 ms wait (threshold 3 ms), but before the first launch its longest is
    the 25 us from the copy to the launch (threshold max(50 us, 3 x 25 us) = 75 us): the
    2.525 ms stretch is long there, and the copy belongs to the step's start."""
    b = builder("current")
    for i in range(100):
        s = i * 10 * MS
        stall = 2_500_000 if i in SLOW else 0
        corr = b.api(s + 20_000, s + 25_000, "cudaMemcpyAsync_v3020")
        b.memcpy(s + 30_000, s + 40_000, 4096, corr=corr)
        t = s + 50_000 + stall
        for k in range(10):
            b.launch(t, t + 5_000, t + 10_000, t + 30_000)
            t += 100_000 + (1_000_000 if k == 4 else 0)
        b.nvtx(s, t, "step")
    path = b.write(tmp_path / "loader.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        r = rep.analysis("ranges", range_name="step")
        hs = host_stall.measure(rep, r, rep.probe.present("os_runtime"), 3.0)
        want, got = both_ways(rep, r)  # the pass marks the gaps before the launch alike
    # two stretches of each unit are before its first launch: from its start to the copy,
    # and from the copy to the launch
    units = {inst for inst, *_ in want[0]}
    assert got == want and sum(lead for _, _, lead, _ in want[0]) == 2 * len(units)
    assert hs.threshold_ns == pytest.approx(3 * 1_095_000)
    assert hs.lead_threshold_ns == pytest.approx(75_000)
    assert hs.long_slow_ns == pytest.approx(2_525_000) and hs.lead_share == 1.0
    assert hs.layout is Layout.STALL_BEFORE
    d = nsysdiag.diagnose(path, range_name="step", cache=False)
    assert d.verdict.mechanism.value == "host_stall_before_work", d.verdict.summary
    assert "before its first kernel launch" in d.verdict.summary


def test_a_unit_queued_behind_its_predecessors_gpu_work_is_queueing(builder, tmp_path):
    """Units every 2 ms, each a launch 50 us in of a 1.9 ms kernel, the range closing at
    1.97 ms. Three units' ranges open 1.9 ms early, while the previous unit's range is open
    and its kernel runs: their window holds 1.86 ms of the program's own earlier GPU work
    (GPU other, own stream) and little idle time, so the GPU side's growth alone would name
    a GPU-bound run. That work is what they queued behind, not a GPU cause: the queued
    wait (1.87 of the 1.9 ms) makes the verdict queueing."""
    b = builder("current")
    for i in range(100):
        s = i * 2 * MS
        start = s - 1_900_000 if i in SLOW else s
        b.launch(s + 50_000, s + 55_000, s + 60_000, s + 1_960_000)
        b.nvtx(start, s + 1_970_000, "request")
    path = b.write(tmp_path / "queued.sqlite")
    d = nsysdiag.diagnose(path, range_name="request", cache=False)
    assert d.analyses["ranges"].top_gpu_component.value == "gpu_other"
    assert (d.verdict.layer, d.verdict.mechanism.value) == ("cpu", "queueing"), d.verdict.summary


def test_units_queued_over_their_predecessors_launches_are_queueing_not_more_work(
        builder, tmp_path):
    """As above, with 4 launches of 0.45 ms kernels 50 us apart, and 30 units (of 300)
    whose ranges open 1.97 ms early, before the previous unit's launches: their window
    holds 8 launches (the previous unit's 4 are counted in the later-opened range, and
    the previous unit holds none), against the median band's 4 or none, at the same time
    per kernel: taken alone, more work per unit. The launches are the previous unit's,
    which they queued behind: the verdict is queueing, and the workload finding says so."""
    b = builder("current")
    slow = set(range(7, 300, 10))
    for i in range(300):
        s = i * 2 * MS
        start = s - 1_970_000 if i in slow else s
        t = s + 50_000
        for _ in range(4):
            b.launch(t, t + 5_000, t + 10_000, t + 460_000)
            t += 50_000
        b.nvtx(start, s + 1_970_000, "request")
    path = b.write(tmp_path / "queued.sqlite")
    d = nsysdiag.diagnose(path, range_name="request", cache=False)
    w = d.analyses["workload"]
    assert w.kind == "more_work" and w.slow_kernels == 8
    assert w.kernel_ratio >= d.settings.workload_ratio
    assert (d.verdict.layer, d.verdict.mechanism.value) == ("cpu", "queueing"), d.verdict.summary
    (f,) = [f for f in d.findings if f.check == "D1" and "kernels" in f.title.lower()
            or "queued behind" in f.title]
    assert f.layer == "gpu" and "the work they queued behind" in f.title


def test_most_units_by_hand():
    s = Layout.STALL_BETWEEN, Layout.STALL_BEFORE
    hs = host_stall.HostStall(8, 20, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, units=(
        (s[0], 1.0), (s[0], 0.9), (s[1], 0.8), (s[0], 0.7),
        (None, 0.0), (None, 0.0), (Layout.SPREAD, 0.6), (None, 0.0)))
    # 4 of 8 stall (3 between, 1 before: between); median of 1.0, 0.9, 0.8, 0.7
    assert hs.most_units() == (Layout.STALL_BETWEEN, 4, pytest.approx(0.85))
    three = dataclasses.replace(hs, units=hs.units[1:] + ((None, 0.0),))
    assert three.most_units() is None  # 3 of 8: fewer than half
    before = dataclasses.replace(hs, units=((s[1], 1.0), (s[1], 1.0), (s[0], 0.5),
                                            (None, 0.0)))
    assert before.most_units() == (Layout.STALL_BEFORE, 3, 1.0)
    assert dataclasses.replace(hs, units=()).most_units() is None


def test_a_stall_half_the_slow_units_show_is_found_one_by_one(builder, tmp_path):
    """400 units of 10 launches 100 us apart (1 ms). Six stall 3 ms between launches 5
    and 6; two natural hiccups spend 500 us more in each of their 10 launch calls (5 ms,
    inside CUDA calls). The tail set (1% of 400: the 4 slowest) holds the two hiccups (6
    ms) and two stalled units (4 ms): in their means the stretch holds (3 + 3) / 4 = 1.5
    of the 4 ms of growth (under half: no layout), but judged one by one 2 of the 4 show a
    stall holding 3 of their 3 ms (the stretch is 3 ms + 95 us, the median band's 95 us
    taken off), so C3 names the host stall."""
    stalled, hiccups = {50, 100, 150, 200, 250, 300}, {120, 220}
    b = builder("current")
    for i in range(400):
        s = i * 10 * MS
        extra = 0
        for k in range(10):
            if i in stalled and k == 5:
                extra = 3 * MS
            call = 500_000 if i in hiccups else 0
            t = s + 50_000 + k * (100_000 + call) + extra
            b.launch(t, t + 5_000 + call, t + 10_000 + call, t + 30_000 + call)
        b.nvtx(s, s + MS + extra + (5 * MS if i in hiccups else 0), "request")
    path = b.write(tmp_path / "half.sqlite")
    r, hs = measure(path)
    assert r.tail_n == 4 and hs.slow_n == 4
    assert hs.layout is None  # the means: outside CUDA grew 1.5 of 4 ms
    layout, units, share = hs.most_units()
    assert (layout, units) == (Layout.STALL_BETWEEN, 2) and share == pytest.approx(1.0)
    d = nsysdiag.diagnose(path, range_name="request", cache=False)
    (c3,) = [f for f in d.findings if f.check == "C3"]
    assert "in 2 of them this stretch holds a median 100% of each one's growth" \
        in c3.evidence[1]
