"""Analysis results are computed once per trace and option set, then read from the cache."""

from __future__ import annotations

import duckdb
import pytest

import nsysdiag
from nsysdiag.analyses import ANALYSES, module
from nsysdiag.analyses import results as results_mod
from nsysdiag.engine.schedule import forked


def _same_result(a, b):
    assert (a.analysis, a.status, a.message, a.main, a.findings) == (
        b.analysis, b.status, b.message, b.main, b.findings)
    assert results_mod._same(a.summary, b.summary)
    assert list(a.tables) == list(b.tables)
    for name in a.tables:
        assert a.tables[name].equals(b.tables[name]), name


@pytest.mark.parametrize("name", ANALYSES)
def test_cached_result_equals_fresh_one(name, standard_export, tmp_path, monkeypatch):
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        fresh = module(name).run(rep)
        first = rep.analysis(name)
    _same_result(fresh, first)

    def fail(*a, **k):
        raise AssertionError("computed again instead of read from the cache")

    monkeypatch.setattr(module(name), "run", fail)
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        again = rep.analysis(name)
    _same_result(fresh, again)


def test_other_options_compute_afresh(standard_export, tmp_path):
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        a = rep.analysis("launch_gaps", normal_threshold_us=5.0)
        b = rep.analysis("launch_gaps", normal_threshold_us=1000.0)
        assert rep.analysis("launch_gaps", normal_threshold_us=5.0) is a
    assert a.summary["share_above_normal_pct"] != b.summary["share_above_normal_pct"]


def test_damaged_result_is_recomputed(standard_export, tmp_path):
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        want = rep.analysis("kernel_summary")
    (stored,) = (tmp_path / "views").glob("*/results/kernel_summary-*/*/result.json")
    stored.write_text("{not json")
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        _same_result(want, rep.analysis("kernel_summary"))


def test_no_cache_leaves_no_results(standard_export, tmp_path):
    with nsysdiag.open(standard_export, cache=False, cache_dir=tmp_path) as rep:
        rep.analysis("kernel_summary")
        scratch = rep.cache_path
    assert not scratch.exists()
    assert not list(tmp_path.rglob("result.json"))


def test_other_code_computes_afresh(standard_export, tmp_path, monkeypatch):
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        rep.analysis("kernel_summary")
    monkeypatch.setattr(results_mod, "_code_digest", lambda: "another version of the code")
    calls = []
    real = module("kernel_summary").run
    monkeypatch.setattr(module("kernel_summary"), "run",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        rep.analysis("kernel_summary")
    assert calls == [1]


def test_forked_report_runs_beside_its_parent(standard_export, tmp_path):
    # An analysis on the fork's cursor in a thread, others on the parent meanwhile: each
    # result equals the one computed alone; the fork's connection ends with its block,
    # the parent's does not, and the fork's result is the parent's (shared results).
    from concurrent.futures import ThreadPoolExecutor

    alone = {}
    for name in ("launch_gaps", "overlap", "launch_latency"):
        with nsysdiag.open(standard_export, cache=False) as rep:
            alone[name] = rep.analysis(name).to_dict()
    with nsysdiag.open(standard_export, cache=False) as rep:
        with forked(rep, "kernels", "cuda_graphs", "memcpys", "memsets", "devices",
                        "processes", "api_calls") as other, ThreadPoolExecutor(1) as pool:
            assert other.con is not rep.con
            gaps = pool.submit(other.analysis, "launch_gaps")
            beside = {name: rep.analysis(name).to_dict() for name in ("overlap", "launch_latency")}
            assert gaps.result().to_dict() == alone["launch_gaps"]
        assert beside == {k: alone[k] for k in beside}
        with pytest.raises(duckdb.Error):
            other.con.execute("SELECT 1")
        assert rep.execute("SELECT count(*) FROM kernels")[0][0] > 0
        assert rep.analysis("launch_gaps").to_dict() == alone["launch_gaps"]
