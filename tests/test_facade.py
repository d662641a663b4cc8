"""The typed facade: one method of Report per analysis, with the options of its ``run``,
and one typed accessor per analysis on a diagnosis' results (``d.analyses.ranges``)."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest
from conftest import ROOT

import nsysdiag
from nsysdiag import facade
from nsysdiag.analyses import ANALYSES, module
from nsysdiag.analyses.base import AnalysisResult
from nsysdiag.analyses.graphs import GraphsResult
from nsysdiag.analyses.ranges import RangesResult
from nsysdiag.analyses.transfers import TransfersResult
from nsysdiag.diagnosis.model import Analyses
from nsysdiag.facade import Analysis, Declared
from nsysdiag.report import Report

EXAMPLE = ROOT / "examples" / "gpu-jitter.sqlite"


def _typing_imports() -> set[str]:
    """The names facade.py imports from nsysdiag.analyses for the type checker."""
    tree = ast.parse(inspect.getsource(facade))
    return {alias.name for node in tree.body if isinstance(node, ast.If)
            for stmt in node.body if isinstance(stmt, ast.ImportFrom)
            and stmt.module == "analyses" and stmt.level == 1 for alias in stmt.names}


@pytest.mark.parametrize("name", ANALYSES)
def test_every_analysis_has_its_line_naming_its_own_module(name):
    """One line of facade.Declared per analysis, whose lambda names the analysis' own
    module (what the type checker reads); Report and a diagnosis' results share it."""
    declared = inspect.getattr_static(Declared, name, None)
    assert isinstance(declared, Analysis), f"nsysdiag/facade.py declares no {name}"
    assert declared.name == name
    assert declared.declared.__code__.co_names == (name,)
    assert getattr(Report, name) is getattr(Analyses, name) is declared
    assert f"\n    {name} = Analysis(lambda: {name})\n" in inspect.getsource(facade)
    assert name in _typing_imports(), "the module is not imported for the type checker"
    assert module(name).RESULT.analysis_name() == name


@pytest.mark.parametrize("name", ANALYSES)
def test_every_method_has_the_options_and_docs_of_run(name, tmp_path):
    with nsysdiag.open(EXAMPLE, cache_dir=tmp_path) as rep:
        method = getattr(rep, name)
    run = inspect.signature(module(name).run)
    facade_sig = inspect.signature(method)
    # the same options, kinds, defaults and annotations (strings: postponed evaluation);
    # the report is the method's self
    (_, *expected), got = run.parameters.values(), facade_sig.parameters.values()
    assert [(p.name, p.kind, p.default, p.annotation) for p in got] == \
        [(p.name, p.kind, p.default, p.annotation) for p in expected]
    assert facade_sig.return_annotation == run.return_annotation
    assert f"nsysdiag.analyses.{name}.run" in method.__doc__
    assert method.__name__ == name


def test_positional_and_keyword_options_reach_run(tmp_path):
    with nsysdiag.open(EXAMPLE, cache_dir=tmp_path) as rep:
        # ranges' first options are positional, as in its run
        assert rep.ranges(None, None) is rep.ranges() is rep.analysis("ranges")
        assert rep.graphs(top=3) is rep.analysis("graphs", top=3)
        with pytest.raises(TypeError):
            rep.transfers(no_such_option=1)
        with pytest.raises(TypeError):
            rep.transfers("positional")


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


_TYPED = '''
import nsysdiag
from nsysdiag.diagnosis.model import Analyses

with nsysdiag.open("x.sqlite") as rep:
    reveal_type(rep.ranges)
    rep.transfers(no_such_option=1)
    rep.graphs(top="ten")
a = Analyses()
reveal_type(a.transfers)
t = a.transfers
if t is not None:
    reveal_type(t.htod.median_gbps)
'''


def test_the_type_checker_reads_each_analysis_from_its_line(tmp_path):
    """mypy (where installed) gives a method the options and result of ``run`` and an
    accessor the result class, from the one line per analysis."""
    api = pytest.importorskip("mypy.api")
    (tmp_path / "typed.py").write_text(_TYPED)
    out, _, _ = api.run(["--follow-imports=silent", "--ignore-missing-imports",
                         "--no-incremental", str(tmp_path / "typed.py")])
    assert ('Revealed type is "def (range_name: str | None =, tail_pct: float | None =, '
            "min_instances: int | None =, scope: str =, keep_warmup: bool | None =, *, "
            "settings: nsysdiag.settings.Settings | None =) -> "
            "nsysdiag.analyses.ranges.RangesResult | nsysdiag.analyses.base.AnalysisResult"
            '"') in out
    assert 'Unexpected keyword argument "no_such_option"' in out
    assert 'Argument "top" has incompatible type "str"; expected "int"' in out
    assert 'Revealed type is "nsysdiag.analyses.transfers.TransfersResult | None"' in out
    assert 'Revealed type is "float | None"' in out
