"""Each analysis' SQL method against its accelerated pass, table for table.

The model is Perfetto's diff tests: one input, two implementations, the same output. The
SQL in ``analyses/sql/<name>.sql`` states the method; the accelerated pass (numpy and
compiled loops) must give the same summary and tables: integers exactly, and the doubles
exactly too, since the pass takes its figures as DuckDB's aggregates do
(``compute/figures.py``). ``FLOAT_TOLERANCE`` names any analysis whose doubles are summed
in another order; none is, today.

The analyses compared are those with a pass registered with the engine
(``engine.accelerate.register``): a pass registered for a new output is tested here
without a test naming it.
"""

from __future__ import annotations

import ast
import inspect
import math
import random

import pyarrow as pa
import pytest
from conftest import CORPUS, corpus_sqlite_files, open_corpus

import nsysdiag
from nsysdiag.analyses import ANALYSES, module
from nsysdiag.engine import accelerate
from nsysdiag.errors import UsageError


def _registered() -> tuple[accelerate.Accelerator, ...]:
    """Every accelerated pass the analysis modules register (all imported)."""
    for name in ANALYSES:
        module(name)
    return accelerate.registered()


#: the analyses with a registered pass, each run both ways below
ACCELERATED = tuple(dict.fromkeys(a.analysis for a in _registered()))
#: analyses that choose a pass of their own without registering it, and why
UNREGISTERED = {
    # the pass applies only where the units pass a check (``_passable``), and the method
    # takes other arguments: the two are no drop-in pair
    "host_stall": "accelerated",
}
#: relative tolerance of doubles per analysis (0: exact)
FLOAT_TOLERANCE: dict[str, float] = {}


def _run_both(rep: nsysdiag.Report, name: str, monkeypatch) -> dict[str, object]:
    out = {}
    for mode in ("never", "always"):
        monkeypatch.setenv(accelerate.ACCELERATE_ENV, mode)
        out[mode] = module(name).run(rep)
    monkeypatch.delenv(accelerate.ACCELERATE_ENV)
    return out


def _same_value(a: object, b: object, rel: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):  # NaN in the same place on both sides
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=rel, abs_tol=0.0) if rel else a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y, rel) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def assert_same(name: str, method, accelerated) -> None:
    """The two results of analysis ``name`` agree: status, message, findings, summary
    (key order too: it is the JSON's), and each table's schema and rows."""
    rel = FLOAT_TOLERANCE.get(name, 0.0)
    assert (method.status, method.message, method.findings) == (
        accelerated.status, accelerated.message, accelerated.findings)
    assert list(method.summary) == list(accelerated.summary)
    for key in method.summary:
        assert _same_value(method.summary[key], accelerated.summary[key], rel), (
            key, method.summary[key], accelerated.summary[key])
    assert list(method.tables) == list(accelerated.tables)
    for table in method.tables:
        m, a = method.tables[table], accelerated.tables[table]
        assert m.schema.names == a.schema.names, table
        for f, g in zip(m.schema, a.schema):
            # a column that is NULL throughout may come typed from the SQL, as null from
            # a list of Nones
            assert f.type == g.type or pa.types.is_null(g.type) or pa.types.is_null(f.type), (
                table, f, g)
        assert m.num_rows == a.num_rows, table
        for i, (x, y) in enumerate(zip(m.to_pylist(), a.to_pylist())):
            assert _same_value(x, y, rel), (table, i, x, y)


def _random_trace(builder, seed: int):
    """Kernels of two processes on two GPUs and three streams, starts tied often, a few
    without a launch call; graph launches of three nodes; copies and memsets; NVTX ranges
    "step" around each process' iterations, each ending in a stream synchronization."""
    rng = random.Random(seed)
    b = builder("current")
    t = 0
    step_start = {100: 0, 200: 0}
    for i in range(400):
        t += rng.choice((0, 0, 5, 40, 300, 3000))
        if i % 25 == 24:  # each process' iterations: NVTX ranges, ending in a sync
            for pid in (100, 200):
                b.api(t, t + 700, "cudaStreamSynchronize_v3020", pid=pid)
                b.nvtx(step_start[pid], t + 700 + 10 * (pid == 200), "step", pid=pid)
                step_start[pid] = t + 710
            t += 720
        start, end = t, t + rng.randrange(1, 800)
        kw = {"stream": rng.choice((1, 2, 3)), "device": rng.choice((0, 1)),
              "pid": rng.choice((100, 200))}
        if i % 37 == 5:
            corr = b.api(start - 50, start - 40, "cudaGraphLaunch_v10000", pid=kw["pid"])
            for node in range(3):
                b.kernel(start + 100 * node, start + 100 * node + 60, corr=corr,
                         graph_node=node + 1, **kw)
        elif i % 41 == 7:
            b.kernel(start, end, corr=0, **kw)  # no launch call
        elif rng.random() < 0.8:
            # the call returns long before its kernel starts (a deep queue, prelaunched
            # gaps), just before, or after it (a negative queue)
            returned = start - rng.choice((-5, 0, 2, 50, 2000, 8000))
            b.launch(returned - rng.randrange(5, 500), returned, start, end, **kw)
        else:
            kind = rng.choice(("memcpy", "memset"))
            if kind == "memcpy":
                corr = b.api(start - 30, start - 20, "cudaMemcpyAsync_v3020", pid=kw["pid"])
                b.memcpy(start, end, 4096, stream=kw["stream"], device=kw["device"],
                         pid=kw["pid"], corr=corr)
            else:
                b.memset(start, end, 4096, stream=kw["stream"], pid=kw["pid"])
    return b


@pytest.mark.parametrize("name", ACCELERATED)
def test_standard_fixture(name, standard_export, monkeypatch):
    with nsysdiag.open(standard_export, cache=False) as rep:
        both = _run_both(rep, name, monkeypatch)
    assert_same(name, both["never"], both["always"])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("name", ACCELERATED)
def test_random_traces(name, seed, builder, tmp_path, monkeypatch):
    path = _random_trace(builder, seed).write(tmp_path / f"r{seed}.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        both = _run_both(rep, name, monkeypatch)
    assert both["never"].ok
    assert_same(name, both["never"], both["always"])


@pytest.mark.parametrize("name", ACCELERATED)
def test_graph_level_trace(name, builder, tmp_path, monkeypatch):
    # kernel, a graph traced as a whole, kernel: the graph keeps the GPU busy either way
    b = builder("current")
    b.launch(0, 5, 10, 100)
    corr = b.api(110, 120, "cudaGraphLaunch_v10000")
    b.graph_trace(130, 400, corr=corr)
    b.launch(120, 125, 450, 500)
    with nsysdiag.open(b.write(tmp_path / "g.sqlite"), cache=False) as rep:
        both = _run_both(rep, name, monkeypatch)
    assert_same(name, both["never"], both["always"])


def test_the_engine_chooses_by_size(monkeypatch):
    monkeypatch.delenv(accelerate.ACCELERATE_ENV, raising=False)
    assert not accelerate.accelerate(accelerate.THRESHOLD_ROWS - 1)
    assert accelerate.accelerate(accelerate.THRESHOLD_ROWS)
    assert accelerate.accelerate(None)
    monkeypatch.setenv(accelerate.ACCELERATE_ENV, "never")
    assert not accelerate.accelerate(10**9)
    monkeypatch.setenv(accelerate.ACCELERATE_ENV, "always")
    assert accelerate.accelerate(1)
    monkeypatch.setenv(accelerate.ACCELERATE_ENV, "sometimes")
    with pytest.raises(UsageError, match="NSYSDIAG_ACCELERATE"):
        accelerate.accelerate(1)


def _corpus() -> list:
    files = corpus_sqlite_files()
    return files or [pytest.param(None, marks=pytest.mark.skip(reason=f"{CORPUS} absent"))]


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: str(p.relative_to(CORPUS)) if p else "")
def test_corpus(path, monkeypatch):
    with open_corpus(path) as rep:
        for name in ACCELERATED:
            both = _run_both(rep, name, monkeypatch)
            assert_same(name, both["never"], both["always"])


def _probe_calls_both(rep: nsysdiag.Report) -> tuple[list, list]:
    """ranges' unit_probe_calls by the SQL and by the accelerated pass, sorted by probe."""
    from nsysdiag.analyses import ranges
    from nsysdiag.analyses.base import run_query
    from nsysdiag.engine.steps import registered

    with ranges.families(rep, 20):
        probes = run_query(rep, "ranges", "unit_probes", {"min_instances": 20})
    with registered(rep, "unit_probes", probes):
        out = [sorted(f(rep, probes).to_pylist(), key=lambda r: r["id"])
               for f in (ranges._probe_calls_method, ranges._probe_calls_accelerated)]
    return out[0], out[1]


def test_unit_probe_calls_by_hand(builder, tmp_path):
    # two processes; "step" ranges of process 100 and 200 at the same times, "inner"
    # inside the steps of 100. GPU calls of process 100 at a step's start and end (bounds
    # count), calls of 200 inside 100's steps count for 200's only; a sync never counts
    b = builder("current")
    for k in range(20):
        s = 10_000 + 10_000 * k
        b.nvtx(s, s + 5000, "step", pid=100)
        b.nvtx(s, s + 5000, "step", pid=200)
        b.nvtx(s + 1000, s + 2000, "inner", pid=100)
        b.launch(s, s + 10, s + 20, s + 30, pid=100)  # at the step's start
        b.launch(s + 5000, s + 5010, s + 5020, s + 5030, pid=100)  # at its end
        b.launch(s + 1500, s + 1510, s + 1520, s + 1530, pid=100)  # inside inner
        if k % 2:
            b.launch(s + 3000, s + 3010, s + 3020, s + 3030, pid=200)
        b.api(s + 4000, s + 4100, "cudaStreamSynchronize_v3020", pid=100)
    with nsysdiag.open(b.write(tmp_path / "p.sqlite"), cache=False) as rep:
        method, accelerated = _probe_calls_both(rep)
        probes = _probes(rep)
    assert method == accelerated
    calls = {r["id"]: r["calls"] for r in method}
    by_kind = {}
    for p in probes:
        by_kind.setdefault((p["name"], p["global_pid"] >> 24 & 0xFFFFFF), []).append(
            calls.get(p["id"], 0))
    assert sorted(by_kind[("step", 100)]) == [3] * 20
    assert sorted(by_kind[("inner", 100)]) == [1] * 20
    assert sorted(by_kind[("step", 200)]) == [0] * 10 + [1] * 10


def _probes(rep: nsysdiag.Report) -> list[dict]:
    from nsysdiag.analyses import ranges
    from nsysdiag.analyses.base import run_query

    with ranges.families(rep, 20):
        return run_query(rep, "ranges", "unit_probes", {"min_instances": 20}).to_pylist()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_unit_probe_calls_random(seed, builder, tmp_path):
    path = _random_trace(builder, seed).write(tmp_path / f"r{seed}.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        method, accelerated = _probe_calls_both(rep)
    assert method and method == accelerated


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: str(p.relative_to(CORPUS)) if p else "")
def test_unit_probe_calls_corpus(path):
    with open_corpus(path) as rep:
        if not (rep.probe.present("nvtx_ranges") and rep.probe.present("api_calls")):
            pytest.skip("no NVTX ranges or no CUDA trace")
        method, accelerated = _probe_calls_both(rep)
    assert method == accelerated


def test_unit_probe_calls_null_and_reversed_bounds(builder, tmp_path):
    # probes the SQL's join finds no call in: a NULL bound or process, an end before the
    # start; and one ordinary probe holding two of the three calls
    from nsysdiag.analyses import ranges
    from nsysdiag.engine.steps import registered

    b = builder("current")
    for t in (1000, 2000, 3000):
        b.launch(t, t + 10, t + 20, t + 30, pid=100)
    b.nvtx(500, 2500, "step", pid=100)
    with nsysdiag.open(b.write(tmp_path / "n.sqlite"), cache=False) as rep:
        gpid = rep.sql("SELECT any_value(global_pid) FROM api_calls").fetchall()[0][0]
        probes = pa.table({
            "id": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "name": ["step"] * 5,
            "start_ns": pa.array([500, None, 500, 2500, 1000], pa.int64()),
            "end_ns": pa.array([2500, 2500, None, 500, 3000], pa.int64()),
            "global_pid": pa.array([gpid, gpid, gpid, gpid, None], pa.int64()),
        })
        with registered(rep, "unit_probes", probes):
            method = ranges._probe_calls_method(rep, probes).to_pylist()
            accelerated = ranges._probe_calls_accelerated(rep, probes).to_pylist()
    assert method == accelerated == [{"id": 1, "calls": 2}]


def test_every_registered_pass_has_its_method_s_signature():
    for entry in _registered():
        assert inspect.signature(entry.method).parameters.keys() == \
            inspect.signature(entry.accelerated).parameters.keys(), (entry.analysis,
                                                                   entry.output)
        assert entry.analysis in ANALYSES


def test_a_pass_is_registered_twice_never():
    entry = _registered()[0]
    with pytest.raises(ValueError, match="registered already"):
        accelerate.register(entry.analysis, entry.output, method=entry.method,
                            accelerated=entry.accelerated, rows=entry.rows)


def test_no_analysis_chooses_a_pass_by_itself():
    # the engine chooses (a registered Accelerator): an analysis that calls
    # ``accelerate()`` itself has a pass these tests would not compare
    from conftest import ROOT

    for path in sorted((ROOT / "nsysdiag" / "analyses").glob("*.py")):
        tree = ast.parse(path.read_text())
        calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Name) and node.func.id in ("accelerate", "pick")}
        if path.stem in UNREGISTERED:
            assert calls == {"accelerate"}, path.stem  # the exception still holds
        else:
            assert not calls, (path.stem, calls)
