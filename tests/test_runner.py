"""The runner (``engine/runner.py``): a plan of analyses ordered and overlapped from what
each declares (``RUNS``), and the declarations checked against what the analyses do."""

from __future__ import annotations

import ast
import inspect
import threading
from pathlib import Path

import pytest

import nsysdiag
from nsysdiag.analyses import ANALYSES, module
from nsysdiag.analyses import results as results_mod
from nsysdiag.compute import intervals
from nsysdiag.engine import runner
from nsysdiag.engine.runner import Runs, Task
from nsysdiag.engine.workspace import Workspace
from nsysdiag.views import build

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpu-jitter.sqlite"

#: what a diagnosis asks for first (diagnosis/engine.py)
DIAGNOSIS = ("launch_gaps", "launch_latency", "transfers", "overlap", "graphs", "capture",
             "ranges", "os_blocking", "gpu_metrics", "whole_run")


def _task(name: str, **runs) -> Task:
    return Task(name, lambda report, name=name: name, Runs(**runs))


def _names(tasks) -> list[str]:
    return [t.name for t in tasks]


# -- ordering and stages, on declared tasks -----------------------------------------------
def test_a_task_runs_after_what_it_needs_otherwise_in_the_plans_order():
    plan = [_task("a", needs=("c",)), _task("b"), _task("c"), _task("d", needs=("x",)),
            _task("e", makes=("x",))]
    # a needs c; d needs the intermediate x that e makes
    assert _names(runner.ordered(plan)) == ["b", "c", "a", "e", "d"]
    # a need that no task of the plan is or makes orders nothing
    assert _names(runner.ordered([_task("a", needs=("zz",)), _task("b")])) == ["a", "b"]


def test_a_circle_or_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="need one another: a, b"):
        runner.ordered([_task("a", needs=("b",)), _task("b", needs=("a",))])
    with pytest.raises(ValueError, match="twice"):
        runner.ordered([_task("a"), _task("a")])


def test_a_one_core_task_runs_beside_what_can_run_meanwhile():
    plan = [_task("side", one_core=True, large_peak=True), _task("p"),
            _task("big", large_peak=True), _task("q"), _task("after", needs=("side",)),
            _task("r", needs=("p",)), _task("s", needs=("big",))]
    got = [(s.aside.name if s.aside else None, _names(s.main)) for s in runner.stages(plan)]
    # big: two large peaks never at once; after needs side; s needs big, not yet run
    assert got == [("side", ["p", "q", "r"]), (None, ["big"]), (None, ["after"]),
                   (None, ["s"])]
    # two one-core tasks are not paired; a one-core task with nothing beside runs alone
    got = [(s.aside.name if s.aside else None, _names(s.main))
           for s in runner.stages([_task("a", one_core=True), _task("b", one_core=True)])]
    assert got == [("a", []), ("b", [])]


def test_intermediates_are_handed_only_between_a_maker_and_a_reader_of_the_plan():
    assert runner.handed([_task("a", makes=("x", "y")), _task("b", needs=("x", "z"))]) \
        == ("x",)
    assert runner.handed([_task("b", needs=("x",))]) == ()


def test_the_diagnosis_plan_from_the_declarations():
    """The order the diagnosis ran by hand until the declarations gave it: launch gaps (one
    core) beside the DuckDB analyses, not beside ranges (both have large memory peaks);
    ranges after overlap, whose pass makes the busy unions it reads; whole_run after
    overlap. Each view that a stage's tasks read is among those built before launch gaps
    forks. Then gpu_idle, which needs ranges (one core), beside jitter (DuckDB), and the
    tail's shape (one core) after them."""
    plan = [results_mod.task(name) for name in DIAGNOSIS]
    stages = runner.stages(plan)
    got = [(s.aside.name if s.aside else None, _names(s.main)) for s in stages]
    assert got == [
        ("launch_gaps", ["launch_latency", "transfers", "overlap", "graphs", "capture",
                         "os_blocking", "gpu_metrics", "whole_run"]),
        (None, ["ranges"])]
    assert runner.handed(plan) == (intervals.GPU_BUSY,)
    second = [results_mod.task("gpu_idle"), _task("tail shape", one_core=True),
              results_mod.task("jitter")]
    got = [(s.aside.name if s.aside else None, _names(s.main))
           for s in runner.stages(second)]
    assert got == [("gpu_idle", ["jitter"]), ("tail shape", [])]
    # a task's views: those of its SQL steps and of the analyses it needs
    assert set(results_mod.views_of("ranges")) <= set(results_mod.views_of("workload"))
    assert set(results_mod.views_of("overlap")) <= set(results_mod.views_of("whole_run"))


# -- running a plan -----------------------------------------------------------------------
def _recorded(seen, name, value=None):
    def call(report):
        seen[name] = (threading.current_thread().name, report)
        return value if value is not None else name.upper()
    return call


def test_run_gives_results_in_the_plans_order_and_a_side_in_the_worker():
    """The side that reads the report runs in the worker on a forked report: the one-core
    analysis, or the analyses beside a computation that reads no report (which stays on
    the caller's thread)."""
    here = threading.current_thread().name
    seen: dict = {}
    with nsysdiag.open(EXAMPLE, cache=False) as rep:
        plan = [Task("late", _recorded(seen, "late"), Runs(needs=("early",))),
                Task("gaps", _recorded(seen, "gaps"), Runs(one_core=True)),
                Task("early", _recorded(seen, "early"))]
        done = runner.run(rep, plan)
        assert list(done.items()) == [("late", "LATE"), ("gaps", "GAPS"), ("early", "EARLY")]
        assert seen["gaps"][0] == "nsysdiag: gaps" and seen["gaps"][1] is not rep
        assert seen["early"] == seen["late"] == (here, rep)

        seen.clear()
        plan = [Task("fits", _recorded(seen, "fits"), Runs(one_core=True), on_report=False),
                Task("a", _recorded(seen, "a")), Task("b", _recorded(seen, "b"))]
        assert runner.run(rep, plan) == {"fits": "FITS", "a": "A", "b": "B"}
        assert seen["fits"] == (here, None)
        assert seen["a"][0] == seen["b"][0] == "nsysdiag: a, b" and seen["a"][1] is not rep
        # alone, a one-core task runs on the caller's thread
        seen.clear()
        runner.run(rep, [Task("fits", _recorded(seen, "fits"), Runs(one_core=True))])
        assert seen["fits"] == (here, rep)


def test_an_error_of_either_side_reaches_the_caller():
    def fail(report):
        raise RuntimeError("boom")

    with nsysdiag.open(EXAMPLE, cache=False) as rep:
        for plan in ([Task("gaps", fail, Runs(one_core=True)), Task("other", lambda r: 1)],
                     [Task("fits", lambda r: 1, Runs(one_core=True), on_report=False),
                      Task("other", fail)],
                     [Task("fits", fail, Runs(one_core=True), on_report=False),
                      Task("other", lambda r: 1)]):
            with pytest.raises(RuntimeError, match="boom"):
                runner.run(rep, plan)


def test_overlap_hands_its_busy_unions_to_ranges_in_a_plan(monkeypatch):
    """The busy unions reach ranges through the declarations alone (overlap makes them,
    ranges needs them), whichever order the plan names them in; ranges' result is the one
    it computes on its own."""
    monkeypatch.setenv("NSYSDIAG_ACCELERATE", "always")
    taken = []
    take = Workspace.take

    def spy(self, name):
        value = take(self, name)
        taken.append((name, value is not None))
        return value

    with nsysdiag.open(EXAMPLE, cache=False) as rep:
        alone = rep.ranges()
    monkeypatch.setattr(Workspace, "take", spy)
    with nsysdiag.open(EXAMPLE, cache=False) as rep:
        done = runner.run(rep, [results_mod.task("ranges"), results_mod.task("overlap")])
        assert rep.workspace.take(intervals.GPU_BUSY) is None  # dropped at the plan's end
    assert (intervals.GPU_BUSY, True) in taken
    assert done["ranges"].ok and done["ranges"].summary == alone.summary
    assert done["ranges"].tables["instances"].equals(alone.tables["instances"])


# -- the declarations against what the analyses do ----------------------------------------
def _calls(name: str) -> list[tuple[str, str]]:
    """(method, first argument's source) of the calls in analysis ``name``'s module to
    ``report.analysis`` and to the workspace's ``take`` and ``hand``."""
    tree = ast.parse(inspect.getsource(module(name)))
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.args):
            continue
        on_workspace = isinstance(node.func.value, ast.Attribute) \
            and node.func.value.attr == "workspace"
        if node.func.attr == "analysis" or (node.func.attr in ("take", "hand")
                                            and on_workspace):
            out.append((node.func.attr, ast.unparse(node.args[0])))
    return out


@pytest.mark.parametrize("name", ANALYSES)
def test_an_analysis_declares_the_analyses_and_intermediates_it_reads(name):
    declared = results_mod.runs(name)
    for method, arg in _calls(name):
        value = eval(arg, vars(module(name)))  # a literal or a module constant
        if method == "hand":
            assert value in declared.makes, f"{name} hands {value} without RUNS.makes"
        else:
            assert value in declared.needs, f"{name} reads {value} without RUNS.needs"
    for need in declared.needs:
        made = any(need in results_mod.runs(a).makes for a in ANALYSES)
        assert need in ANALYSES or made, f"{name} needs {need}, which nothing makes"


@pytest.mark.parametrize("accelerate", ["never", "always"])
def test_an_analysis_reads_only_the_views_it_declares(accelerate, monkeypatch):
    """Every view an analysis asks for while it runs is among those the runner builds for
    it before a fork (``results.views_of``): a view built beside another thread's queries
    would set options of the whole database under them."""
    monkeypatch.setenv("NSYSDIAG_ACCELERATE", accelerate)
    asked: list[str] = []
    depth = threading.local()
    ensure = build.ViewStore.ensure

    def spy(self, names):
        names = list(names)
        if getattr(depth, "n", 0) == 0:  # the views asked for, not those they are built on
            asked.extend(n for n in names if n in build.VIEWS)
        depth.n = getattr(depth, "n", 0) + 1
        try:
            return ensure(self, names)
        finally:
            depth.n -= 1

    monkeypatch.setattr(build.ViewStore, "ensure", spy)
    wrong = {}
    for name in ANALYSES:
        with nsysdiag.open(EXAMPLE, cache=False) as rep:
            rep.probe  # noqa: B018 (the probe's own reads are not the analysis')
            asked.clear()
            rep.analysis(name)
            extra = set(asked) - set(results_mod.views_of(name))
        if extra:
            wrong[name] = sorted(extra)
    assert wrong == {}
