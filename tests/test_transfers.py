"""transfers: per-copy bandwidth, nsys's memcpy time summary, the host link, contention.

Hand-built exports whose answers are worked out in the comments, NVIDIA's own
``nsys stats --report cuda_gpu_mem_time_sum`` for the H200 baseline, and the corpus.
"""

from __future__ import annotations

import csv
import random

import pyarrow.compute as pc
import pytest
from conftest import CORPUS as CORPUS_DIR
from conftest import H200, ROOT, corpus_sqlite_files, need, run_on_corpus

import nsysdiag
from nsysdiag.analyses import transfers
from nsysdiag.cli.main import main
from nsysdiag.errors import UsageError
from nsysdiag.links import (
    Baseline,
    default_link,
    host_link,
    parse_nvbandwidth,
    pcie_gbps,
    resolve_links,
)

SAMPLE = ROOT / "tests" / "data" / "nvbandwidth_sample.json"
GEN5_X16 = 16 * 32.0 * 128 / 130 / 8  # 63.0154 GB/s per direction


def kinds_trace(builder, tmp_path, layout="current"):
    """One copy of each kind, a zero-duration copy and a UVM migration.

    bandwidth = bytes / ns = GB/s:
      HtoD pinned   [1000, 2000]   10000 B -> 10 GB/s
      HtoD pinned   [3000, 3500]   10000 B -> 20 GB/s
      HtoD pinned   [13000, 13000]  1024 B -> zero duration, NULL
      HtoD pageable [15000, 16000]  4000 B -> 4 GB/s
      DtoH pageable [5000, 9000]    8000 B -> 2 GB/s
      DtoD          [10000, 10100] 50000 B -> 500 GB/s
      PtoP          [11000, 11200] 40000 B -> 200 GB/s
      memset        [12000, 12400]  4096 B -> 10.24 GB/s
      UVM_HtoD      [14000, 14100]  4096 B -> 40.96 GB/s
    """
    b = builder(layout)
    b.memcpy(1000, 2000, 10000)
    b.memcpy(3000, 3500, 10000)
    b.memcpy(13000, 13000, 1024)
    b.memcpy(15000, 16000, 4000, src="pageable")
    b.memcpy(5000, 9000, 8000, kind="DtoH", src="device", dst="pageable")
    b.memcpy(10000, 10100, 50000, kind="DtoD", src="device", dst="device")
    b.memcpy(11000, 11200, 40000, kind="PtoP", src="device", dst="device", src_device=0,
             dst_device=1)
    b.memset(12000, 12400, 4096)
    b.memcpy(14000, 14100, 4096, src="managed", dst="managed")
    b.rows["CUPTI_ACTIVITY_KIND_MEMCPY"][-1]["copyKind"] = 11  # CUDA_MEMCPY_KIND_UVM_HTOD
    return b.write(tmp_path / f"kinds-{layout}.sqlite")


@pytest.mark.parametrize("layout", ["current", "old", "legacy"])
def test_bandwidth_by_kind(builder, tmp_path, layout):
    with nsysdiag.open(kinds_trace(builder, tmp_path, layout), cache=False) as rep:
        res = transfers.run(rep)
    assert res.status == "ok"
    rows = {(r["copy_kind"], r["src_kind"]): r for r in res.tables["by_kind"].to_pylist()}
    pinned = rows[("HtoD", "pinned")]
    # 3 copies, 21024 B, 1500 ns; bandwidths [10, 20] (zero-duration one is NULL)
    assert (pinned["copies"], pinned["total_bytes"], pinned["total_time_ns"]) == (3, 21024, 1500)
    assert pinned["zero_duration"] == 1
    assert pinned["mean_gbps"] == pytest.approx(15.0)
    assert pinned["median_gbps"] == pytest.approx(15.0)
    assert pinned["p10_gbps"] == pytest.approx(11.0)   # 10 + 0.1 * (20 - 10)
    assert pinned["p90_gbps"] == pytest.approx(19.0)
    assert pinned["aggregate_gbps"] == pytest.approx(20000 / 1500)  # zero-duration bytes left out
    assert rows[("HtoD", "pageable")]["is_pageable"] is True
    dtoh = rows[("DtoH", "device")]
    assert dtoh["is_pageable"] is True and dtoh["median_gbps"] == pytest.approx(2.0)
    assert rows[("DtoD", "device")]["aggregate_gbps"] == pytest.approx(500.0)
    assert rows[("PtoP", "device")]["aggregate_gbps"] == pytest.approx(200.0)
    memset = rows[("memset", None)]
    assert memset["op"] == "memset" and memset["median_gbps"] == pytest.approx(10.24)
    uvm = rows[("UVM_HtoD", "managed")]
    assert uvm["is_uvm"] is True and uvm["median_gbps"] == pytest.approx(40.96)
    # UVM rows come after every explicit copy
    assert [r["is_uvm"] for r in res.tables["by_kind"].to_pylist()][-1] is True

    s = res.summary
    assert (s["copies"], s["memsets"], s["zero_duration_copies"]) == (8, 1, 1)
    assert (s["uvm_copies"], s["uvm_bytes"]) == (1, 4096)
    assert (s["pageable_copies"], s["pageable_bytes"]) == (2, 12000)
    # host copies: 1000 + 500 + 0 + 1000 HtoD, 4000 DtoH = 6500 ns; pageable 5000 ns
    assert s["pageable_time_pct"] == pytest.approx(100 * 5000 / 6500)
    assert s["total_bytes"] == 10000 + 10000 + 1024 + 4000 + 8000 + 50000 + 40000 + 4096 + 4096


def test_mem_time_table_has_nsys_labels(builder, tmp_path):
    with nsysdiag.open(kinds_trace(builder, tmp_path), cache=False) as rep:
        res = transfers.run(rep)
    got = {r["operation"]: (r["total_time_ns"], r["copies"], r["min_ns"], r["max_ns"])
           for r in res.tables["mem_time"].to_pylist()}
    assert got == {
        "[CUDA memcpy Host-to-Device]": (2500, 4, 0, 1000),
        "[CUDA memcpy Device-to-Host]": (4000, 1, 4000, 4000),
        "[CUDA memcpy Device-to-Device]": (100, 1, 100, 100),
        "[CUDA memcpy Peer-to-Peer]": (200, 1, 200, 200),
        "[CUDA memset]": (400, 1, 400, 400),
        "[CUDA memcpy Unified Host-to-Device]": (100, 1, 100, 100),
    }
    first = res.tables["mem_time"].to_pylist()[0]
    assert first["operation"] == "[CUDA memcpy Device-to-Host]"
    assert first["time_pct"] == pytest.approx(100 * 4000 / 7300)


def test_host_link_default_pinned_vs_pageable(builder, tmp_path):
    with nsysdiag.open(kinds_trace(builder, tmp_path), cache=False) as rep:
        res = transfers.run(rep)
    host = {r["direction"]: r for r in res.tables["host"].to_pylist()}
    htod = host["HtoD"]
    # HtoD bandwidths: pinned [10, 20, NULL], pageable [4] -> all [4, 10, 20]
    assert htod["copies"] == 4 and htod["large_copies"] == 0
    assert htod["median_gbps"] == pytest.approx(10.0)
    assert htod["p90_gbps"] == pytest.approx(18.0)        # 10 + 0.8 * (20 - 10)
    assert htod["aggregate_gbps"] == pytest.approx(24000 / 2500)
    assert htod["pinned_median_gbps"] == pytest.approx(15.0)
    assert htod["pageable_median_gbps"] == pytest.approx(4.0)
    assert htod["pageable_vs_pinned_pct"] == pytest.approx(100 * 4 / 15)
    # the fixture GPU is an H200: default PCIe Gen5 x16
    assert htod["link_source"] == "default" and htod["link_gbps"] == pytest.approx(GEN5_X16)
    assert htod["achieved_basis"] == "p90_all"
    assert htod["achieved_pct_of_link"] == pytest.approx(100 * 18 / GEN5_X16)
    assert htod["aggregate_pct_of_link"] == pytest.approx(100 * 9.6 / GEN5_X16)
    s = res.summary
    assert s["link_source"] == "default"
    assert s["htod_achieved_pct_of_link"] == pytest.approx(100 * 18 / GEN5_X16)
    assert s["dtoh_pageable_median_gbps"] == pytest.approx(2.0)
    assert s["dtoh_pinned_median_gbps"] is None
    # the JSON keys are the nested figures, flat
    assert res.htod.achieved_pct_of_link == s["htod_achieved_pct_of_link"]
    assert (res.dtoh.pageable_median_gbps, res.dtoh.pinned_median_gbps) == (2.0, None)
    assert res.htod.link_gbps == s["link_htod_gbps"] == pytest.approx(GEN5_X16)
    assert res.direction("dtoh") is res.dtoh
    assert any("pageable host memory (27% of pinned" in f for f in res.findings)
    assert any("zero duration" in f for f in res.findings)
    assert any("unified-memory" in f for f in res.findings)


def test_large_copies_set_the_achieved_basis(builder, tmp_path):
    b = builder("current")
    b.memcpy(0, 1000, 2000)          # 2 GB/s, small
    b.memcpy(2000, 2100, 3000)       # 30 GB/s, large with large_bytes=2500
    b.memcpy(3000, 3200, 8000)       # 40 GB/s, large
    with nsysdiag.open(b.write(tmp_path / "l.sqlite"), cache=False) as rep:
        res = transfers.run(rep, large_bytes=2500)
    (htod,) = res.tables["host"].to_pylist()
    # p90 over the large copies [30, 40] = 30 + 0.9 * 10 = 39
    assert htod["large_copies"] == 2 and htod["achieved_basis"] == "p90_large"
    assert htod["p90_large_gbps"] == pytest.approx(39.0)
    assert htod["achieved_pct_of_link"] == pytest.approx(100 * 39 / GEN5_X16)


def contention_trace(builder, tmp_path):
    """Same-direction copies from two processes on two streams.

    HtoD  A pid 100 [0, 1000]     10000 B 10 GB/s
          B pid 200 [500, 1500]    5000 B  5 GB/s
          C pid 100 [1400, 2000]   6000 B 10 GB/s
          D pid 200 [3000, 4000]  20000 B 20 GB/s
    DtoH  E pid 100 [0, 4000]      8000 B  2 GB/s  (other direction: never contends)
    HtoD copies in flight: [500, 1000) 2 and [1400, 1500) 2, else <= 1, so
    overlapped: A 500 (0.5), B 500 + 100 = 600 (0.6), C 100 (1/6), D 0.
    HtoD copy time 3600 ns, overlapped 1200 -> 33.3 %; all host copies 7600 -> 15.8 %.
    Median GB/s of copies overlapped for more than half their time: B only -> 5;
    alone: D -> 20.
    """
    b = builder("current")
    b.memcpy(0, 1000, 10000, pid=100, stream=7)
    b.memcpy(500, 1500, 5000, pid=200, stream=9)
    b.memcpy(1400, 2000, 6000, pid=100, stream=7)
    b.memcpy(3000, 4000, 20000, pid=200, stream=9)
    b.memcpy(0, 4000, 8000, kind="DtoH", src="device", dst="pinned", pid=100, stream=8)
    return b.write(tmp_path / "contention.sqlite")


def test_contention_across_processes(builder, tmp_path):
    with nsysdiag.open(contention_trace(builder, tmp_path), cache=False) as rep:
        res = transfers.run(rep)
    copies = res.tables["copies"].to_pylist()
    got = {(r["pid"], r["start_ns"]): (r["overlapped_ns"], r["overlap_fraction"])
           for r in copies if r["direction"] == "HtoD"}
    assert got[(100, 0)] == (500, pytest.approx(0.5))
    assert got[(200, 500)] == (600, pytest.approx(0.6))
    assert got[(100, 1400)] == (100, pytest.approx(1 / 6))
    assert got[(200, 3000)] == (0, 0.0)
    (dtoh,) = [r for r in copies if r["direction"] == "DtoH"]
    assert dtoh["overlapped_ns"] == 0
    c = {r["direction"]: r for r in res.tables["contention"].to_pylist()}
    assert (c["HtoD"]["copy_time_ns"], c["HtoD"]["overlapped_ns"]) == (3600, 1200)
    assert c["HtoD"]["overlapped_copies"] == 3 and c["HtoD"]["processes"] == 2
    assert c["HtoD"]["contention_share_pct"] == pytest.approx(100 / 3)
    assert c["HtoD"]["overlapped_median_gbps"] == pytest.approx(5.0)
    assert c["HtoD"]["alone_median_gbps"] == pytest.approx(20.0)
    assert c["DtoH"]["contention_share_pct"] == 0
    assert c["all"]["contention_share_pct"] == pytest.approx(100 * 1200 / 7600)
    s = res.summary
    assert s["contention_share_pct"] == pytest.approx(100 * 1200 / 7600)
    assert s["htod_contention_share_pct"] == pytest.approx(100 / 3)
    assert (s["htod_overlapped_median_gbps"], s["htod_alone_median_gbps"]) == (5.0, 20.0)
    assert any("33% of HtoD copy time overlapped" in f for f in res.findings)


def test_contention_matches_brute_force(builder, tmp_path):
    """Random same-direction copies against a direct per-copy overlap computation."""
    rng = random.Random(7)
    b = builder("current")
    spans = []
    for _ in range(150):
        start = rng.randrange(0, 20000, 10)
        end = start + rng.choice([0, 10, 50, 200, 1000])
        spans.append((start, end))
        b.memcpy(start, end, 1000, pid=rng.choice([1, 2]), stream=rng.choice([7, 8]))
    with nsysdiag.open(b.write(tmp_path / "r.sqlite"), cache=False) as rep:
        got = sorted((r["start_ns"], r["end_ns"], r["overlapped_ns"])
                     for r in transfers.run(rep).tables["copies"].to_pylist())

    def covered(t0, t1, me):
        # time in [t0, t1) during which another copy is in flight, per unit step
        return sum(1 for t in range(t0, t1, 10)
                   if any(s <= t < e for j, (s, e) in enumerate(spans) if j != me))

    want = sorted((s, e, 10 * covered(s, e, i)) for i, (s, e) in enumerate(spans))
    assert got == want


def test_no_copies_is_empty_and_no_cuda_not_captured(builder, tmp_path):
    b = builder("current")
    b.launch(0, 10, 20, 30)
    with nsysdiag.open(b.write(tmp_path / "k.sqlite"), cache=False) as rep:
        res = transfers.run(rep)
    assert res.status == "empty" and "memcpys" in res.message
    b = builder("current")
    b.nvtx(0, 10, "x")
    with nsysdiag.open(b.write(tmp_path / "n.sqlite"), cache=False) as rep:
        assert transfers.run(rep).status == "not_captured"


# -- link speeds and the nvbandwidth baseline -------------------------------------------------

def test_parse_nvbandwidth_sample():
    base = parse_nvbandwidth(SAMPLE)
    assert base.gbps == {"HtoD": {0: 55.47, 1: 55.52}, "DtoH": {0: 54.93}}   # N/A dropped
    assert base.testcases == {"HtoD": "host_to_device_memcpy_ce",
                              "DtoH": "device_to_host_memcpy_ce"}
    assert base.version == "v0.7"


def test_parse_nvbandwidth_tolerates_banner_and_numbers(tmp_path):
    f = tmp_path / "b.json"
    f.write_text('nvbandwidth Version: v0.7\n{"nvbandwidth": {"testcases": ['
                 '{"name": "host_to_device_memcpy_sm", "status": "Passed", '
                 '"bandwidth_matrix": [[50.5]]},'
                 '{"name": "device_to_host_memcpy_ce", "status": "Error", '
                 '"bandwidth_matrix": [["40"]]}]}}')
    base = parse_nvbandwidth(f)
    assert base.gbps == {"HtoD": {0: 50.5}}   # the failed testcase is ignored
    assert base.testcases == {"HtoD": "host_to_device_memcpy_sm"}


@pytest.mark.parametrize("text, match", [
    ("{not json", "not nvbandwidth JSON"),
    ("", "not nvbandwidth JSON"),
    ('{"something": 1}', "not nvbandwidth JSON"),
    ('{"nvbandwidth": {"testcases": [{"name": "device_to_device_memcpy_read_ce", '
     '"status": "Passed", "bandwidth_matrix": [["N/A", "300"]]}]}}', "no passed host_to_device"),
    ('{"nvbandwidth": {"testcases": [{"name": "host_to_device_memcpy_ce", '
     '"bandwidth_matrix": [["N/A"]]}]}}', "no passed host_to_device"),
])
def test_parse_nvbandwidth_rejects_broken_files(tmp_path, text, match):
    f = tmp_path / "bad.json"
    f.write_text(text)
    with pytest.raises(UsageError, match=match) as err:
        parse_nvbandwidth(f)
    assert "\n" not in err.value.one_line()
    with pytest.raises(UsageError, match="cannot read"):
        parse_nvbandwidth(tmp_path / "missing.json")


def test_link_preference_trace_then_baseline_then_default():
    base = parse_nvbandwidth(SAMPLE)
    devices = [{"device_id": 0, "name": "NVIDIA H200", "pcie_generation": None, "pcie_width": None},
               {"device_id": 1, "name": "NVIDIA H200", "pcie_generation": None, "pcie_width": None},
               {"device_id": 2, "name": "NVIDIA H200", "pcie_generation": 4, "pcie_width": 8}]
    links = {(lk.device_id, lk.direction): lk for lk in resolve_links(devices, base)}
    assert (links[0, "HtoD"].source, links[0, "HtoD"].gbps) == ("baseline", 55.47)
    assert (links[0, "DtoH"].source, links[0, "DtoH"].gbps) == ("baseline", 54.93)
    assert links[1, "HtoD"].source == "baseline"
    # device 1 DtoH is N/A in the baseline: the default fills in
    assert links[1, "DtoH"].source == "default"
    assert links[1, "DtoH"].gbps == pytest.approx(GEN5_X16)
    # the trace's own PCIe record wins: Gen4 x8 = 8 * 16 GT/s * 128/130 / 8 bits
    assert links[2, "HtoD"].source == "trace"
    assert links[2, "HtoD"].gbps == pytest.approx(8 * 16 * 128 / 130 / 8)
    assert [lk.source for lk in resolve_links(devices[:1], None)] == ["default", "default"]
    assert resolve_links(devices[:1], Baseline("x"))[0].source == "default"


@pytest.mark.parametrize("name, gbps, words", [
    ("NVIDIA H100 80GB HBM3", 16 * 32 * 128 / 130 / 8, "Gen5 x16"),
    ("NVIDIA A100-SXM4-40GB", 16 * 16 * 128 / 130 / 8, "Gen4 x16"),
    ("Tesla V100-SXM2-16GB", 16 * 8 * 128 / 130 / 8, "Gen3 x16"),
    ("Tesla T4", 16 * 8 * 128 / 130 / 8, "Gen3 x16"),
    ("NVIDIA GeForce RTX 4090", 16 * 16 * 128 / 130 / 8, "Gen4 x16"),
    ("NVIDIA GH200 480GB", 450.0, "NVLink-C2C"),
    ("NVIDIA RTX 5000 Ada Generation", 16 * 16 * 128 / 130 / 8, "Gen4 x16"),
    ("NVIDIA GeForce RTX 5090", 16 * 32 * 128 / 130 / 8, "Gen5 x16"),
])
def test_default_links_by_gpu(name, gbps, words):
    got, note = default_link(name)
    assert got == pytest.approx(gbps) and words in note


def test_unknown_gpu_gets_no_link():
    """A GPU the table does not know is not judged against a guessed link."""
    assert default_link("Mystery Accelerator") == (
        None, "GPU 'Mystery Accelerator' not in the platform table: link unknown")


GEN = {g: 128 / 130 / 8 * rate for g, rate in ((3, 8.0), (4, 16.0), (5, 32.0))}


@pytest.mark.parametrize("row, kind, gen, lanes", [
    # the corpus' GPUs as their exports record them: name, chip, compute capability, discrete
    (("NVIDIA RTX 5000 Ada Generation Laptop GPU", "AD103", "8.9", True), "pcie", 4, 8),
    (("NVIDIA GeForce RTX 5070 Ti Laptop GPU", "GB205", "12.0", True), "pcie", 5, 8),
    (("NVIDIA GeForce RTX 5080", "GB203", "12.0", True), "pcie", 5, 16),
    (("NVIDIA GeForce RTX 4060 Ti", "AD106", "8.9", True), "pcie", 4, 8),
    (("NVIDIA GeForce RTX 4070 SUPER", "AD104", "8.9", True), "pcie", 4, 16),
    (("NVIDIA GeForce RTX 3060 Laptop GPU", "GA106", "8.6", True), "pcie", 4, 8),
    (("NVIDIA A100-SXM4-40GB", "GA100", "8.0", True), "pcie", 4, 16),
    (("NVIDIA H100 PCIe", "GH100", "9.0", True), "pcie", 5, 16),
    (("NVIDIA GeForce GTX 1660 SUPER", "TU116", "7.5", True), "pcie", 3, 16),
    (("Tesla V100-SXM2-16GB", None, None, True), "pcie", 3, 16),
    (("NVIDIA GH200 480GB", "GH100", "9.0", True), "nvlink-c2c", None, None),
    (("Orin", "GA10B", "8.7", False), "integrated", None, None),
    (("Xavier", None, None, False), "integrated", None, None),
    (("Intel(R) Iris(R) Xe Graphics", "", "0.0", True), "not_cuda", None, None),
])
def test_platform_table(row, kind, gen, lanes):
    name, chip, cc, discrete = row
    link = host_link({"name": name, "chip_name": chip, "compute_capability": cc,
                      "is_discrete": discrete})
    assert (link.kind, link.generation, link.lanes) == (kind, gen, lanes)
    if kind == "pcie":
        assert link.gbps == pytest.approx(GEN[gen] * lanes)
        assert f"Gen{gen} x{lanes}" in link.note
    elif kind == "nvlink-c2c":
        assert link.gbps == 450.0
    else:
        assert link.gbps is None


def test_integrated_gpu_copies_not_judged_against_a_link():
    """The Jetson Orin export: copies are measured, but no link figure or % of link."""
    path = need(CORPUS_DIR / "public2" / "SamuelAmsih__CUDA__report14.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        res = rep.analysis("transfers")
    links = res.tables["links"].to_pylist()
    assert {r["link_source"] for r in links} == {"integrated"}
    assert all(r["link_gbps"] is None for r in links)
    assert res.summary["link_htod_gbps"] is None
    assert all(r["achieved_pct_of_link"] is None for r in res.tables["host"].to_pylist())
    assert "of the link" not in res.message


def test_ada_laptop_is_gen4():
    """RTX 5000 Ada Generation Laptop GPU: Ada, PCIe Gen4 (not the Gen5 of an RTX 50 part)."""
    path = need(CORPUS_DIR / "public2" / "Athrun0109__CS336_assignment2__result.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        links = rep.analysis("transfers").tables["links"].to_pylist()
    dev0 = [r for r in links if r["device_id"] == 0]
    assert dev0 and all("Gen4" in r["link_note"] for r in dev0)
    assert all(r["link_gbps"] == pytest.approx(GEN[4] * 8) for r in dev0)


def test_pcie_rates():
    assert pcie_gbps(3, 16) == pytest.approx(15.7538, rel=1e-4)
    assert pcie_gbps(1, 16) == pytest.approx(4.0)
    assert pcie_gbps(9, 16) is None and pcie_gbps(4, 0) is None


def test_run_with_baseline(builder, tmp_path):
    with nsysdiag.open(kinds_trace(builder, tmp_path), cache=False) as rep:
        res = transfers.run(rep, baseline=str(SAMPLE))
    s = res.summary
    assert s["link_source"] == "baseline"
    assert (s["link_htod_gbps"], s["link_dtoh_gbps"]) == (55.47, 54.93)
    assert s["htod_achieved_pct_of_link"] == pytest.approx(100 * 18 / 55.47)
    assert s["dtoh_aggregate_pct_of_link"] == pytest.approx(100 * 2 / 54.93)
    assert {r["link_source"] for r in res.tables["links"].to_pylist()} == {"baseline"}


def test_cli_bad_baseline_is_one_line_usage_error(builder, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    path = kinds_trace(builder, tmp_path)
    assert main(["--no-cache", "transfers", str(path), "--baseline", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nsysdiag: error:") and "not nvbandwidth JSON" in err
    assert len(err.splitlines()) == 1
    assert main(["--no-cache", "transfers", str(path), "--format", "json",
                 "--baseline", str(SAMPLE)]) == 0
    assert '"link_source": "baseline"' in capsys.readouterr().out


# -- real traces --------------------------------------------------------------------------------

CORPUS = corpus_sqlite_files()


@pytest.fixture(scope="module")
def corpus_results():
    """transfers on every corpus file, run once for the tests below."""
    return run_on_corpus(transfers.run)


def test_matches_nsys_stats_mem_time_sum_on_h200_baseline(corpus_results):
    res = corpus_results[need(H200 / "baseline.sqlite")]
    ref = need(H200 / "nsys-reference" / "stats_baseline_cuda_gpu_mem_time_sum.csv")
    with ref.open() as f:
        want = {r["Operation"]: r for r in csv.DictReader(f)}
    got = {r["operation"]: r for r in res.tables["mem_time"].to_pylist()}
    assert set(got) == set(want)
    for op, w in want.items():
        g = got[op]
        assert g["total_time_ns"] == int(w["Total Time (ns)"])
        assert g["copies"] == int(w["Count"])
        assert g["min_ns"] == int(w["Min (ns)"]) and g["max_ns"] == int(w["Max (ns)"])
        assert g["avg_ns"] == pytest.approx(float(w["Avg (ns)"]), abs=0.05)
        assert g["med_ns"] == pytest.approx(float(w["Med (ns)"]), abs=0.05)
        assert g["stddev_ns"] == pytest.approx(float(w["StdDev (ns)"]), abs=0.05)
        assert g["time_pct"] == pytest.approx(float(w["Time (%)"]), abs=0.05)


@pytest.mark.parametrize("name, copies", [("baseline.sqlite", 3000), ("gpu.sqlite", 2431)])
def test_h200_traces(name, copies, corpus_results):
    res = corpus_results[need(H200 / name)]
    s = res.summary
    # the workload copies 64 KiB from pinned memory on one stream: no pageable copy, no
    # same-direction overlap, and small copies far below the Gen5 link
    assert res.status == "ok" and s["copies"] == copies and s["memsets"] == 0
    assert s["pageable_copies"] == 0 and s["contention_share_pct"] == 0
    assert s["link_source"] == "default" and s["link_htod_gbps"] == pytest.approx(GEN5_X16)
    assert 5 < s["htod_aggregate_gbps"] < 40 and 5 < s["dtoh_aggregate_gbps"] < 40
    assert s["htod_copies"] + s["dtoh_copies"] == copies


@pytest.mark.skipif(not CORPUS, reason="shared corpus not available")
def test_every_corpus_file(corpus_results):
    for path, res in corpus_results.items():
        assert res.status in ("ok", "empty", "not_captured"), path
        if res.ok:
            pct = res.summary["contention_share_pct"]
            assert pct is None or 0 <= pct <= 100 + 1e-9, path
            bounds = pc.min_max(res.tables["copies"].column("overlap_fraction")).as_py()
            assert bounds["min"] is None or 0 <= bounds["min"] <= bounds["max"] <= 1, path


def test_expected_time_model(builder, tmp_path):
    """Copies judged against what was possible: 2 us + bytes / link (H200: PCIe Gen5 x16
    from the platform table, 63.0154 GB/s = bytes/ns) for pinned copies.

      4 KiB in 2100 ns:  expected 2000 + 4096 / 63.0154 = 2065.0 ns (98% of it: not slow,
                         although it reaches 3% of the link)
      64 MiB in 10 ms:   expected 2000 + 67108864 / 63.0154 = 1066958.6 ns (11%: slow)
    """
    b = builder("current")
    b.memcpy(0, 2100, 4096)
    b.memcpy(10_000, 10_010_000, 64 << 20)
    b.memcpy(20_000_000, 20_002_100, 4096)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = transfers.run(rep)
    small, big = 2000 + 4096 / GEN5_X16, 2000 + (64 << 20) / GEN5_X16
    expected = [row["expected_ns"] for row in r.table("copies").to_pylist()]
    assert expected == pytest.approx([small, big, small])
    (host,) = r.host()
    assert host.expected_pct == pytest.approx(100 * (2 * small + big) / (2 * 2100 + 10_000_000))
    assert host.slow_copies == 1 and r.htod.slow_copies == 1
    assert r.htod.expected_pct == pytest.approx(host.expected_pct)


def test_small_copies_are_not_slow(builder, tmp_path):
    # three 4 KiB pinned copies of 2.1 us each: 3% of the link, 98% of what was possible
    b = builder("current")
    for t in (0, 10_000, 20_000):
        b.memcpy(t, t + 2100, 4096)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = transfers.run(rep)
        d = nsysdiag.diagnose(rep)
    assert r.htod.achieved_pct_of_link < 5 and r.htod.expected_pct > 95
    assert not any("slow" in f for f in r.findings)
    e1 = [f for f in d.findings if f.check == "E1"]
    assert e1 and all(f.title != "Host-device transfers are slowed" for f in e1)


def test_faster_than_physically_possible(builder, tmp_path):
    """A memset of 4 GiB in 1120 ns (3.8e6 GB/s) on a GPU whose memory moves 4814 GB/s,
    and a 64 MiB host copy in 100 us (671 GB/s, beyond twice the 63 GB/s link): suspect,
    counted, and left out of the bandwidth figures; an 8 MiB memset in 2 us (4194 GB/s)
    is within the memory's bandwidth."""
    b = builder("current")
    b.memset(0, 1120, 4 << 30)
    b.memset(10_000, 12_000, 8 << 20)
    b.memcpy(20_000, 120_000, 64 << 20)
    b.memcpy(200_000, 200_000 + 2_000_000, 64 << 20)  # 33.6 GB/s: plausible
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = transfers.run(rep)
    rows = r.table("copies").to_pylist()
    assert [row["suspect"] for row in rows] == ["faster_than_memory", None,
                                                "faster_than_link", None]
    assert [row["bandwidth_gbps"] is None for row in rows] == [True, False, True, False]
    assert (r.suspect_copies, r.faster_than_link, r.faster_than_memory) == (2, 1, 1)
    assert r.htod.median_gbps == pytest.approx((64 << 20) / 2_000_000)
    assert any("faster than physically possible" in f for f in r.findings)


def faults_trace(builder, tmp_path, layout="current"):
    """Unified-memory page faults of two processes, and one migration.

    pid 4242: CPU faults at 500 and 600; GPU fault groups on device 0: [1000, 3000] 5
        read faults, [2000, 4000] 3 write faults (overlapping: union [1000, 4000], 3000 ns),
        [10000, 11000] 2 faults (1000 ns): 10 faults, 3 groups, 4000 ns.
    pid 7: [1000, 1500] 4 faults on device 1, [1200, 1400] 1 fault on device 0: the
        unions are per GPU, 500 + 200 = 700 ns; 5 faults, 2 groups, 2 GPUs.
    """
    b = builder(layout)
    b.memcpy(1000, 4000, 1 << 16, kind="UVM_HtoD", src="unknown", dst="unknown")
    b.um_cpu_fault(500)
    b.um_cpu_fault(600)
    b.um_gpu_fault(1000, 3000, faults=5, access="read")
    b.um_gpu_fault(2000, 4000, faults=3, access="write")
    b.um_gpu_fault(10000, 11000, faults=2)
    b.um_gpu_fault(1000, 1500, faults=4, device=1, pid=7)
    b.um_gpu_fault(1200, 1400, faults=1, device=0, pid=7)
    return b.write(tmp_path / f"faults-{layout}.sqlite")


@pytest.mark.parametrize("layout", ["current", "old"])
def test_unified_memory_page_faults(builder, tmp_path, layout):
    with nsysdiag.open(faults_trace(builder, tmp_path, layout), cache=False) as rep:
        res = transfers.run(rep)
        view = rep.sql("SELECT side, access_type, faults, duration_ns FROM um_page_faults "
                       "ORDER BY side, start_ns, device_id").fetchall()
    # the access type by name from ENUM_CUDA_UNIF_MEM_ACCESS_TYPE (current) or from the
    # fallback constants (old: no ENUM tables); CPU faults are instants
    assert view == [("cpu", None, 1, None), ("cpu", None, 1, None),
                    ("gpu", "read", 5, 2000), ("gpu", "read", 4, 500), ("gpu", "read", 1, 200),
                    ("gpu", "write", 3, 2000), ("gpu", "read", 2, 1000)]
    rows = {r.pid: r for r in res.page_faults()}
    a, b = rows[4242], rows[7]
    assert (a.cpu_faults, a.gpu_faults, a.gpu_fault_groups, a.gpu_fault_time_ns, a.devices,
            a.first_ns, a.last_ns) == (2, 10, 3, 4000, 1, 500, 11000)
    assert (b.cpu_faults, b.gpu_faults, b.gpu_fault_groups, b.gpu_fault_time_ns,
            b.devices) == (0, 5, 2, 700, 2)
    assert [r.pid for r in res.page_faults()] == [4242, 7]  # most faults first
    assert res.um_faults_recorded
    assert (res.um_cpu_faults, res.um_gpu_faults, res.um_gpu_fault_groups,
            res.um_gpu_fault_time_ns, res.um_faults) == (2, 15, 5, 4700, 17)
    assert any("17 unified-memory page faults (2 on the host, 15 raised by kernels, "
               "4.7 us of GPU time" in f for f in res.findings)


def test_no_page_fault_tables(builder, tmp_path):
    # an export without the fault tables: nothing recorded, no table rows, no finding
    with nsysdiag.open(kinds_trace(builder, tmp_path), cache=False) as rep:
        res = transfers.run(rep)
        status = rep.probe["um_page_faults"]
    assert status.status == "not_captured" and "--cuda-um-gpu-page-faults" in status.hint
    assert not res.um_faults_recorded and res.page_faults() == []
    assert (res.um_cpu_faults, res.um_gpu_faults, res.um_gpu_fault_time_ns) == (0, 0, 0)
    assert not any("page faults" in f for f in res.findings)


def test_corpus_empty_page_fault_tables():
    # the only corpus export with the fault tables (nsys 2022.2, every table written) holds
    # no rows in them
    path = CORPUS_DIR / "public" / "hpcgroup__pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    need(path)
    with nsysdiag.open(path) as rep:
        res = transfers.run(rep)
        assert rep.probe["um_page_faults"].status == "empty"
    assert res.um_faults_recorded and res.um_faults == 0 and res.page_faults() == []
