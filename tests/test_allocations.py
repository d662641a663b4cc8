"""allocations and its rule on hand-built exports whose answers are computed by hand."""

from __future__ import annotations

import pytest

import nsysdiag
from nsysdiag.analyses.allocations import AllocatingThread, AllocationCall, AllocationsResult
from nsysdiag.analyses.allocations import rule as allocations_rule
from nsysdiag.layers import Layer
from nsysdiag.settings import Settings

US = 1_000


def _export(builder, tmp_path, *, malloc_us=4, free_us=2, one_phase=False):
    """Thread 4242 launches 20 kernels from 1000 us, one every 100 us, each call 10 us
    long: its launch window runs from 1000 to 2910 us (1910 us, 10 tenths of 191 us).
    Between launch i and i+1 (i = 0 .. 18) it calls cudaMalloc (``malloc_us``) at +20 us
    and cudaFree (``free_us``) at +50 us: 38 calls, 19 frees, at 20 .. 1850 us into the
    window, so in every tenth.

    With ``one_phase``, launches 10 .. 19 come 400 us later (window 2310 us, tenths of
    231 us) and the 38 calls come between launches 9 and 10 instead, a pair every 20 us
    from 920 us into the window (the malloc at +0, the free at +10) to 1290 us: in tenths
    3 (693-924 us), 4 and 5 (1155-1386 us).

    Outside the window, a cudaMalloc of 300 us before the first launch and a cudaFree of
    200 us after the last; inside it, a cudaMallocAsync (stream-ordered: left out).
    Thread 7 launches at 5000 and 5100 us (window 110 us) with 3 cudaMalloc of 1 us at
    5020, 5030, 5040 us: tenths 1, 2, 3 (20, 30, 40 of 110 us, times 10)."""
    b = builder("current")
    t0 = 1_000 * US
    b.api(0, 300 * US, "cudaMalloc_v3020")
    for i in range(20):
        t = t0 + i * 100 * US + (400 * US if one_phase and i >= 10 else 0)
        b.launch(t, t + 10 * US, t + 12 * US, t + 30 * US)
        if i < 19 and not one_phase:
            b.api(t + 20 * US, t + (20 + malloc_us) * US, "cudaMalloc_v3020")
            b.api(t + 50 * US, t + (50 + free_us) * US, "cudaFree_v3020")
    if one_phase:
        for k in range(19):
            t = t0 + (920 + 20 * k) * US
            b.api(t, t + malloc_us * US, "cudaMalloc_v3020")
            b.api(t + 10 * US, t + (10 + free_us) * US, "cudaFree_v3020")
    b.api(t0 + 1_570 * US, t0 + 1_571 * US, "cudaMallocAsync_v11020")
    b.api(4_000 * US, 4_200 * US, "cudaFree_v3020")
    b.launch(5_000 * US, 5_010 * US, 5_012 * US, 5_020 * US, tid=7)
    for t in (5_020, 5_030, 5_040):
        b.api(t * US, (t + 1) * US, "cudaMalloc_v3020", tid=7)
    b.launch(5_100 * US, 5_110 * US, 5_112 * US, 5_120 * US, tid=7)
    return b.write(tmp_path / "t.sqlite")


def test_allocations_by_hand(builder, tmp_path):
    with nsysdiag.open(_export(builder, tmp_path), cache=False) as rep:
        r = rep.allocations()
    assert isinstance(r, AllocationsResult) and r.ok
    # 38 + 3 calls, 19 x 4 + 19 x 2 + 3 x 1 = 117 us
    assert (r.threads, r.calls, r.time_ns) == (2, 41, 117 * US)
    main, other = r.per_thread()
    assert main == AllocatingThread(4242, 4242, 20, 1_910 * US, 38, 19, 10, 114 * US,
                                    pytest.approx(100 * 114 / 1_910))
    assert other == AllocatingThread(4242, 7, 2, 110 * US, 3, 0, 3, 3 * US,
                                     pytest.approx(100 * 3 / 110))
    assert r.names(main) == [AllocationCall(4242, 4242, "cudaMalloc", 19, 76 * US, 4 * US, 4 * US),
                             AllocationCall(4242, 4242, "cudaFree", 19, 38 * US, 2 * US, 2 * US)]
    assert r.names(other) == [AllocationCall(4242, 7, "cudaMalloc", 3, 3 * US, US, US)]
    assert (main.recurs(), main.costly(), other.recurs()) == (True, True, False)


def test_the_rule_warns_on_allocations_that_recur_and_cost(builder, tmp_path):
    with nsysdiag.open(_export(builder, tmp_path), cache=False) as rep:
        (f,) = allocations_rule(rep.allocations(), Settings())
    assert (f.layer, f.severity, f.check) == (Layer.CPU, "warning", "allocations")
    assert f.title == ("Memory allocated in the launch loop: 38 allocation and free calls "
                       "take 6.0% of thread 4242's launch window")
    assert f.evidence[0] == (
        "thread 4242 (pid 4242) made 38 allocation and free calls between its first and "
        "last kernel launch (20 launches over 1.91 ms), in 10 of that window's 10 tenths: "
        "they recur through the loop, not once between two phases")
    assert f.evidence[1].startswith("what it cost: 114 us in these calls (19 of them "
                                    "frees), 6.0% of the launch window; ")
    assert f.evidence[2:] == ("cudaMalloc: 19 calls, 76 us (median 4 us, longest 4 us)",
                              "cudaFree: 19 calls, 38 us (median 2 us, longest 2 us)")
    assert f.weight == pytest.approx(114 / 1_910)
    assert "cudaMallocAsync" in f.fix


@pytest.mark.parametrize("what, options", [
    # the same 38 calls at 1 us each: 38 us, 2.0% of the window (under 5%)
    ("cheap", {"malloc_us": 1, "free_us": 1}),
    # 19 x 6 + 19 x 2 = 152 us, 6.6% of 2310 us, but made once, in three tenths: a
    # phase, not the loop
    ("one phase", {"one_phase": True, "malloc_us": 6}),
])
def test_the_rule_is_silent_on_cheap_or_one_off_allocations(builder, tmp_path, what, options):
    with nsysdiag.open(_export(builder, tmp_path, **options), cache=False) as rep:
        r = rep.allocations()
    main = r.per_thread()[0]
    assert main.calls == 38
    if what == "cheap":
        assert (main.tenths, main.share_pct) == (10, pytest.approx(100 * 38 / 1_910))
    else:
        assert (main.tenths, main.share_pct) == (3, pytest.approx(100 * 152 / 2_310))
    assert allocations_rule(r, Settings()) == []


def test_the_diagnosis_finds_the_rule_by_itself(builder, tmp_path):
    """No line of the diagnosis names allocations: it runs it and adds its finding because
    the module declares a rule; where the rule is silent, no finding."""
    d = nsysdiag.diagnose(_export(builder, tmp_path), cache=False)
    assert d.analyses.allocations is not None and d.analyses.allocations.calls == 41
    (f,) = [f for f in d.findings if f.check == "allocations"]
    assert f.title.startswith("Memory allocated in the launch loop: 38 ")
    quiet = nsysdiag.diagnose(_export(builder, tmp_path, one_phase=True, malloc_us=6),
                              cache=False)
    assert quiet.analyses.allocations is not None
    assert not [f for f in quiet.findings if f.check == "allocations"]


def test_without_cuda_calls_it_is_not_captured(builder, tmp_path):
    b = builder("current")
    b.osrt(0, 1_000, "poll")
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = rep.allocations()
    assert type(r) is not AllocationsResult and r.status == "not_captured"


def test_without_allocations_between_launches_it_measures_none(builder, tmp_path):
    b = builder("current")
    b.api(0, 10 * US, "cudaMalloc_v3020")
    b.launch(20 * US, 30 * US, 32 * US, 40 * US)
    b.launch(50 * US, 60 * US, 62 * US, 70 * US)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = rep.allocations()
    assert r.ok and (r.threads, r.calls, r.time_ns) == (0, 0, 0)
    assert r.message == "no allocation or free call between kernel launches"
    assert allocations_rule(r, Settings()) == []


def test_a_window_near_the_timestamp_limit_does_not_overflow(builder, tmp_path):
    """Launches 4e18 ns apart (near the views' +-2**62 limit): ten times an offset would
    not fit in 64 bits (the query failed with an overflow); the call counts in one tenth."""
    b = builder("current")
    b.launch(0, 10, 12, 20)
    b.api(2 * 10**18, 2 * 10**18 + 5 * US, "cudaMalloc_v3020")
    b.launch(4 * 10**18, 4 * 10**18 + 10, 4 * 10**18 + 12, 4 * 10**18 + 20)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        (t,) = rep.allocations().per_thread()
    assert (t.calls, t.tenths, t.time_ns, t.window_ns) == (1, 1, 5 * US, 4 * 10**18 + 10)
    assert t.share_pct == pytest.approx(100 * 5 * US / (4 * 10**18 + 10))
