"""ranges.sql ``candidates`` finds which qualifying names enclose each probe by a look-up
per (probe, qualifying name) on each name's running reach (an ASOF join), not by comparing
each probe with every instance. These tests hold it equal, row for row, to the direct
statement of the rule below (every probe against every instance of every qualifying name)
on hand-built nestings whose answers are computed by hand, on the shared corpus and on the
project's own captures."""

from __future__ import annotations

import pyarrow as pa
import pytest
from conftest import corpus_sqlite_files, open_corpus

import nsysdiag
from nsysdiag.analyses import ranges
from nsysdiag.analyses.base import load_sql, run_query
from nsysdiag.engine.steps import bind, registered

# The rule as first written: a probe lies inside an instance of another qualifying name of
# its process when that instance's interval holds the probe's (identical intervals: the
# alphabetically first name is the outer one). Every probe is compared with every instance.
_DIRECT_INSIDE = """
outer_cand AS (
    SELECT c.name, c.start_ns, c.end_ns, c.global_pid
    FROM closed c SEMI JOIN qual q ON q.name = c.name AND q.qualifies),
inside AS (
    SELECT DISTINCT p.id, p.name, o.name AS outer_name
    FROM probe p JOIN outer_cand o
      ON o.global_pid = p.global_pid AND o.start_ns <= p.start_ns AND p.end_ns <= o.end_ns
    WHERE o.name <> p.name
      AND (o.start_ns < p.start_ns OR o.end_ns > p.end_ns OR o.name < p.name)),
frac AS"""


def direct_query() -> str:
    """ranges.sql ``candidates`` with its look-up replaced by the direct comparison."""
    sql = load_sql("ranges")["candidates"]
    head, _, rest = sql.partition("\nouter_starts AS (")
    _, _, tail = rest.partition("\nfrac AS")
    assert head and tail, "candidates no longer has the outer_starts ... frac steps"
    return head + _DIRECT_INSIDE + tail


def both(rep: nsysdiag.Report, min_instances: int) -> tuple[list[dict], list[dict]]:
    """(candidates, the direct statement's rows) on the same probes and calls."""
    traced = rep.probe.present("api_calls")
    params = {"min_instances": min_instances, "min_median_ns": 1000, "cuda_traced": traced}
    with ranges.families(rep, min_instances):
        probes = run_query(rep, "ranges", "unit_probes", params)
        with registered(rep, "unit_probes", probes):
            calls = (ranges._probe_calls_method(rep, probes) if traced else
                     pa.table({"id": pa.array([], pa.int64()), "calls": pa.array([], pa.int64())}))
        with registered(rep, "unit_probes", probes), registered(rep, "unit_probe_calls", calls):
            got = run_query(rep, "ranges", "candidates", params).to_pylist()
            sql = direct_query()
            want = rep.sql(sql, bind(sql, params)).to_arrow_table().to_pylist()
    return got, want


def launch_in(b, start: int, end: int, *, pid: int | None = None, tid: int | None = None):
    b.launch(start + 100, start + 300, start + 400, min(end, start + 900), pid=pid, tid=tid)


def test_nesting_edge_cases_match_the_direct_rule_and_the_hand_counts(builder, tmp_path):
    b = builder()
    pid2 = 5151
    for i in range(25):
        t = 1_000_000 + i * 100_000
        # outer / inner on the main thread; "alpha" and "beta" share identical intervals:
        # alpha (first alphabetically) is the outer one of beta, not the other way round
        b.nvtx(t, t + 90_000, "step")
        b.nvtx(t + 10_000, t + 40_000, "alpha")
        b.nvtx(t + 10_000, t + 40_000, "beta")
        # same start as step, ends earlier: inside step
        b.nvtx(t, t + 5_000, "head")
        # ends with step, starts later: inside step
        b.nvtx(t + 85_000, t + 90_000, "tail")
        for s, e in ((10_000, 40_000), (0, 5_000), (85_000, 90_000), (50_000, 80_000)):
            launch_in(b, t + s, t + e)  # alpha, head, tail, other
        # "other" on a second thread of the same process: inside step (same process)
        b.nvtx(t + 50_000, t + 80_000, "other", tid=b.tid + 1)
        # "solo" in another process over the same time: inside nothing
        b.nvtx(t + 10_000, t + 40_000, "solo", pid=pid2)
        launch_in(b, t + 10_000, t + 40_000, pid=pid2)
    # "wide" instances reach far: the reach of an early instance holds a late probe
    b.nvtx(900_000, 4_000_000, "late_outer")
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        got, want = both(rep, 20)
    assert got == want
    by = {c["name"]: c for c in got}
    assert by["alpha"]["usual_parent"] == "step" and by["alpha"]["inside_frac"] == 1.0
    assert by["beta"]["inside_frac"] == 1.0  # inside step and alpha
    assert by["head"]["usual_parent"] == "step" and by["tail"]["usual_parent"] == "step"
    assert by["other"]["usual_parent"] == "step"
    assert by["solo"]["inside_frac"] == 0.0
    assert by["step"]["inside_frac"] == 0.0


def test_instances_reaching_past_later_ones(builder, tmp_path):
    """The reach is the latest end of any instance that started earlier, not the last
    instance's: a long instance followed by short ones still holds later probes."""
    b = builder()
    b.nvtx(0, 10_000_000, "outer")
    for i in range(30):
        t = 100_000 + i * 200_000
        b.nvtx(t, t + 10_000, "outer")  # short instances of the same name
        b.nvtx(t + 20_000, t + 150_000, "inner")
        launch_in(b, t + 20_000, t + 150_000)
        launch_in(b, t, t + 10_000)
    launch_in(b, 0, 10_000_000)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        got, want = both(rep, 20)
    assert got == want
    by = {c["name"]: c for c in got}
    assert by["inner"]["inside_frac"] == 1.0 and by["inner"]["usual_parent"] == "outer"


CORPUS = corpus_sqlite_files()


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_candidates_equal_the_direct_rule(path):
    with open_corpus(path) as rep:
        if not rep.probe.present("nvtx_ranges"):
            pytest.skip("no NVTX ranges")
        for min_instances in (ranges.MIN_INSTANCES, 2):
            got, want = both(rep, min_instances)
            assert got == want


def test_own_captures_candidates_equal_the_direct_rule(labelled):
    for name, path in labelled.items():
        with nsysdiag.open(path, cache=False) as rep:
            got, want = both(rep, ranges.MIN_INSTANCES)
            assert got == want, name
