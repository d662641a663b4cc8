"""nsysdiag.diff: B against A, figure by figure, with a noise floor."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import H200
from test_html import unit_trace

import nsysdiag
from nsysdiag.diagnosis.engine import diagnose
from nsysdiag.diff import (
    IMPROVED,
    INFO,
    REGRESSED,
    STATUSES,
    UNCHANGED,
    DiffResult,
    _judge,
    diff,
)
from nsysdiag.errors import UsageError

JUDGED = (REGRESSED, IMPROVED, UNCHANGED)


def rows_for(result: DiffResult, section: str, metric: str | None = None):
    return [r for r in result.rows
            if r.section == section and (metric is None or r.metric == metric)]


@pytest.fixture
def pair(builder, tmp_path):
    """A baseline trace and a factory for variants with the gemm kernel scaled."""
    a = unit_trace(builder, tmp_path / "a.sqlite")

    def variant(factor: float, name: str):
        return unit_trace(builder, tmp_path / f"{name}.sqlite", gemm_ns=20_000 * factor)

    return a, variant


# ----------------------------------------------------------------------------- judging


@pytest.mark.parametrize(("a", "b", "worse_high", "status"), [
    (100_000, 104_000, True, UNCHANGED),     # 4 % < 5 %
    (100_000, 106_000, True, REGRESSED),
    (100_000, 94_000, True, IMPROVED),
    (1_000, 1_200, True, UNCHANGED),         # 20 % but 200 ns < 250 ns floor
    (1_000, 1_300, True, REGRESSED),
    (20.0, 15.0, False, REGRESSED),          # bandwidth down
    (20.0, 25.0, False, IMPROVED),
])
def test_judge_noise_floor(a, b, worse_high, status):
    floor = 250 if worse_high else 0.25
    change, got = _judge(a, b, higher_is_worse=worse_high, noise=0.05, floor=floor)
    assert got == status
    assert change == pytest.approx((b - a) / a)


# ----------------------------------------------------------------------------- hand-built


def test_kernel_twice_as_slow_regresses(pair):
    a, variant = pair
    b = variant(2.0, "slow")
    r = diff(a, b)
    assert r.regressed
    (gemm,) = rows_for(r, "kernels", "gemm")
    assert gemm.status == REGRESSED
    assert gemm.change == pytest.approx(1.0, rel=0.05)
    (relu,) = rows_for(r, "kernels", "relu")
    assert relu.status == UNCHANGED
    p50 = [x for x in rows_for(r, "latency") if x.metric.endswith("P50")]
    assert p50 and p50[0].status == REGRESSED
    (bw,) = rows_for(r, "transfers")
    assert bw.status == UNCHANGED
    assert {x.status for x in rows_for(r, "launch_gaps") if x.status in JUDGED} == {UNCHANGED}
    assert "REGRESSED" in str(r) and "gemm" in str(r)


def test_one_percent_is_noise(pair):
    a, variant = pair
    r = diff(a, variant(1.01, "noise"))
    assert not r.regressed and not r.improved
    judged = [x for x in r.rows if x.status in JUDGED]
    assert len(judged) >= 8
    assert {x.status for x in judged} == {UNCHANGED}
    (gemm,) = rows_for(r, "kernels", "gemm")
    assert 0 < gemm.change < 0.02


def test_improvement_is_not_a_regression(pair):
    a, variant = pair
    r = diff(variant(2.0, "slow"), a)
    assert not r.regressed and r.improved
    (gemm,) = rows_for(r, "kernels", "gemm")
    assert gemm.status == IMPROVED


def test_same_trace_is_unchanged(pair):
    a, _ = pair
    r = diff(a, a)
    assert not r.regressed
    assert {x.status for x in r.rows} <= {UNCHANGED, INFO}
    assert all(x.change in (0.0, None) for x in r.rows)


def test_diagnosis_objects_and_noise_option(pair):
    a, variant = pair
    b = variant(1.08, "eight")  # +8 % gemm (1.6 us): regressed at 5 %, unchanged at 10 %
    da, db = diagnose(a), diagnose(b)
    assert diff(da, db).regressed
    loose = diff(da, db, noise=0.10)
    assert not loose.regressed
    assert loose.noise == 0.10


def test_to_dict_and_json(pair):
    a, variant = pair
    r = diff(a, variant(2.0, "slow"))
    doc = json.loads(r.to_json())
    assert doc["schema"] == "nsysdiag.diff/1"
    assert doc["regressed"] is True
    assert doc["noise_pct"] == 5
    assert set(doc["counts"]) == set(STATUSES)
    assert sum(doc["counts"].values()) == len(doc["rows"]) == len(r.rows)
    row = next(x for x in doc["rows"] if x["metric"] == "gemm")
    assert row["status"] == "regressed" and row["unit"] == "ns"
    assert row["change_pct"] == pytest.approx(100, rel=0.05)
    assert {"section", "metric", "a", "b", "unit", "change_pct", "status", "note"} == set(row)


def test_new_and_removed_kernels_are_informational(builder, tmp_path):
    a = unit_trace(builder, tmp_path / "a.sqlite")
    b = unit_trace(builder, tmp_path / "b.sqlite", relu="gelu")
    r = diff(a, b)
    statuses = {x.metric: x.status for x in rows_for(r, "kernels")}
    assert statuses["relu"] == "removed" and statuses["gelu"] == "added"
    assert not r.regressed


@pytest.mark.parametrize("kw", [{"noise": -0.1}, {"noise": 5.0}, {"min_abs_ns": float("nan")},
                                {"min_count": -1}, {"top_kernels": 0}])
def test_bad_options(pair, kw):
    a, _ = pair
    with pytest.raises(UsageError):
        diff(a, a, **kw)


def test_bad_input_type():
    with pytest.raises(UsageError, match="Diagnosis or a path"):
        diff(42, 43)  # type: ignore[arg-type]


def test_cli_diff_exit_codes(pair, capsys):
    from nsysdiag.cli.main import cli, main

    if "diff" not in cli.commands:
        pytest.skip("the diff command is not wired into the CLI yet")
    a, variant = pair
    b = variant(2.0, "slow")
    assert main(["diff", str(a), str(b)]) == 0
    assert "REGRESSED" in capsys.readouterr().out
    assert main(["diff", str(a), str(b), "--fail-on-regression"]) == 1
    capsys.readouterr()
    assert main(["diff", str(a), str(a), "--fail-on-regression", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["regressed"] is False
    assert main(["diff", str(a), str(b), "--fail-on-regression", "--noise", "200"]) == 2


# ----------------------------------------------------------------------------- real corpus


@pytest.fixture(scope="module")
def h200():
    """Baseline and GPU-jitter captures of the shared corpus, diagnosed once."""
    from nsysdiag.analyses import module

    out = {}
    for name in ("baseline", "gpu"):
        path = H200 / f"{name}.sqlite"
        if not path.exists():
            pytest.skip(f"{path} not available")
        with nsysdiag.open(path, cache=False) as rep:
            d = diagnose(rep)
            ks = module("kernel_summary").run(rep)
        out[name] = dataclasses.replace(d, analyses={**d.analyses, "kernel_summary": ks})
    return out


def test_corpus_gpu_jitter_regresses_against_baseline(h200):
    r = diff(h200["baseline"], h200["gpu"])
    assert r.regressed
    (verdict,) = rows_for(r, "verdict")
    # the layer named for B is the engine's call; the diff only says it left "healthy"
    assert verdict.a == "healthy" and verdict.b in ("cpu", "gpu", "pcie")
    assert verdict.status == REGRESSED
    p99 = next(x for x in rows_for(r, "latency") if x.metric.endswith("P99"))
    assert p99.status == REGRESSED and p99.change > 1.0
    assert rows_for(r, "kernels") and rows_for(r, "transfers")


def test_corpus_baseline_against_itself_is_unchanged(h200):
    r = diff(h200["baseline"], h200["baseline"])
    assert not r.regressed and not r.improved
    assert {x.status for x in r.rows} <= {UNCHANGED, INFO}
    assert len([x for x in r.rows if x.status == UNCHANGED]) >= 15
