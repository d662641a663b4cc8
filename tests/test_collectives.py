"""Collectives across ranks (analyses/collectives.py, reportset.py) on hand-built exports
whose waits, straggler and overlap are computed by hand."""

from __future__ import annotations

import pytest

from fixtures.nsysbuild import TraceBuilder
from nsysdiag.analyses import collectives
from nsysdiag.analyses.collectives import label_ranks
from nsysdiag.reportset import ReportSet
from nsysdiag.settings import Settings

US = 1_000
MS = 1_000_000
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
UTC0 = 1_750_000_000_000_000_000


def _rank(b: TraceBuilder, arrivals: list[int], end_at: list[int], *, shift: int = 0,
          pid: int | None = None, device: int | None = None, stream: int = 13) -> None:
    """One rank's step loop: a compute kernel, then the all-reduce (arrival = its kernel
    start, all ranks' kernels end together at ``end_at``); times on this rank's clock
    (``shift`` subtracted)."""
    for a, e in zip(arrivals, end_at):
        b.launch(a - 50 * US - shift, a - 45 * US - shift, a - 40 * US - shift,
                 a - 10 * US - shift, name="gemm", pid=pid, device=device)
        b.launch(a - 5 * US - shift, a - shift, a - shift, e - shift, name=AR, pid=pid,
                 device=device, stream=stream)


def _two_exports(tmp_path, late, *, clock_skew=0, record_start=True):
    """rank0 and rank1 exports; rank1's capture began 5 ms later (its clock reads 5 ms
    less) and it arrives ``late`` ns after rank0 at every other step."""
    steps = [i * MS for i in range(1, 9)]
    r1 = [s + (late if i % 2 else 0) for i, s in enumerate(steps)]
    ends = [max(a, b) + 100 * US for a, b in zip(steps, r1)]
    paths = []
    for name, arr, start in (("rank0", steps, 0), ("rank1", r1, 5 * MS)):
        b = TraceBuilder(pid=100 + len(paths))
        if record_start:
            b.session_start(UTC0 + start + (clock_skew if name == "rank1" else 0))
        _rank(b, arr, ends, shift=start)
        paths.append(b.write(tmp_path / f"{name}.sqlite"))
    return paths


def test_the_late_rank_is_the_straggler_with_the_waits_it_caused(tmp_path):
    paths = _two_exports(tmp_path, late=300 * US)
    with ReportSet(paths, cache=False) as rs:
        r = collectives.run(rs)
    assert r.ok and r.alignment == "session_start"
    assert r.offsets_ns == (0, 5 * MS) and r.clock_residual_ns == 0
    assert [x.label for x in r.ranks] == ["rank 0", "rank 1"]
    assert r.instances == 8 and r.unpaired == 0
    # 4 steps rank1 is 300 us late: rank0 waits 4 x 300 us, rank1 never waits
    r0, r1 = r.per_rank
    assert (r0.waited_ns, r1.waited_ns) == (1200 * US, 0)
    assert (r1.times_last, r1.caused_wait_ns, r1.delay_ns) == (4, 1200 * US, 1200 * US)
    assert (r0.times_last, r0.caused_wait_ns) == (0, 0)
    assert r.straggler == 1 and r.straggler_share_pct == 100.0
    assert r.wait_ns == 1200 * US
    # each instance: from the first arrival to the common end, the transfer 100 us
    assert r.collective_ns == 4 * 400 * US + 4 * 100 * US
    inst = r.table("instances").to_pylist()
    assert [i["transfer_ns"] for i in inst] == [100 * US] * 8
    assert [i["last_rank"] for i in inst if i["wait_ns"]] == [1] * 4


def test_skewed_clocks_are_placed_by_the_collectives_ends(tmp_path):
    # rank1's host clock runs 2 ms ahead: by session start alone its kernels would
    # end 2 ms after rank0's; the ends put it back
    paths = _two_exports(tmp_path, late=300 * US, clock_skew=2 * MS)
    with ReportSet(paths, cache=False) as rs:
        r = collectives.run(rs)
    assert r.alignment == "collective_ends"
    # the median end is the mean of two ends: each export moves half the skew
    assert r.offsets_ns == (1 * MS, 5 * MS + 1 * MS)
    assert r.clock_residual_ns == 0
    assert r.straggler == 1 and r.per_rank[1].caused_wait_ns == 1200 * US


def test_a_drifting_clock_is_fitted_and_taken_out(tmp_path):
    # rank1's clock runs 100 ppm fast: 200 us ahead after 2 s; every 4th step it is
    # 500 us late
    steps = [i * 100 * MS for i in range(1, 21)]
    paths = []
    for rank in (0, 1):
        b = TraceBuilder(pid=40 + rank)
        b.session_start(UTC0)
        clock = (lambda t: t + t // 10_000) if rank else (lambda t: t)
        for i, s in enumerate(steps):
            late = 500 * US if i % 4 == 0 else 0
            a = s + (late if rank else 0)
            e = s + late + 200 * US
            b.launch(clock(a - 5 * US), clock(a), clock(a), clock(e), name=AR, stream=13)
        paths.append(b.write(tmp_path / f"rank{rank}.sqlite"))
    with ReportSet(paths, cache=False) as rs:
        r = collectives.run(rs)
    assert r.alignment == "collective_ends"
    assert r.drift_ppm[1] - r.drift_ppm[0] == pytest.approx(100, abs=0.5)
    assert r.clock_residual_ns <= 1 * US
    # 5 late steps of 500 us: after the fit, rank0 waited 2.5 ms (within a few us)
    assert r.straggler == 1 and r.per_rank[1].times_last >= 5
    assert r.per_rank[0].waited_ns == pytest.approx(2.5 * MS, abs=20 * US)


def test_no_session_start_uses_the_ends(tmp_path):
    paths = _two_exports(tmp_path, late=300 * US, record_start=False)
    with ReportSet(paths, cache=False) as rs:
        r = collectives.run(rs)
    assert r.alignment == "collective_ends" and r.straggler == 1


def test_lateness_spread_over_ranks_names_no_straggler(tmp_path):
    # one export, two processes on two GPUs, one timeline: each is late at half the steps
    b = TraceBuilder(pid=1)
    steps = [i * MS for i in range(1, 9)]
    a0 = [s + (200 * US if i % 2 else 0) for i, s in enumerate(steps)]
    a1 = [s + (0 if i % 2 else 200 * US) for i, s in enumerate(steps)]
    ends = [max(x, y) + 50 * US for x, y in zip(a0, a1)]
    _rank(b, a0, ends, pid=1, device=0)
    _rank(b, a1, ends, pid=2, device=1)
    p = b.write(tmp_path / "job.sqlite")
    with ReportSet([p], cache=False) as rs:
        r = collectives.run(rs)
    assert r.alignment == "one_timeline" and len(r.ranks) == 2
    assert [x.caused_wait_ns for x in r.per_rank] == [800 * US, 800 * US]
    # a tie is no straggler: more than half of the waits must be one rank's
    assert r.straggler is None and r.straggler_share_pct == 50.0
    assert [x.times_last for x in r.per_rank] == [4, 4]


def test_overlap_of_communication_with_compute(tmp_path):
    b = TraceBuilder(pid=7)
    # all-reduce 0-100 us; compute kernels 20-40 and 30-60 (one island 20-60) and 90-150
    b.kernel(0, 100 * US, name=AR, stream=13, pid=7)
    b.kernel(20 * US, 40 * US, name="gemm", pid=7)
    b.kernel(30 * US, 60 * US, name="gemm", pid=7)
    b.kernel(90 * US, 150 * US, name="gemm", pid=7)
    b.kernel(0, 100 * US, name=AR, stream=13, pid=8, device=1)
    p = b.write(tmp_path / "one.sqlite")
    with ReportSet([p], cache=False) as rs:
        r = collectives.run(rs)
    o = {x.rank: x for x in r.overlap}
    assert (o[0].nccl_ns, o[0].compute_ns, o[0].nccl_overlapped_ns) == (100 * US, 110 * US,
                                                                       50 * US)
    assert (o[1].nccl_ns, o[1].compute_ns, o[1].nccl_overlapped_ns) == (100 * US, 0, 0)


def test_instances_missing_on_a_rank_are_left_out(tmp_path):
    paths = _two_exports(tmp_path, late=0)
    b = TraceBuilder(pid=300)
    b.session_start(UTC0)
    _rank(b, [i * MS for i in range(1, 5)], [i * MS + 100 * US for i in range(1, 5)])
    paths.append(b.write(tmp_path / "rank2.sqlite"))
    with ReportSet(paths, cache=False) as rs:
        r = collectives.run(rs)
    # rank2 captured only the first 4 steps: 4 instances are held by all three
    assert r.instances == 4 and r.unpaired == 2 * 4
    assert r.straggler is None and r.wait_ns == 0


def test_fewer_than_two_ranks_is_empty(tmp_path):
    b = TraceBuilder()
    _rank(b, [MS], [MS + 100 * US])
    p = b.write(tmp_path / "solo.sqlite")
    with ReportSet([p], cache=False) as rs:
        r = collectives.run(rs)
    assert r.status == "empty" and "fewer than two ranks" in r.message


def test_rank_labels_from_names_or_order():
    found = [(0, 10, 0), (1, 11, 0)]
    assert [r.label for r in label_ranks(["job_rank3.sqlite", "job_rank1.sqlite"], found)] == [
        "rank 1", "rank 3"]
    assert [(r.export, r.label) for r in label_ranks(["a.sqlite", "b.sqlite"], found)] == [
        (0, "rank 0"), (1, "rank 1")]
    two = [(0, 5, 1), (0, 4, 0)]
    assert [(r.pid, r.device_id) for r in label_ranks(["x.sqlite"], two)] == [(4, 0), (5, 1)]


def test_settings_bound_the_straggler_share(tmp_path):
    paths = _two_exports(tmp_path, late=300 * US)
    with ReportSet(paths, cache=False) as rs:
        assert collectives.run(rs, settings=Settings(straggler_share_pct=99.0)).straggler == 1
        assert collectives.run(rs, settings=Settings(straggler_share_pct=100.0)).straggler is None
    with pytest.raises(Exception, match="given twice"):
        ReportSet([paths[0], paths[0]], cache=False)


def _training_rank(b: TraceBuilder, rank: int, stalled: tuple[int, ...], *,
                   pid: int | None = None, device: int | None = None) -> None:
    """One rank's 100 training steps (see :func:`_training_ranks`) into ``b``."""
    for i in range(100):
        s = i * 10 * MS
        extra = 0
        for k in range(10):
            if rank == 1 and i in stalled and k == 5:
                extra = 3 * MS
            t = s + 50 * US + k * 100 * US + extra
            b.launch(t, t + 5 * US, t + 10 * US, t + 30 * US, name="gemm", pid=pid,
                     device=device)
        arrival = s + 1200 * US + (3 * MS if i in stalled else 0)
        mine = s + 1200 * US + extra
        end = arrival + 100 * US
        b.launch(mine - 5 * US, mine, mine, end, name=AR, stream=13, pid=pid, device=device)
        b.nvtx(s, end + 10 * US, "train_step", pid=pid)


def _training_ranks(tmp_path, stalled=(40, 60, 80)):
    """Two ranks of 100 training steps: 10 kernels, then an all-reduce the step waits for.
    Rank 1's launching thread stalls 3 ms between two launches at the ``stalled`` steps,
    so its all-reduce arrives 3 ms late there and rank 0 waits for it."""
    paths = []
    for rank in (0, 1):
        b = TraceBuilder(pid=500 + rank)
        b.session_start(UTC0)
        _training_rank(b, rank, stalled)
        paths.append(b.write(tmp_path / f"rank{rank}.sqlite"))
    return paths


def test_ranks_command_names_the_straggler_and_its_cause(tmp_path, capsys):
    import json

    from test_bad_inputs import fingerprint

    from nsysdiag.cli.main import main

    paths = _training_ranks(tmp_path)
    (tmp_path / "out").mkdir()
    before = [fingerprint(str(p)) for p in paths]
    assert main(["--no-cache", "ranks", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("STRAGGLER: rank 1 arrived last at 3 of 100 collectives")
    assert "the others waited 9 ms for it (100% of all waits)" in out
    assert "Its own cause: CPU - a host stall between launches" in out
    assert main(["--no-cache", "ranks", "--json", *map(str, paths)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["straggler"] == "rank 1"
    assert doc["collectives"]["summary"]["straggler"] == 1
    assert doc["collectives"]["summary"]["per_rank"][0]["waited_ns"] == 9 * MS
    verdict = doc["straggler_diagnosis"]["verdict"]
    assert (verdict["layer"], verdict["mechanism"]) == ("cpu", "host_stall")
    html = tmp_path / "out" / "ranks.html"
    assert main(["--no-cache", "ranks", "--html", str(html), *map(str, paths)]) == 0
    page = html.read_text()
    # the headline, a bar per rank, and the 3 stalled steps' timelines (2 lanes each)
    assert "STRAGGLER: rank 1 arrived last at 3 of 100" in page
    assert page.count("rank 1 - waits it caused: 9 ms") == 1
    assert page.count("<h3>allreduce #") == 3
    assert page.count("(communicator 0): the others waited 3 ms for rank 1</h3>") == 3
    assert page.count("rank 0 waited 3 ms") == 3
    assert [fingerprint(str(p)) for p in paths] == before  # the inputs are never touched


def test_ranks_command_refuses_a_missing_export(tmp_path, capsys):
    from nsysdiag.cli.main import main

    paths = _two_exports(tmp_path, late=0)
    assert main(["ranks", str(paths[0]), str(tmp_path / "nope.sqlite")]) == 2
    assert "nope.sqlite" in capsys.readouterr().err


def test_ranks_command_without_collectives_exits_4(tmp_path, capsys):
    from nsysdiag.cli.main import main

    b = TraceBuilder()
    b.launch(0, 5 * US, 10 * US, 20 * US, name="gemm")
    p = b.write(tmp_path / "plain.sqlite")
    assert main(["--no-cache", "ranks", str(p)]) == 4
    err = capsys.readouterr().err
    assert "no NCCL kernels or traced MPI collectives in these exports" in err
    assert len(err.strip().splitlines()) <= 2


def test_overlap_equals_the_direct_sum_over_kernel_pairs(tmp_path):
    """The sorted look-ups (cover(end) - cover(start)) against the definition: for each
    NCCL kernel, its intersection with the union of the rank's other kernels, computed
    here point by point on a 1 us grid."""
    import random

    rng = random.Random(3)
    b = TraceBuilder(pid=9)
    nccl, other = [], []
    for _ in range(60):
        s = rng.randrange(0, 2000) * US
        d = rng.randrange(1, 80) * US
        if rng.random() < 0.3:
            nccl.append((s, s + d))
            b.kernel(s, s + d, name=AR, stream=13, pid=9)
        else:
            other.append((s, s + d))
            b.kernel(s, s + d, name="gemm", pid=9)
    b.kernel(0, US, name=AR, stream=13, pid=10, device=1)  # a second rank, not counted
    b.kernel(0, US, name="gemm", pid=9)
    other.append((0, US))
    busy = set()
    for s, e in other:
        busy.update(range(s // US, e // US))
    want = sum(sum(1 for t in range(s // US, e // US) if t in busy) for s, e in nccl) * US
    with ReportSet([b.write(tmp_path / "mix.sqlite")], cache=False) as rs:
        r = collectives.run(rs)
    got = next(o for o in r.overlap if o.rank == 0)
    assert got.nccl_overlapped_ns == want
    assert got.nccl_ns == sum(e - s for s, e in nccl)


def test_python_api_matches_the_command(tmp_path):
    import nsysdiag

    paths = _training_ranks(tmp_path)
    r = nsysdiag.diagnose_ranks(paths, cache=False)
    assert r.straggler_label == "rank 1"
    assert r.collectives.per_rank[1].caused_wait_ns == 9 * MS
    assert r.headline().startswith("STRAGGLER: rank 1 arrived last at 3 of 100 collectives")


def test_every_corpus_export_is_judged_without_error():
    """No corpus export holds NCCL kernels or MPI collectives of two ranks: each, alone
    and (the two-GPU Jacobi run) with its two devices, says so instead of pairing anything
    (the MPI exports hold one rank each)."""
    from conftest import _CORPUS_CACHE, corpus_sqlite_files

    files = corpus_sqlite_files()
    if not files:
        pytest.skip("shared corpus not present")
    for path in files:
        with ReportSet([path], cache_dir=_CORPUS_CACHE) as rs:
            r = collectives.run(rs)
        assert r.status == "empty", path
        assert r.message in (
            "no NCCL kernels or traced MPI collectives in these exports",
            "fewer than two ranks run NCCL kernels or MPI collectives: nothing to pair"), path


def _die(rep):
    """A worker's part that ends its process without a result (killed, out of memory)."""
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def test_exports_read_in_workers_give_the_same_pairing(tmp_path):
    # each export read in a worker process of its own (and with one at a time in this
    # process): the same instances, waits, offsets and overlap
    paths = _two_exports(tmp_path, late=300 * US, clock_skew=2 * MS)
    with ReportSet(paths, cache=False) as rs:
        serial = collectives.run(rs)
        assert rs._open == {}  # map opened and closed each export: none is held
    with ReportSet(paths, workers=2, cache=False) as rs:
        parallel = collectives.run(rs)
    assert serial.ok and serial.alignment == "collective_ends"
    for field in ("alignment", "offsets_ns", "drift_ppm", "instances", "per_rank", "overlap",
                  "straggler", "straggler_share_pct", "clock_residual_ns"):
        assert getattr(parallel, field) == getattr(serial, field), field
    assert parallel.tables["instances"].equals(serial.tables["instances"])


def test_a_bad_export_among_the_ranks_is_named_from_its_worker(tmp_path, capsys):
    from nsysdiag.cli.main import main
    from nsysdiag.errors import NsysdiagError

    paths = _two_exports(tmp_path, late=300 * US)
    bad = tmp_path / "rank2.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    with ReportSet([*paths, bad], workers=2, cache=False) as rs, \
            pytest.raises(NsysdiagError) as err:
        collectives.run(rs)
    assert err.value.exit_code == 3 and "rank2.sqlite" in err.value.one_line()
    code = main(["--no-cache", "ranks", "-j", "2", *map(str, paths), str(bad)])
    out = capsys.readouterr()
    assert code == 3 and "rank2.sqlite" in out.err and "Traceback" not in out.err
    assert len(out.err.strip().splitlines()) == 1


def test_a_worker_that_dies_is_named_and_the_run_ends(tmp_path):
    from nsysdiag.errors import NsysdiagError

    paths = _two_exports(tmp_path, late=300 * US)
    with ReportSet(paths, workers=2, cache=False) as rs, \
            pytest.raises(NsysdiagError, match="its worker died \\(SIGKILL") as err:
        rs.map(_die)
    assert err.value.path in {str(p) for p in paths}


def test_ranks_sharing_the_last_arrival_hold_no_wait_alone(tmp_path):
    # 3 ranks, 4 steps; at steps 1 and 3 ranks 1 and 2 arrive together 200 us after rank
    # 0: rank 0 waits 2 x 200 us, yet neither late rank alone held it, so the instances
    # have no last rank and no rank is charged with those waits or named the straggler
    steps = [i * MS for i in range(1, 5)]
    late = [s + (200 * US if i % 2 else 0) for i, s in enumerate(steps)]
    ends = [a + 300 * US for a in late]
    paths = []
    for k, arr in enumerate((steps, late, late)):
        b = TraceBuilder(pid=100 + k)
        b.session_start(UTC0)
        _rank(b, arr, ends)
        paths.append(b.write(tmp_path / f"rank{k}.sqlite"))
    with ReportSet(paths, cache=False) as rs:
        r = collectives.run(rs)
    assert r.ok and r.instances == 4
    assert [x.waited_ns for x in r.per_rank] == [400 * US, 0, 0]
    assert [x.caused_wait_ns for x in r.per_rank] == [0, 0, 0]
    assert [x.times_last for x in r.per_rank] == [0, 0, 0]
    assert r.straggler is None
    # steps 0 and 2 tie all three ranks, steps 1 and 3 ranks 1 and 2: no last rank
    assert r.tables["instances"].column("last_rank").to_pylist() == [None] * 4


def test_exports_read_on_a_dask_cluster_give_the_same_pairing(tmp_path):
    distributed = pytest.importorskip("distributed")
    paths = _two_exports(tmp_path, late=300 * US)
    with ReportSet(paths, cache=False) as rs:
        serial = collectives.run(rs)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            ReportSet(paths, dask=cluster.scheduler_address, cache=False) as rs:
        on_dask = collectives.run(rs)
    assert on_dask.per_rank == serial.per_rank and on_dask.straggler == serial.straggler == 1
    assert on_dask.tables["instances"].equals(serial.tables["instances"])


def _fault(rep):
    """A worker's part with a fault of ours in it."""
    raise ZeroDivisionError("division by zero")


def test_a_fault_in_a_worker_comes_back_as_one_line(tmp_path, capfd):
    from nsysdiag.errors import NsysdiagError

    paths = _two_exports(tmp_path, late=300 * US)
    with ReportSet(paths, workers=2, cache=False) as rs, pytest.raises(NsysdiagError) as err:
        rs.map(_fault)
    assert err.value.exit_code == 70
    assert err.value.one_line().endswith("internal error: ZeroDivisionError: division by zero")
    assert "Traceback" not in capfd.readouterr().err


def test_a_straggler_sharing_its_export_is_diagnosed_from_its_own_process(tmp_path, capsys):
    """Both ranks in one export (``nsys profile torchrun ...``): the straggler's cause comes
    from its process read alone, as it does from an export of its own."""
    import json

    from nsysdiag.cli.main import main

    b = TraceBuilder(pid=600)
    b.session_start(UTC0)
    for rank in (0, 1):
        _training_rank(b, rank, (40, 60, 80), pid=600 + rank, device=rank)
    path = b.write(tmp_path / "job.sqlite")
    assert main(["--no-cache", "ranks", "--json", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["straggler"] == "rank 1"
    assert [(r["pid"], r["device_id"]) for r in doc["ranks"]] == [(600, 0), (601, 1)]
    alone = doc["straggler_diagnosis"]
    assert alone["pid"] == 601
    assert (alone["verdict"]["layer"], alone["verdict"]["mechanism"]) == ("cpu", "host_stall")
    assert alone["tail"]["n"] == 100  # its own 100 steps, not both ranks' 200
    # the same diagnosis as ``--pid 601 diagnose`` gives
    assert main(["--no-cache", "--pid", "601", "diagnose", "--json", str(path)]) == 0
    by_hand = json.loads(capsys.readouterr().out)
    assert by_hand["pid"] == 601
    assert by_hand["verdict"] == alone["verdict"] and by_hand["tail"] == alone["tail"]
    # the other rank's process alone: healthy, every step alike but for the waits
    assert main(["--no-cache", "--pid", "600", "diagnose", "--json", str(path)]) == 0
    other = json.loads(capsys.readouterr().out)
    assert other["tail"]["n"] == 100 and other["verdict"]["mechanism"] != "host_stall"
    assert main(["--no-cache", "ranks", str(path)]) == 0
    assert f"the straggler's own diagnosis (process 601 of {path})" in capsys.readouterr().out


def test_a_process_the_export_lacks_is_a_usage_error(tmp_path, capsys):
    from nsysdiag.cli.main import main

    b = TraceBuilder(pid=600)
    _training_rank(b, 0, (), pid=600)
    path = b.write(tmp_path / "job.sqlite")
    assert main(["--no-cache", "--pid", "7", "diagnose", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"nsysdiag: error: no process 7 in {path}; its processes: 600 (proc600)"]
    assert main(["--no-cache", "--pid", "600", "ranks", str(path)]) == 2
    assert "--pid reads one process of one export" in capsys.readouterr().err


def test_mpi_collectives_are_paired_where_no_rank_runs_nccl(tmp_path):
    """Two MPI ranks traced with nsys --trace=mpi (the calls are NVTX ranges of the "MPI"
    domain): 20 MPI_Allreduce and one MPI_Barrier each; rank 1 enters 2 ms late at calls
    5, 9 and 13. Point-to-point and non-blocking calls are not collectives to pair."""
    paths = []
    for rank in (0, 1):
        b = TraceBuilder(pid=700 + rank)
        b.session_start(UTC0)
        b.nvtx_domain(1, "MPI")
        ends = []
        for i in range(20):
            arrive = i * 10 * MS + (2 * MS if rank == 1 and i in (5, 9, 13) else 0)
            end = i * 10 * MS + (2 * MS if i in (5, 9, 13) else 0) + 100 * US
            ends.append(end)
            b.nvtx(arrive, end, "MPI_Allreduce", domain_id=1)
            b.nvtx(end + 10 * US, end + 20 * US, "MPI_Send" if rank == 0 else "MPI_Recv",
                   domain_id=1)
            b.nvtx(end + 30 * US, end + 31 * US, "MPI_Iallreduce", domain_id=1)
        b.nvtx(300 * MS + rank * 50 * US, 300 * MS + 200 * US, "MPI_Barrier", domain_id=1)
        b.nvtx(400 * MS, 401 * MS, "MPI_Allreduce")  # the default domain: not an MPI call
        paths.append(b.write(tmp_path / f"rank{rank}.sqlite"))
    with ReportSet(paths, cache=False) as rs:
        r = collectives.run(rs)
    assert r.ok and r.paired_by == "mpi_ranges"
    assert [(k.pid, k.device_id, k.label) for k in r.ranks] == [(700, -1, "rank 0"),
                                                                (701, -1, "rank 1")]
    assert r.instances == 21 and r.unpaired == 0
    zero, one = r.per_rank
    # rank 0 waits 2 ms at three calls and 50 us at the barrier, which rank 1 enters last
    assert (zero.waited_ns, zero.times_last, zero.caused_wait_ns) == (6 * MS + 50 * US, 0, 0)
    assert (one.waited_ns, one.times_last, one.caused_wait_ns) == (0, 4, 6 * MS + 50 * US)
    assert r.straggler == 1 and r.straggler_share_pct == 100.0
    assert r.overlap == ()  # no NCCL time to overlap


def test_a_rank_that_waits_for_another_is_told_so_not_gpu_jitter(tmp_path):
    """Rank 0 of the training run diagnosed alone: at 11 of its 100 steps its all-reduce
    kernel waits 3 ms on the GPU for rank 1 (3.1 ms against 100 us). Its own kernel time
    grew only there (the 10 gemms take 20 us each in every step), so the growth is a wait
    for another rank, and the jitter check leaves the NCCL kernel out."""
    b = TraceBuilder(pid=600)
    b.session_start(UTC0)
    stalled = tuple(range(5, 100, 9))
    for rank in (0, 1):
        _training_rank(b, rank, stalled, pid=600 + rank, device=rank)
    path = b.write(tmp_path / "job.sqlite")
    from nsysdiag.diagnosis.engine import diagnose
    from nsysdiag.report import Report

    with Report(path, cache=False, pid=600) as rep:
        d = diagnose(rep)
    w = d.analyses.workload
    # the 10 slowest steps are stalled ones: 3.1 ms in the all-reduce; the median band's 100 us
    assert (w.slow_collective_ns, w.median_collective_ns) == (3.1 * MS, 100 * US)
    assert (w.slow_kernel_ns, w.median_kernel_ns) == (3.3 * MS, 300 * US)
    assert w.collective_share == 1.0
    assert (d.verdict.layer, d.verdict.mechanism.value) == ("gpu", "collective_wait")
    assert "nsysdiag ranks" in d.verdict.mechanism.action
    titles = [f.title for f in d.findings if f.check == "D1"]
    assert "Kernel durations are stable" in titles  # the gemms; the all-reduce left out
    assert "More work or slower work: the collectives waited longer for another rank" \
        in titles
    (work,) = [f for f in d.findings if f.title.startswith("More work or slower work")]
    assert ("NCCL collective time per unit 3.1 ms in the slow units vs 100 us in the median "
            "band: 100% of the growth of own kernel time") in work.evidence
