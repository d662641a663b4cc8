"""jitter.sql gives each kernel its launch configuration from the grid and block packed in
the kernels view's file (``by_shape``), else by position (``by_position``: the kernels and
kernel_configs views hold the export's kernel rows in the same order), and groups by the
name and the six sizes, labelling only the kept groups. These tests hold it equal to the
query it replaced (a join on the keys, then a label string per kernel, grouped by that
string), on hand-built kernels whose answers are counted by hand, on the key join
(``by_config``) and on every corpus export."""

from __future__ import annotations

import pytest
from conftest import corpus_sqlite_files, open_corpus

import nsysdiag
from nsysdiag.analyses import jitter
from nsysdiag.analyses.base import load_sql
from nsysdiag.engine.steps import bind, temp_views

# The query as first written: each kernel's label (name and configuration) as a string,
# from a join on (process, correlation id, start), grouped by that string.
_LABELLED = """
SELECT k.name || coalesce(' <<<(' || c.grid_x || ',' || c.grid_y || ',' || c.grid_z || '),('
                          || c.block_x || ',' || c.block_y || ',' || c.block_z || ')>>>', '')
           AS name,
       k.duration_ns
FROM kernels k LEFT JOIN kernel_configs c
  ON c.global_pid = k.global_pid AND c.correlation_id = k.correlation_id
     AND c.start_ns = k.start_ns
WHERE k.duration_ns > 0"""

_BY_LABEL = """
WITH k AS (SELECT name, duration_ns FROM reference_kernels),
stats AS (
    SELECT name, instances, total_ns, q[1] AS p50_ns, q[2] AS p90_ns, q[3] AS p99_ns, max_ns, cv
    FROM (SELECT name, count(*) AS instances, sum(duration_ns)::BIGINT AS total_ns,
                 quantile_cont(duration_ns, [0.5, 0.9, 0.99]) AS q, max(duration_ns) AS max_ns,
                 stddev_samp(duration_ns) / nullif(avg(duration_ns), 0) AS cv
          FROM k GROUP BY name HAVING count(*) >= 20)
    ORDER BY total_ns DESC LIMIT $top),
slow AS (
    SELECT s.name, count(*) AS n_slow
    FROM stats s JOIN k ON k.name = s.name AND k.duration_ns > $slow * s.p50_ns
    GROUP BY s.name)
SELECT s.name, s.instances, s.total_ns, s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns,
       s.p99_ns / nullif(s.p50_ns, 0) AS p99_over_p50,
       100.0 * coalesce(slow.n_slow, 0) / s.instances AS slow_pct, s.cv
FROM stats s LEFT JOIN slow USING (name)
ORDER BY s.total_ns DESC"""


def _rows(table) -> list[tuple]:
    """Rows as sorted tuples, floats rounded (sums in another order differ in the last
    bits); ties in total_ns leave the order open."""
    out = []
    for r in table.to_pylist():
        out.append(tuple(round(v, 6) if isinstance(v, float) else v for v in r.values()))
    return sorted(out, key=repr)


def per_kernel(rep: nsysdiag.Report, keyed: str, top: int = 20, slow: float = 1.5) -> list:
    queries = load_sql("jitter")
    with temp_views(rep, {"jitter_kernels": queries[keyed]}, ("jitter_kernels",)):
        sql = queries["per_kernel"]
        return _rows(rep.sql(sql, bind(sql, {"top": top, "slow": slow})).to_arrow_table())


def reference(rep: nsysdiag.Report, top: int = 20, slow: float = 1.5) -> list:
    with temp_views(rep, {"reference_kernels": _LABELLED}, ("reference_kernels",)):
        return _rows(rep.sql(_BY_LABEL, bind(_BY_LABEL, {"top": top, "slow": slow}))
                     .to_arrow_table())


def aligned(rep: nsysdiag.Report) -> bool:
    return rep.sql(load_sql("jitter")["aligned"]).fetchall()[0][0]


def test_two_grids_and_a_slow_launch_counted_by_hand(builder, tmp_path):
    """One name at two grids, on two processes, interleaved: 33 launches at grid 64 (100
    ns, three of them 400 ns: slow), 22 at grid 128 (200 ns), and 5 of another name (under
    the 20 launches a kernel needs to be examined). Positional, key join and the reference
    agree, and the hand counts hold: 33 and 22 instances, 3 of 33 and 0 slow."""
    b = builder("current")
    wide = [i for i in range(50) if i % 12 in (0, 1, 4, 7, 10)]  # 22 launches
    other = [11, 23, 35, 47, 59]
    for i in range(60):
        t, pid = i * 1000, 1000 + i % 2
        if i in other:
            b.launch(t, t + 5, t + 10, t + 60, name="other_kernel", pid=pid)
        elif i in wide:
            b.launch(t, t + 5, t + 10, t + 210, name="jacobi", pid=pid,
                     grid=(128, 1, 1), block=(32, 32, 1))
        else:
            dur = 400 if i in (2, 14, 26) else 100
            b.launch(t, t + 5, t + 10, t + 10 + dur, name="jacobi", pid=pid,
                     grid=(64, 1, 1), block=(32, 32, 1))
    with nsysdiag.open(b.write(tmp_path / "t.sqlite")) as rep:
        assert aligned(rep) and jitter._keyed(rep) == "by_shape"
        got = per_kernel(rep, "by_shape")
        assert got == per_kernel(rep, "by_position") == per_kernel(rep, "by_config") \
            == reference(rep)
        res = jitter.run(rep)
    rows = {r.name: r for r in res.per_kernel()}
    wide_label, narrow_label = ("jacobi <<<(128,1,1),(32,32,1)>>>",
                                "jacobi <<<(64,1,1),(32,32,1)>>>")
    assert set(rows) == {wide_label, narrow_label}
    assert (rows[narrow_label].instances, rows[wide_label].instances) == (33, 22)
    assert rows[narrow_label].total_ns == 30 * 100 + 3 * 400
    assert rows[narrow_label].slow_pct == pytest.approx(100 * 3 / 33)
    assert rows[wide_label].slow_pct == 0


def test_names_alone_where_no_configuration(builder, tmp_path):
    """by_name (no kernel_configs) groups by the name alone, as the reference does where
    no configuration joins."""
    b = builder("current")
    for i in range(40):
        b.launch(i * 1000, i * 1000 + 5, i * 1000 + 10, i * 1000 + 110 + (300 if i < 4 else 0),
                 name="k")
    with nsysdiag.open(b.write(tmp_path / "t.sqlite")) as rep:
        got = per_kernel(rep, "by_name")
    assert [r[:3] for r in got] == [("k", 40, 40 * 100 + 4 * 300)]
    assert got[0][8] == pytest.approx(10.0)  # 4 of 40 over 1.5x the median


@pytest.mark.parametrize("path", corpus_sqlite_files(), ids=lambda p: p.stem)
def test_corpus_equal_to_the_reference(path):
    with open_corpus(path) as rep:
        if not rep.probe.present("kernels") or not rep.probe.present("kernel_configs"):
            pytest.skip("no kernels with configurations")
        assert aligned(rep) and jitter._keyed(rep) == "by_shape"
        want = reference(rep)
        assert per_kernel(rep, "by_shape") == want
        assert per_kernel(rep, "by_position") == want
        assert per_kernel(rep, "by_config") == want


def test_shapes_at_the_limits_missing_and_beyond(builder, tmp_path):
    """The packed grid and block give kernel_configs' sizes back at CUDA's largest grid
    (2**31 - 1, 65535, 65535) and where a size is missing (the six read as NULL: the name
    alone, as by_position gives it); 20 launches of each. A grid beyond the limits (y of
    70000) does not pack: jitter then takes by_position, whose labels show it."""
    def trace(name: str, odd: tuple) -> nsysdiag.Report:
        b = builder("current")
        for i in range(60):
            t = i * 1000
            grid = ((2**31 - 1, 65535, 65535), odd, (7, 3, 2))[i % 3]
            b.launch(t, t + 5, t + 10, t + 110 + i, name="k", grid=grid, block=(32, 4, 1))
        return nsysdiag.open(b.write(tmp_path / name))

    with trace("missing.sqlite", (64, None, 1)) as rep:
        assert jitter._keyed(rep) == "by_shape"
        got = per_kernel(rep, "by_shape")
        assert got == per_kernel(rep, "by_position") == reference(rep)
        assert sorted(r[0] for r in got) == ["k", "k <<<(2147483647,65535,65535),(32,4,1)>>>",
                                             "k <<<(7,3,2),(32,4,1)>>>"]
        assert [r[1] for r in got] == [20, 20, 20]
    with trace("beyond.sqlite", (64, 70000, 1)) as rep:
        assert not rep.sql(load_sql("jitter")["shapes_pack"]).fetchall()[0][0]
        assert jitter._keyed(rep) == "by_position"
        got = per_kernel(rep, "by_position")
        assert got == reference(rep)
        assert "k <<<(64,70000,1),(32,4,1)>>>" in [r[0] for r in got]


def test_a_diagnosis_builds_kernel_configs_only_where_a_shape_does_not_pack(builder, tmp_path):
    """kernel_configs (2-3 CPU-s at 10M kernels) is jitter's fallback view: a diagnosis of
    kernels whose shapes pack never builds it, and one with a grid beyond CUDA's limits
    builds it on jitter's own path and judges it by configuration all the same."""
    def diagnosed(name: str, odd: tuple):
        b = builder("current")
        for i in range(300):
            t = i * 100_000
            b.nvtx(t, t + 60_000, "request")
            b.launch(t + 1_000, t + 5_000, t + 10_000, t + 50_000 + (i % 7) * 100,
                     name="k", grid=(odd, (7, 3, 2))[i % 2], block=(32, 4, 1))
        cache = tmp_path / f"cache-{name}"
        d = nsysdiag.diagnose(b.write(tmp_path / f"{name}.sqlite"), cache_dir=cache)
        return d, list(cache.rglob("kernel_configs*.parquet"))

    d, built = diagnosed("packs", (64, 2, 1))
    assert d.analyses.jitter is not None and not built
    d, built = diagnosed("beyond", (64, 70000, 1))
    assert built, "the fallback path reads kernel_configs"
    names = [r["name"] for r in d.analyses.jitter.table("per_kernel").to_pylist()]
    assert "k <<<(64,70000,1),(32,4,1)>>>" in names
