"""The layering contract of ``pyproject.toml`` ([tool.importlinter]) holds.

import-linter reads every import of the package, those inside functions included, and
checks: the stages point one way (adapters -> views -> analyses -> stats -> diagnosis ->
render -> cli/batch), no import cycles, no renderer imported below the command line and
batch, click imported by the command line only, imports made for annotations alone
counted. The second test reverses the layers and expects the check to fail, so the first
cannot pass by checking nothing. The analyses know the report by a protocol
(``engine.protocols``) that ``Report`` satisfies: the last tests hold it to that.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path

import duckdb
from conftest import ROOT

import nsysdiag
from nsysdiag.engine.protocols import ProbeLike, ReportLike, ReportSetLike, ViewStatusLike
from nsysdiag.engine.schedule import forked
from nsysdiag.engine.workspace import Workspace
from nsysdiag.report import Report
from nsysdiag.reportset import ReportSet
from nsysdiag.views.probe import Probe, ViewStatus

LINT = (
    "import sys\n"
    "from importlinter.cli import lint_imports\n"
    "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))\n"
)


def lint(config: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LINT, config],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_hold():
    done = lint(str(ROOT / "pyproject.toml"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout, done.stdout


def test_reversed_layers_are_broken(tmp_path):
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^layers = \[\n(.*?)^\]", text, re.S | re.M)
    assert block, "no layers list in [tool.importlinter]"
    layers = block.group(1).splitlines()
    flipped = text.replace(block.group(1), "\n".join(reversed(layers)) + "\n")
    config = tmp_path / "pyproject.toml"
    config.write_text(flipped)
    done = lint(str(config))
    assert done.returncode != 0, done.stdout
    assert "is not allowed to import" in done.stdout, done.stdout


# -- the protocol the analyses know the report by -------------------------------------------
def _members(protocol: type) -> set[str]:
    """The protocol's methods and properties, and its data members (annotations)."""
    own = {n for n in vars(protocol)
           if not n.startswith("_") or n in ("__iter__", "__len__", "__getitem__")}
    return own | set(typing.get_type_hints(protocol))


def test_report_satisfies_the_protocol_the_analyses_use(standard_export, tmp_path):
    # members present with the protocol's signatures and types (checked here: the project
    # runs no static type checker); the forked report of the engine's threads too
    for protocol, cls in ((ReportLike, Report), (ReportSetLike, ReportSet),
                          (ProbeLike, Probe), (ViewStatusLike, ViewStatus)):
        data = typing.get_type_hints(protocol)
        for name in _members(protocol) - set(data):
            want, have = getattr(protocol, name), getattr(cls, name)
            if isinstance(want, property):
                assert isinstance(have, property), name
                continue
            assert [(p.name, p.kind, p.default) for p in
                    inspect.signature(want).parameters.values()] == [
                (p.name, p.kind, p.default) for p in inspect.signature(have).parameters.values()
            ], name
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        with forked(rep, "kernels") as other:
            for r in (rep, other):
                assert isinstance(r, ReportLike) and isinstance(r.probe, ProbeLike)
                assert isinstance(r.probe["kernels"], ViewStatusLike)
                for name, kind in (("path", Path), ("cache_path", Path), ("workspace", Workspace),
                                   ("con", duckdb.DuckDBPyConnection), ("results_memo", dict)):
                    assert isinstance(getattr(r, name), kind), name
    with ReportSet([standard_export], cache_dir=tmp_path) as rs:
        assert isinstance(rs, ReportSetLike)
        assert all(isinstance(r, ReportLike) for r in rs)
    # the check can fail: an object without the members is no report
    assert not isinstance(object(), ReportLike) and not isinstance(object(), ReportSetLike)


def _is_report(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("report", "rep")


def _is_probe(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "probe" and _is_report(node.value)


def test_the_analyses_use_only_what_the_protocol_names():
    # every attribute an analysis reads of ``report``/``rep`` is a member of ReportLike, of
    # ``report.probe`` one of ProbeLike, of ``report.probe[view]`` one of ViewStatusLike
    # (a probe or status first put in a variable is not followed)
    used: dict[type, dict[str, set[str]]] = {ReportLike: {}, ProbeLike: {}, ViewStatusLike: {}}
    for path in sorted((ROOT / "nsysdiag" / "analyses").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            of = node.value
            protocol = (ReportLike if _is_report(of) else ProbeLike if _is_probe(of)
                        else ViewStatusLike if isinstance(of, ast.Subscript)
                        and _is_probe(of.value) else None)
            if protocol is not None:
                used[protocol].setdefault(node.attr, set()).add(path.name)
    # the scan finds uses
    assert {"sql", "probe", "analysis", "workspace"} <= set(used[ReportLike])
    assert {"present"} <= set(used[ProbeLike])
    assert {"source_rows", "status"} <= set(used[ViewStatusLike])
    for protocol, attrs in used.items():
        assert {a: sorted(f) for a, f in attrs.items() if a not in _members(protocol)} == {}
