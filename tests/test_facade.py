"""The typed facade: one method of Report per analysis, with the options of its ``run``,
and one typed accessor per analysis on a diagnosis' results (``d.analyses.ranges``)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from conftest import ROOT

import nsysdiag
from nsysdiag.analyses import ANALYSES, module
from nsysdiag.analyses.base import AnalysisResult
from nsysdiag.analyses.graphs import GraphsResult
from nsysdiag.analyses.ranges import RangesResult
from nsysdiag.analyses.transfers import TransfersResult
from nsysdiag.diagnosis.model import Analyses
from nsysdiag.facade import AnalysisMethods
from nsysdiag.report import Report

EXAMPLE = ROOT / "examples" / "gpu-jitter.sqlite"


@pytest.mark.parametrize("name", ANALYSES)
def test_every_analysis_has_its_method_with_the_options_of_run(name):
    method = getattr(AnalysisMethods, name, None)
    assert callable(method), f"nsysdiag/facade.py has no method {name}"
    assert getattr(Report, name) is method
    run = inspect.signature(module(name).run)
    facade = inspect.signature(method)
    # the same options, kinds, defaults and annotations (strings: postponed evaluation);
    # the report is the method's self
    (_, *expected), (_, *got) = run.parameters.values(), facade.parameters.values()
    assert [(p.name, p.kind, p.default, p.annotation) for p in got] == \
        [(p.name, p.kind, p.default, p.annotation) for p in expected]
    assert facade.return_annotation == run.return_annotation
    assert f"nsysdiag.analyses.{name}.run" in method.__doc__


@pytest.mark.parametrize("name", ANALYSES)
def test_every_analysis_has_its_typed_accessor(name):
    accessor = getattr(Analyses, name, None)
    assert isinstance(accessor, property), f"diagnosis.model.Analyses has no {name}"
    assert inspect.signature(accessor.fget).return_annotation == \
        f"{module(name).RESULT.__name__} | None"
    assert module(name).RESULT.analysis_name() == name


def test_methods_share_the_results_of_analysis(tmp_path):
    with nsysdiag.open(EXAMPLE, cache_dir=tmp_path) as rep:
        t = rep.transfers()
        assert isinstance(t, TransfersResult) and t.ok
        # options left out are their defaults: one result, computed once
        assert rep.analysis("transfers") is t
        assert rep.transfers(baseline=None, large_bytes=None) is t
        assert rep.ranges() is rep.analysis("ranges", range_name=None, scope="auto")
        other = rep.transfers(large_bytes=1 << 10)
        assert other is not t and other.copies == t.copies
        with pytest.raises(TypeError):
            rep.analysis("transfers", no_such_option=1)


def test_diagnosis_results_are_read_by_type(tmp_path):
    d = nsysdiag.diagnose(EXAMPLE, cache_dir=tmp_path)
    a = d.analyses
    assert isinstance(a, Analyses) and isinstance(a, dict)
    assert isinstance(a.ranges, RangesResult) and a.ranges is a["ranges"]
    assert isinstance(a.transfers, TransfersResult)
    assert a.transfers.htod.copies == a["transfers"].summary["htod_copies"] > 0
    # the example sampled no GPU metrics: a bare result, no typed one
    assert type(a["gpu_metrics"]) is AnalysisResult and a.gpu_metrics is None
    # not run by the diagnosis (not asked for): None, not an error
    assert "host_syncs" not in a and a.host_syncs is None
    # whatever its status, typed() gives a result of its class
    g = a["graphs"]
    assert a.typed(GraphsResult) is g and (a.graphs is g) == g.ok
    # a plain dict given to the dataclass becomes typed too
    bare = dataclasses.replace(d, analyses={"ranges": a["ranges"]})
    assert isinstance(bare.analyses, Analyses) and bare.analyses.ranges is a["ranges"]
    assert bare.analyses.transfers is None
