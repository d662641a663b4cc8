"""The engine makes an analysis' SQL steps from their declarations alone.

Asking ``Steps.query`` for an output query makes every step it reads (``-- @needs``),
directly or through other steps, each after those it reads and once per block, kept as
its ``-- @keep`` line says (a Parquet file by default, a temporary view, or the table a
``CREATE TABLE`` step creates), and drops them at the block's end. A relation already on
the connection under a step's name (a table Python registered, a step an enclosing block
of the same analysis made) is read as it is; one of another analysis is never replaced.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from nsysdiag.analyses.base import parse_steps
from nsysdiag.engine.steps import made, order, registered
from nsysdiag.engine.workspace import Workspace

SQL = """
-- @query base
-- @needs numbers
-- @keep view
SELECT n FROM numbers

-- @query doubled
-- @needs base
SELECT n, 2 * n AS d FROM base

-- @query big
-- @needs doubled
SELECT n, d FROM doubled WHERE d >= $least

-- @query total
-- @needs big, doubled
SELECT (SELECT sum(d) FROM big) AS big_sum, (SELECT count(*) FROM doubled) AS n

-- @query plain
-- @needs numbers
SELECT count(*) AS n FROM numbers

-- @query _tab
-- @needs base
CREATE TEMP TABLE tripled AS SELECT 3 * n AS t FROM base

-- @query tripled_sum
-- @needs tripled
SELECT sum(t) AS s FROM tripled
"""


class _Report:
    """What the steps read of a report: its connection, ``sql``, path and workspace."""

    def __init__(self, tmp_path) -> None:
        self.con = duckdb.connect()
        self.con.execute("CREATE TABLE numbers AS SELECT range AS n FROM range(1, 5)")
        self.path = tmp_path / "x.sqlite"
        self.workspace = Workspace(tmp_path / "spill")
        self.statements: list[str] = []

    def sql(self, query: str, params: dict | None = None):
        self.statements.append(query)
        return self.con.sql(query, params=params)

    def relations(self) -> set[str]:
        views = {r for (r,) in self.con.execute(
            "SELECT view_name FROM duckdb_views() WHERE temporary").fetchall()}
        return views | {r for (r,) in self.con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}


@pytest.fixture
def steps():
    return parse_steps(SQL, "test.sql")


@pytest.fixture
def report(tmp_path):
    rep = _Report(tmp_path)
    yield rep
    rep.workspace.close()


def _made(report: _Report) -> list[str]:
    """The steps made, in order: views created, files written, tables created."""
    out = []
    for s in report.statements:
        head = s.split("\n")[0]
        if head.startswith("CREATE TEMP VIEW"):
            out.append(head.split()[3])
        elif head.startswith("COPY"):
            out.append(_copied(s))
        elif head.startswith("CREATE TEMP TABLE"):
            out.append(head.split()[3])
    return out


def _copied(statement: str) -> str:
    """The step a COPY writes (its file is named ``<module>.<step>.<id>.parquet``)."""
    target = statement.rsplit(" TO '", 1)[1].split("'", 1)[0]
    return target.rsplit("/", 1)[1].split(".")[1]


def test_the_order_follows_the_needs(steps):
    # total reads big and doubled; big reads doubled; doubled reads base: each once,
    # after what it reads; the output itself is no step
    assert order(steps, outputs=("total",)) == ["base", "doubled", "big"]
    assert order(steps, outputs=("plain",)) == []
    # relations that Python reads are made too, with what they read
    assert order(steps, relations=("doubled",)) == ["base", "doubled"]
    assert steps["tripled_sum"].after == ("_tab",)


def test_a_query_makes_what_it_reads_once_as_declared(steps, report):
    with made(report, "test", steps, {"least": 6}) as sql:
        assert sql.query("total").to_pylist() == [{"big_sum": 6 + 8, "n": 4}]
        assert sql.query("big").column("n").to_pylist() == [3, 4]
        # total's steps, each once (big's query read the doubled that total's made)
        assert _made(report) == ["base", "doubled", "big"]
        # base a view, doubled and big Parquet files in the scratch directory
        assert {"base", "doubled", "big"} <= report.relations()
        assert len(list(report.workspace.scratch_dir().glob("test.doubled.*.parquet"))) == 1
        assert report.workspace.steps == {"base": "test", "doubled": "test", "big": "test"}
    assert not {"base", "doubled", "big"} & report.relations()
    assert not list(report.workspace.scratch_dir().glob("*.parquet"))
    assert report.workspace.steps == {}


def test_a_step_that_creates_a_table_yields_it_and_it_is_dropped(steps, report):
    with made(report, "test", steps) as sql:
        assert sql.query("tripled_sum").to_pylist() == [{"s": 3 * (1 + 2 + 3 + 4)}]
        assert "tripled" in report.relations()
    assert "tripled" not in report.relations()


def test_a_relation_on_the_connection_is_read_as_it_is(steps, report):
    # Python computed doubled itself (an accelerated pass): the step is not made
    table = pa.table({"n": [1, 2], "d": [100, 200]})
    with registered(report, "doubled", table), made(report, "test", steps, {"least": 0}) as sql:
        assert sql.query("total").to_pylist() == [{"big_sum": 300, "n": 2}]
    # big is made from it; base, which only doubled reads, is not
    assert _made(report) == ["big"]


def test_an_enclosing_block_of_the_same_analysis_lends_its_steps(steps, report):
    with made(report, "test", steps, {"least": 0}) as outer:
        outer.need("base")
        with made(report, "test", steps, {"least": 0}) as inner:
            inner.query("total")
        assert "base" in report.relations()  # the inner block dropped only its own
        assert "doubled" not in report.relations()
    assert _made(report) == ["base", "doubled", "big"]


def test_a_step_of_another_analysis_is_never_replaced(steps, report):
    with made(report, "other", steps) as other:
        other.need("base")
        with made(report, "test", steps) as sql, pytest.raises(RuntimeError,
                                                                 match="base of test"):
            sql.query("doubled")
        assert "base" in report.relations()


def test_steps_that_read_one_another_are_refused():
    steps = parse_steps("-- @query a\n-- @needs b\nSELECT * FROM b\n"
                        "-- @query b\n-- @needs a\nSELECT * FROM a\n"
                        "-- @query out\n-- @needs a\nSELECT * FROM a\n")
    with pytest.raises(ValueError, match="read one another"):
        order(steps, outputs=("out",))


def test_a_keep_that_is_no_way_of_keeping_is_refused():
    with pytest.raises(ValueError, match="keeps as 'memory'"):
        parse_steps("-- @query a\n-- @needs kernels\n-- @keep memory\nSELECT 1\n", "x.sql")


def test_the_declarations_are_no_part_of_the_sql(steps):
    assert steps["base"].keep == "view" and steps["doubled"].keep == "file"
    assert steps["base"].sql == "SELECT n FROM numbers"



def test_steps_lent_to_a_forked_cursor_are_read_there_not_made_again(steps, report, tmp_path):
    fork = _Report(tmp_path)
    fork.con = report.con.cursor()  # the same database; its own temporary views
    fork.workspace = report.workspace.fork()
    with made(report, "test", steps, {"least": 6}) as sql:
        sql.lend(fork, "big")
        assert _made(report) == ["base", "doubled"]
        with made(fork, "test", steps, {"least": 6}) as there:
            assert there.query("big").column("n").to_pylist() == [3, 4]
        assert _made(fork) == []  # read through the lent views
        assert fork.workspace.steps == {"base": "test", "doubled": "test"}


#: analyses that name SQL of their own choosing as a temporary view (``temp_views``), and
#: why: the relation is one of several queries, chosen by what the export holds
CHOSEN_IN_PYTHON = {
    "capture": "launched: outside stream capture windows where the export has any, else all",
    "jitter": "jitter_kernels: by_shape where every shape packs, else by_position or by_config",
}


def test_no_analysis_lists_its_steps_in_python():
    # a step of an analysis' SQL file is made by the engine from its declarations
    # (``Steps``); the helpers that named steps from Python lists are gone
    import ast

    from conftest import ROOT

    for path in sorted((ROOT / "nsysdiag" / "analyses").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module
                    and node.module.endswith("engine.steps") for alias in node.names}
        assert not imported & {"steps", "shared"}, path.stem
        assert ("temp_views" in imported) == (path.stem in CHOSEN_IN_PYTHON), path.stem
