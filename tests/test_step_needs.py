"""Each SQL step's ``-- @needs`` declaration is what the step reads, no more, no less.

DuckDB's own parser (``json_serialize_sql``) gives the relations a step's SQL reads (its
base tables, the names of its common table expressions left out); they must equal the
declared needs. Every need must be a normalized view (or ``_<view>_stored``: the view with
the columns its file holds besides, ``ViewSpec.hidden``), another step of the same file
(the steps' needs among themselves form no cycle, so an order exists; a view's name
means the view, where an output query is named as one too), or a table the
analysis' Python registers under that name: ``REGISTERED`` lists those per module, each
checked to appear in the module's source.
"""

from __future__ import annotations

import graphlib
import json
import re

import duckdb
import pytest
from conftest import ROOT

from nsysdiag.analyses.base import Step, load_steps, parse_steps, views_read
from nsysdiag.views.definitions import STORED, VIEWS

SQL_DIR = ROOT / "nsysdiag" / "analyses" / "sql"
MODULES = sorted(p.stem for p in SQL_DIR.glob("*.sql"))

#: the tables an analysis' Python makes available to its SQL under a name of its own
#: (``engine.steps.registered``, ``con.register``, a temporary view of SQL built in Python)
REGISTERED: dict[str, frozenset[str]] = {
    "capture": frozenset({"launched"}),
    "collectives": frozenset({"k", "arrivals"}),
    "gpu_idle": frozenset({"_gpu_idle_windows"}),
    "host_stall": frozenset({"hs_all", "hs_units", "hs_threads"}),
    "interference": frozenset({"_interference_instances", "_interference_units"}),
    "jitter": frozenset({"jitter_kernels"}),
    "overlap": frozenset({"_overlap_busy", "_overlap_streams"}),
    "ranges": frozenset({"_ranges_units", "_ranges_instances"}),
    "workload": frozenset({"_workload_instances", "_workload_keys", "_workload_unit_work",
                           "_workload_size_values"}),
}

_CREATE_AS = re.compile(
    r"\ACREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?TABLE\s+\w+\s+AS\s", re.I)
_DROP = re.compile(r"\ADROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)", re.I)


def _walk(node: object, tables: set[str], ctes: set[str]) -> None:
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE":
            tables.add(node["table_name"])
        cte_map = node.get("cte_map")
        if isinstance(cte_map, dict):
            ctes.update(entry["key"] for entry in cte_map.get("map", []))
        for value in node.values():
            _walk(value, tables, ctes)
    elif isinstance(node, list):
        for value in node:
            _walk(value, tables, ctes)


def relations_read(sql: str) -> set[str]:
    """The relations ``sql`` reads, by DuckDB's parser: its base tables less the names of
    its common table expressions. A ``CREATE TABLE t AS q`` step reads what ``q`` reads; a
    ``DROP TABLE t`` step needs ``t`` (it must run after what reads ``t``)."""
    dropped = _DROP.match(sql)
    if dropped:
        return {dropped.group(1)}
    created = _CREATE_AS.match(sql)
    if created:
        sql = sql[created.end():]
    tree = json.loads(duckdb.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    if tree.get("error"):
        raise ValueError(tree.get("error_message"))
    tables: set[str] = set()
    ctes: set[str] = set()
    _walk(tree["statements"], tables, ctes)
    return tables - ctes


def declaration_errors(module: str, steps: dict[str, Step]) -> list[str]:
    """What is wrong with the declarations of ``module``'s ``steps`` (empty: nothing)."""
    errors: list[str] = []
    registered = REGISTERED.get(module, frozenset())
    yields = {step.yields: name for name, step in steps.items()}
    for name, step in steps.items():
        read = relations_read(step.sql)
        declared = set(step.needs)
        if len(declared) != len(step.needs):
            errors.append(f"{module}.{name}: a need is declared twice: {step.needs}")
        if read - declared:
            errors.append(f"{module}.{name} reads undeclared {sorted(read - declared)}")
        if declared - read:
            errors.append(f"{module}.{name} declares unread {sorted(declared - read)}")
        for need in step.needs:
            if need not in VIEWS and need not in STORED and need not in registered \
                    and yields.get(need, name) == name:
                errors.append(f"{module}.{name} needs {need}: no view, other step of "
                              "its file or registered table")
    order = graphlib.TopologicalSorter(
        {name: {yields[n] for n in step.needs if n in yields and n not in VIEWS
                and n not in STORED}
         for name, step in steps.items()})
    try:
        order.prepare()
    except graphlib.CycleError as e:
        errors.append(f"{module}: the steps' needs form a cycle {e.args[1]}")
    return errors


@pytest.mark.parametrize("module", MODULES)
def test_needs_are_what_each_step_reads(module):
    steps = load_steps(module)
    assert steps, f"sql/{module}.sql has no step"
    assert declaration_errors(module, steps) == []


@pytest.mark.parametrize("module", sorted(REGISTERED))
def test_registered_names_are_registered_by_the_module(module):
    """A registered name of the list is a string in the analysis' source (the list is not
    a way to silence a wrong declaration), and no view or step has the name."""
    source = (ROOT / "nsysdiag" / "analyses" / f"{module}.py").read_text()
    steps = load_steps(module)
    for name in REGISTERED[module]:
        assert f'"{name}"' in source, f"{module}.py registers no table {name}"
        assert name not in VIEWS and name not in {s.yields for s in steps.values()}
    used = {n for s in steps.values() for n in s.needs}
    assert REGISTERED[module] <= used, "a registered name no step reads"


def _edited(module: str, step: str, needs: str) -> dict[str, Step]:
    """``module``'s steps with ``step``'s declaration replaced by ``-- @needs needs``."""
    text = (SQL_DIR / f"{module}.sql").read_text()
    head, sep, rest = text.partition(f"-- @query {step}\n")
    assert sep, step
    rest = re.sub(r"\A(?:--\s*@needs[^\n]*\n)+", f"-- @needs {needs}\n", rest)
    return parse_steps(head + sep + rest)


@pytest.mark.parametrize(
    ("module", "step", "needs", "complaint"),
    [
        ("launch_gaps", "summary", "gaps", "reads undeclared ['stream_counts']"),
        ("launch_gaps", "graph", "gaps, kernels", "declares unread ['kernels']"),
        ("ranges", "rg_cpu", "rg_cpu_pieces, rg_units, rg_calls", "declares unread"),
        ("host_syncs", "per_call", "waits, waits", "declared twice"),
        ("host_stall", "blocked", "api_calls, hs_units, os_runtime, hs_nothing",
         "hs_nothing: no view"),
        ("overlap", "other_ops", "cuda_graphs, memcpys, memsets, ops", "cycle"),
    ],
)
def test_a_wrong_declaration_fails(module, step, needs, complaint):
    errors = declaration_errors(module, _edited(module, step, needs))
    assert any(complaint in e for e in errors), errors


def test_a_step_without_declaration_is_refused():
    with pytest.raises(ValueError, match="step b declares no '-- @needs' line"):
        parse_steps("-- @query a\n-- @needs kernels\nSELECT 1 FROM kernels\n"
                    "-- @query b\nSELECT 2 FROM a\n")


def test_declarations_are_no_part_of_the_sql():
    steps = parse_steps("-- @query a\n-- @needs kernels,\n-- @needs api_calls\n"
                        "-- what a is\nSELECT 1 FROM kernels, api_calls;\n")
    assert steps["a"] == Step("a", "-- what a is\nSELECT 1 FROM kernels, api_calls",
                              ("kernels", "api_calls"))


def test_a_create_step_yields_its_table():
    steps = load_steps("transfers")
    assert steps["_ops"].yields == "_transfers_ops"
    assert steps["totals"].needs == ("_transfers_ops",)
    assert steps["totals"].yields == "totals"


def test_views_read_follows_the_steps_of_the_file():
    # launch_gaps' summary reads the steps gaps (kernels, cuda_graphs) and stream_counts
    # (kernels); transfers' totals reads the table _transfers_ops that step _ops creates
    # from memcpys, memsets and devices; ranges' summary reads only a registered table
    assert views_read("launch_gaps", "summary") == ("kernels", "cuda_graphs")
    assert views_read("transfers", "totals") == ("memcpys", "memsets", "devices")
    assert views_read("ranges", "summary") == ()
    assert set(views_read("ranges")) == {"nvtx_ranges", "api_calls", "kernels", "memcpys",
                                         "memsets", "cuda_graphs"}


def test_views_read_gives_ranges_fork_the_views_it_named_by_hand():
    """ranges.accelerated builds the views its forked cursor and it read before forking;
    it named them by hand until the declarations gave them (the list of main d001b0c)."""
    by_hand = ("api_calls", "kernels", "memcpys", "memsets", "cuda_graphs")
    assert sorted(views_read("ranges", "instances")) == sorted(by_hand)


def test_the_views_built_before_launch_gaps_forks_cover_the_first_analyses():
    """The diagnosis builds the views of a stage's tasks before launch gaps runs on a forked
    cursor beside the first analyses (a view build sets options of the whole database):
    every view their SQL steps declare must be among them. The list was written by hand
    until the declarations gave it (DIAGNOSIS_VIEWS, which lacked um_page_faults once)."""
    from nsysdiag.analyses import results
    from nsysdiag.analyses.base import views_read
    from nsysdiag.engine import runner

    first = ("launch_gaps", "launch_latency", "transfers", "overlap", "graphs", "capture",
             "whole_run")
    (stage, *_) = runner.stages([results.task(name) for name in first])
    built = {v for task in (stage.aside, *stage.main) for v in task.views}
    read = {v for name in first for v in views_read(name)}
    assert stage.aside.name == "launch_gaps" and "um_page_faults" in built
    assert read <= built, sorted(read - built)
