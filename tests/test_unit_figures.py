"""The reported tail figures (n, P50, P90, P99) equal an independent computation: a plain
SQL over the unit's NVTX ranges in the export, in start order, less the leading warm-up
(issue 34). On hand-built exports and on the project's own captures and example."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from conftest import CORPUS, ROOT

import nsysdiag
from nsysdiag.analyses import ranges

#: the closed push/pop and start/end ranges of one name, in start order: nothing of
#: nsysdiag's, only the export's own table
PLAIN_SQL = """
SELECT e."end" - e.start AS duration
FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
WHERE coalesce(e.text, s.value) = ? AND e.eventType IN (59, 60) AND e."end" IS NOT NULL
ORDER BY e.start
"""


def plain(path: Path, name: str, n_warmup: int) -> np.ndarray:
    """The unit's durations, from the export by plain SQL, less the first ``n_warmup``."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(PLAIN_SQL, (name,)).fetchall()
    return np.array([r[0] for r in rows], dtype=float)[n_warmup:]


def check(path: Path, res: ranges.RangesResult, tail=None) -> None:
    d = plain(path, res.unit, res.n_warmup)
    # the warm-up units are the leading ones, in start order
    inst = res.table("instances").sort_by("start_ns").to_pylist()
    assert [r["warmup"] for r in inst] == [k < res.n_warmup for k in range(len(inst))]
    p50, p90, p99 = np.percentile(d, [50, 90, 99])
    assert res.n == d.size
    assert (res.p50_ns, res.p90_ns, res.p99_ns) == pytest.approx((p50, p90, p99), rel=1e-9)
    if tail is not None:
        assert tail.n == d.size
        assert (tail.p50_ns, tail.p90_ns, tail.p99_ns) == pytest.approx((p50, p90, p99),
                                                                        rel=1e-9)


def test_figures_equal_plain_sql_on_a_hand_built_export(builder, tmp_path):
    # 60 requests; the first two are warm-up (a module load, then a slow second one), a
    # late allocation in the 40th counts
    b = builder("current")
    rng = np.random.default_rng(7)
    for k in range(60):
        s = 1_000_000 + k * 10_000_000
        length = {0: 9_000_000, 1: 8_000_000}.get(k, int(rng.integers(100_000, 900_000)))
        b.nvtx(s, s + length, "request")
        b.launch(s + 100, s + 200, s + 300, s + 50_000)
        if k == 0:
            b.api(s + 1000, s + 2000, "cuModuleLoadData")
        if k == 39:
            b.api(s + 1000, s + 2000, "cudaHostAlloc")
    path = b.write(tmp_path / "t.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        res = ranges.run(rep)
    assert (res.n_warmup, res.n_later_oneoff) == (2, 1)
    check(path, res, nsysdiag.diagnose(path, cache=False).tail)


#: the own captures whose unit is an NVTX range (fixtures/README.md)
NVTX_CAPTURES = ("sizes", "switch", "coldstart", "openloop", "gil", "trainnvtx", "baseline",
                 "cpu", "gpu", "pcie", "pageable", "graph")


@pytest.mark.parametrize("name", NVTX_CAPTURES)
def test_figures_equal_plain_sql_on_own_captures(labelled, name):
    path = labelled[name]
    with nsysdiag.open(path, cache=False) as rep:
        res = ranges.run(rep)
    assert res.unit_source == "nvtx_auto"
    check(path, res)


def test_figures_equal_plain_sql_on_the_example():
    path = ROOT / "examples" / "gpu-jitter.sqlite"
    check(path, nsysdiag.open(path, cache=False).analysis("ranges"),
          nsysdiag.diagnose(path, cache=False).tail)


def test_figures_equal_plain_sql_on_the_corpus():
    path = CORPUS / "public" / "Sh1mwww__llama3-inference" / "demo.sqlite"
    if not path.exists():
        pytest.skip("corpus not present")
    with nsysdiag.open(path, cache=False) as rep:
        res = ranges.run(rep, range_name="attention_simulation")
    check(path, res)
