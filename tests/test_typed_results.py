"""Results are typed: each analysis returns its own frozen result class, the JSON schema
lists exactly the classes' fields, and the diagnosis, diff and renderers read attributes
(never the ``summary`` dict), so a renamed field fails loudly instead of showing as "not
measured"."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources

import jsonschema
import pytest
from conftest import ROOT

import nsysdiag
from nsysdiag.analyses import ANALYSES, module
from nsysdiag.analyses.base import AnalysisResult, record_type
from nsysdiag.analyses.ranges import Component, RangesResult
from nsysdiag.analyses.timelines import ApiSpan, GpuSpan, NvtxSpan, UnitTimeline
from nsysdiag.diagnosis.checks import component_layer
from nsysdiag.diagnosis.model import Finding, GapSummary, TailSummary, Verdict
from nsysdiag.diagnosis.schema import diagnosis_schema
from nsysdiag.diagnosis.timelines import collect_timelines
from nsysdiag.diff import diff
from nsysdiag.errors import UsageError
from nsysdiag.render.html import render_html
from nsysdiag.settings import Settings

SHIPPED = json.loads(
    resources.files("nsysdiag").joinpath("schema/diagnosis-v1.schema.json").read_text())
EXAMPLE = ROOT / "examples" / "gpu-jitter.sqlite"


def test_shipped_schema_is_the_generated_one():
    # regenerate: python -m nsysdiag.diagnosis.schema > nsysdiag/schema/diagnosis-v1.schema.json
    assert SHIPPED == diagnosis_schema()


@pytest.mark.parametrize("name", ANALYSES)
def test_schema_lists_each_result_class_fields(name):
    cls = module(name).RESULT
    assert issubclass(cls, AnalysisResult) and cls.__dataclass_params__.frozen
    fields = cls.summary_fields()
    # a record's figures (transfers' htod, dtoh) are flat keys: htod_median_gbps, ...
    assert list(SHIPPED["$defs"][name]["properties"]) == list(cls.summary_keys())
    records = [record_type(f) for f in fields if record_type(f) is not None]
    assert set(cls.summary_keys()) >= {f.name for f in fields if record_type(f) is None}
    undocumented = [f.name for f in fields if not f.metadata.get("doc")]
    undocumented += [g.name for r in records for g in dataclasses.fields(r)
                     if not g.metadata.get("doc")]
    assert not undocumented


def test_schema_lists_the_diagnosis_fields():
    props = SHIPPED["properties"]
    assert set(props["tail"]["properties"]) == {f.name for f in dataclasses.fields(TailSummary)}
    assert set(props["launch_gaps"]["properties"]) == {
        f.name for f in dataclasses.fields(GapSummary)}
    assert set(props["verdict"]["properties"]) == {f.name for f in dataclasses.fields(Verdict)}
    # weight orders the findings; it is not in the JSON
    assert set(props["findings"]["items"]["properties"]) == {
        f.name for f in dataclasses.fields(Finding)} - {"weight"}


def test_components_carry_their_layer():
    # by hand from the method: waiting is no cause; copies point at PCIe, kernels and
    # other GPU work at the GPU, host-side work at the CPU
    expected = {
        "cpu_launch": "cpu", "cpu_memcpy": "pcie", "cpu_sync": None, "cpu_other_api": "cpu",
        "cpu_outside_cuda": "cpu", "gpu_own_kernel": "gpu", "gpu_own_copy": "pcie",
        "gpu_other": "gpu", "gpu_pending_idle": "gpu", "gpu_idle": None,
    }
    assert {c.value: component_layer(c) for c in Component} == expected
    assert [c for c in Component if c.waits_for_host] == [Component.GPU_IDLE]
    assert {c.value for c in Component if c.cuda_call} == {
        "cpu_launch", "cpu_memcpy", "cpu_other_api"}


def test_summary_round_trips_through_the_class(tmp_path):
    with nsysdiag.open(EXAMPLE, cache_dir=tmp_path) as rep:
        first = {name: rep.analysis(name) for name in ANALYSES}
    with nsysdiag.open(EXAMPLE, cache_dir=tmp_path) as rep:  # read back from the cache
        again = {name: rep.analysis(name) for name in ANALYSES}
    for name in ANALYSES:
        a, b = first[name], again[name]
        if name == "gpu_metrics":  # the example sampled none: said, with the capture option
            assert type(a) is type(b) is AnalysisResult and a.status == "not_captured"
            assert "--gpu-metrics-devices" in a.message and a == b
            continue
        assert type(a) is type(b) is module(name).RESULT
        assert a.to_dict(tables=False) == b.to_dict(tables=False)
        assert b == type(b).from_summary(name, b.status, b.message, b.summary, b.tables,
                                         b.main, b.findings)
    r = again["ranges"]
    assert isinstance(r, RangesResult) and isinstance(r.top_component, Component)
    assert r.attribution and all(isinstance(g.component, Component) for g in r.attribution)


@pytest.fixture
def summary_forbidden(monkeypatch):
    """Reading a result's ``summary`` dict raises: only attributes may be read."""

    def forbidden(self):
        raise AssertionError(f"{self.analysis}: summary read by key")

    monkeypatch.setattr(AnalysisResult, "summary", property(forbidden))


@pytest.mark.parametrize("scenario", ["example", "graph", "pcie"])
def test_consumers_read_attributes_only(scenario, labelled, tmp_path, request):
    path = EXAMPLE if scenario == "example" else labelled[scenario]
    d = nsysdiag.diagnose(path, cache_dir=tmp_path)
    jsonschema.validate(d.to_dict(), SHIPPED)
    request.getfixturevalue("summary_forbidden")
    with pytest.raises(AssertionError, match="summary read by key"):
        _ = next(iter(d.analyses.values())).summary
    text = str(d)
    page = render_html(d)
    d._repr_html_()
    result = diff(d, d, cache_dir=tmp_path)
    assert d.verdict.summary in text and "Launch gap" in page
    assert not result.regressed
    if scenario == "graph":
        assert d.cuda_graphs.in_use and "CUDA Graphs in use" in text


def test_timelines_are_typed_and_drawn_from_attributes(tmp_path, request):
    """The per-unit timelines are frozen records, read by attribute: the page draws them
    with every result's ``summary`` forbidden, and a timeline cannot be read by key."""
    with nsysdiag.open(EXAMPLE, cache_dir=tmp_path) as rep:
        d = nsysdiag.diagnose(rep)
        tls = collect_timelines(rep, d)
    assert [t.rank for t in tls] == [1, 2, 3, 0]
    kinds = {NvtxSpan: "nvtx", ApiSpan: "cpu", GpuSpan: "gpu"}
    for t in tls:
        assert type(t) is UnitTimeline and t.__dataclass_params__.frozen
        with pytest.raises(TypeError):
            _ = t["rank"]  # type: ignore[index]
        with pytest.raises(dataclasses.FrozenInstanceError):
            t.rank = 9  # type: ignore[misc]
        for cls, field_name in kinds.items():
            events = getattr(t, field_name)
            assert isinstance(events, tuple) and all(type(e) is cls for e in events)
            assert cls.__dataclass_params__.frozen
        assert t.cpu and t.gpu
        assert all(isinstance(e.start_ns, int) and e.end_ns >= e.start_ns for e in t.gpu)
        as_dict = t.to_dict()
        assert as_dict["duration_ns"] == t.end_ns - t.start_ns == t.duration_ns
        assert as_dict["gpu"][0] == dataclasses.asdict(t.gpu[0])
    request.getfixturevalue("summary_forbidden")
    page = render_html(d, timelines=[*tls, UnitTimeline.unavailable("no <window> here")])
    assert page.count('class="plot timeline"') == len(tls)
    assert all(f"<h3>{t.label} <span" in page for t in tls)
    assert "no &lt;window&gt; here" in page


def test_every_setting_is_documented():
    text = (ROOT / "docs" / "diagnosis.md").read_text()
    missing = [f.name for f in dataclasses.fields(Settings) if f"| `{f.name}` |" not in text]
    assert not missing


def test_settings_are_validated():
    with pytest.raises(UsageError, match="gap_p99_ns must be a number >= 0, got -1"):
        Settings(gap_p99_ns=-1)
    with pytest.raises(UsageError, match="gap_normal_ns must be an integer, got 1.5"):
        Settings(gap_normal_ns=1.5)
    with pytest.raises(UsageError, match="tail_ratio must be a finite number"):
        Settings(tail_ratio=float("nan"))
    assert Settings().replace(gap_p99_ns=50_000).gap_p99_ns == 50_000
