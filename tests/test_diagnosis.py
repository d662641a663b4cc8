"""The diagnosis on labelled real H200 traces, its JSON contract, and hand-built cases."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest
from conftest import H200, need

import nsysdiag
from nsysdiag.cli.main import main

SCHEMA = json.loads(resources.files("nsysdiag").joinpath("schema/diagnosis-v1.schema.json").read_text())


@pytest.mark.parametrize("scenario,layer", [
    ("baseline", "healthy"), ("cpu", "cpu"), ("gpu", "gpu"), ("pcie", "pcie"),
    ("graph", "healthy"), ("pageable", "healthy"),
])
def test_labelled_captures(labelled, scenario, layer):
    d = nsysdiag.diagnose(labelled[scenario], cache=False)
    assert d.verdict.layer == layer, d.verdict.summary
    jsonschema.validate(d.to_dict(), SCHEMA)
    if scenario == "graph":
        assert d.cuda_graphs.in_use is True
        assert any(f.layer == "graph" for f in d.findings)
    if scenario == "cpu":
        assert d.tail.shape == "right_skewed"


def test_shared_baseline_is_healthy_with_launch_overhead_finding():
    d = nsysdiag.diagnose(need(H200 / "baseline.sqlite"), cache=False)
    assert d.verdict.layer == "healthy"
    launch = [f for f in d.findings if f.check == "C1" and f.severity == "warning"]
    assert launch and launch[0].layer == "cpu"
    assert d.launch_gaps.count > 0 and d.launch_gaps.p99_ns > 20_000
    assert d.cuda_graphs.in_use is False


def test_shared_gpu_trace_is_gpu_and_multimodal(capsys):
    path = need(H200 / "gpu.sqlite")
    assert main(["--no-cache", "diagnose", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, SCHEMA)
    assert doc["verdict"]["layer"] == "gpu"
    assert doc["tail"]["shape"] == "multimodal"
    assert {"count", "p50_ns", "p99_ns"} <= set(doc["launch_gaps"])


def test_findings_are_ordered_by_severity(labelled):
    d = nsysdiag.diagnose(labelled["gpu"], cache=False)
    order = {"critical": 0, "warning": 1, "info": 2}
    sev = [order[f.severity] for f in d.findings]
    assert sev == sorted(sev)


def test_no_nvtx_no_sync_is_undetermined(builder, tmp_path):
    b = builder("current")
    for i in range(5):
        b.launch(i * 1000, i * 1000 + 100, i * 1000 + 200, i * 1000 + 500)
    d = nsysdiag.diagnose(b.write(tmp_path / "x.sqlite"), cache=False)
    assert d.verdict.layer == "undetermined"
    jsonschema.validate(d.to_dict(), SCHEMA)


def test_too_few_units_is_insufficient_data(builder, tmp_path):
    b = builder("current")
    for i in range(10):
        t = i * 10_000
        b.nvtx(t, t + 5000 + 100 * i, "request")
        b.launch(t + 100, t + 200, t + 300, t + 4000)
    path = b.write(tmp_path / "few.sqlite")
    d = nsysdiag.diagnose(path, cache=False)
    assert d.verdict.layer == "undetermined"
    assert "pass --range NAME" in d.verdict.summary
    d = nsysdiag.diagnose(path, range_name="request", cache=False)
    assert d.verdict.layer == "insufficient"
    assert d.tail.n == 10 and d.tail.shape == "insufficient_data"
    assert "nsufficient" in d.verdict.summary


def test_diagnose_without_cuda_or_nvtx_exits_4(builder, tmp_path, capsys):
    # neither CUDA nor NVTX: nothing to diagnose (an NVTX-only capture is diagnosed as far
    # as it goes: tests/test_capture.py)
    b = builder("current")
    b.thread_name("main")
    assert main(["diagnose", str(b.write(tmp_path / "n.sqlite"))]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--trace=cuda" in err[0]
