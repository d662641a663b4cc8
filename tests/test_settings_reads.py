"""The results cache keys a result by the settings its run read (``settings.recording``,
``analyses/results.py``): the fields read are recorded as the analysis runs, with those
read by the analyses it runs in turn, and a stored result is reused only where they hold
the same values."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import threading
from pathlib import Path

import pytest

import nsysdiag
from nsysdiag.analyses import ANALYSES, module
from nsysdiag.analyses import results as results_mod
from nsysdiag.settings import (
    DEFAULTS,
    FIELDS,
    Reads,
    Recording,
    Settings,
    note_reads,
    plain,
    recording,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpu-jitter.sqlite"
T0 = 100_000  # away from 0 (CUPTI's "not collected")


# -- the recording view -------------------------------------------------------------------
def test_a_view_records_the_fields_read_once_each():
    reads = Reads()
    view = recording(Settings(seed=5), reads)
    assert isinstance(view, Settings) and reads.names == ()
    assert (view.seed, view.seed, view.tail_ratio) == (5, 5, 2.0)
    assert reads.names == ("seed", "tail_ratio")
    assert view.pick(("gap_p99_ns",)) == {"gap_p99_ns": 20_000}
    assert reads.names == ("gap_p99_ns", "seed", "tail_ratio")
    assert plain(view) == Settings(seed=5) and plain(view) is not view
    assert view == Settings(seed=5) and view != DEFAULTS


def test_replace_records_into_the_same_record_but_not_the_fields_it_changed():
    reads = Reads()
    view = recording(DEFAULTS, reads)
    derived = view.replace(gap_normal_ns=7)
    assert isinstance(derived, Recording)
    assert (derived.gap_normal_ns, derived.gap_p99_ns) == (7, 20_000)
    # gap_normal_ns came from the caller, not from the settings recorded
    assert reads.names == ("gap_p99_ns",)
    # what another analysis given the derived view read counts, but for the changed field
    note_reads(derived, ("gap_normal_ns", "slow_ratio"))
    assert reads.names == ("gap_p99_ns", "slow_ratio")
    with pytest.raises(nsysdiag.UsageError):
        view.replace(min_units=3)  # still validated


def test_whatever_reads_every_field_records_them_all():
    for use in (lambda v: dataclasses.replace(v, seed=3), copy.copy, copy.deepcopy,
                lambda v: pickle.loads(pickle.dumps(v)), lambda v: v.to_dict(), repr, hash):
        reads = Reads()
        out = use(recording(Settings(seed=4), reads))
        assert set(reads.names) >= FIELDS - {"seed"}, use
        if isinstance(out, Settings):
            assert type(out) is Settings and out == Settings(seed=out.seed)


def test_reads_from_many_threads_are_all_recorded():
    names = sorted(FIELDS)
    for _ in range(20):
        reads = Reads()
        view = recording(DEFAULTS, reads)
        start = threading.Barrier(8)

        def read(i, view=view, start=start):
            start.wait()
            for name in names[i::8] + names:
                getattr(view, name)

        threads = [threading.Thread(target=read, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert reads.names == tuple(names)


# -- a hand-built trace -------------------------------------------------------------------
def trace(builder, tmp_path: Path) -> Path:
    """30 launches of kernel k on stream 7, one every 10 us, 2 us each but the last
    (6 us: 3x the 2 us median, slow above 1.5x, not above 3x); four 1 MiB host-to-device
    copies on stream 8 (no copy API call: none is synchronous), each 4-5 us after a
    kernel's start, so no copy overlaps a kernel: overlap 0% of copy time.

    By hand, overlap reads low_overlap_pct alone (two streams, so not the single-stream
    finding; 0% < 10% so the low-overlap finding; no synchronous copy, so sync_copy_pct
    is never compared). Jitter reads jitter_top and slow_ratio, and overlap's fields
    through the overlap analysis it runs: slow share 1/30 of launches at 1.5x, 0 at 3x.
    """
    b = builder("current")
    for i in range(30):
        start = T0 + i * 10_000
        b.launch(start - 1_000, start - 500, start, start + (6_000 if i == 29 else 2_000),
                 name="k", stream=7)
    for i in range(4):
        start = T0 + i * 10_000 + 4_000
        b.memcpy(start, start + 1_000, 1 << 20, stream=8)
    return b.write(tmp_path / "reads.sqlite")


def fields(rep: nsysdiag.Report, result) -> tuple[str, ...]:
    """The fields recorded with ``result`` (an entry of the report's results)."""
    (found,) = [e.fields for entries in rep.results_memo.values() for e in entries
                if e.result is result]
    return found


def counting(monkeypatch, *names: str) -> dict[str, int]:
    """Count the runs of analyses ``names`` (a cached result is no run)."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        real = module(name).run

        def run(*a, name=name, real=real, **k):
            calls[name] += 1
            return real(*a, **k)

        monkeypatch.setattr(module(name), "run", run)
    return calls


def test_recorded_fields_are_those_read_by_hand(builder, tmp_path):
    path = trace(builder, tmp_path)
    with nsysdiag.open(path, cache=False) as rep:
        over = rep.analysis("overlap")
        jit = rep.analysis("jitter")
        given = rep.analysis("jitter", top=5, slow=2.0)
        assert fields(rep, over) == ("low_overlap_pct",)
        assert len(over.findings) == 1 and "only 0.0% of copy time" in over.findings[0]
        assert fields(rep, jit) == ("jitter_top", "low_overlap_pct", "slow_ratio")
        # options given in place of the settings read none of them
        assert fields(rep, given) == ("low_overlap_pct",)
        gaps = rep.analysis("launch_gaps")
        fixed = rep.analysis("launch_gaps", normal_threshold_us=2.5)
        assert "gap_normal_ns" in fields(rep, gaps)
        # the option replaced gap_normal_ns: its value is in the key as the option
        assert "gap_normal_ns" not in fields(rep, fixed)
        assert set(fields(rep, fixed)) == set(fields(rep, gaps)) - {"gap_normal_ns"}
    assert jit.worst_slow_pct == pytest.approx(100 / 30)


@pytest.mark.parametrize("nested_from", ["fresh", "memory", "disk"])
def test_a_nested_analysis_fields_count_wherever_its_result_comes_from(
        nested_from, builder, tmp_path, monkeypatch):
    path = trace(builder, tmp_path)
    cache = tmp_path / "cache"
    if nested_from == "disk":
        with nsysdiag.open(path, cache_dir=cache) as rep:
            rep.analysis("overlap")
    calls = counting(monkeypatch, "overlap", "jitter")
    with nsysdiag.open(path, cache_dir=cache) as rep:
        if nested_from == "memory":
            rep.analysis("overlap")
        jit = rep.analysis("jitter")
        assert fields(rep, jit) == ("jitter_top", "low_overlap_pct", "slow_ratio")
    assert calls == {"overlap": 1 if nested_from != "disk" else 0, "jitter": 1}


def test_a_setting_read_misses_the_cache_one_not_read_hits_it(builder, tmp_path, monkeypatch):
    path = trace(builder, tmp_path)
    cache = tmp_path / "cache"
    with nsysdiag.open(path, cache_dir=cache) as rep:
        default = rep.analysis("jitter").to_dict()
    calls = counting(monkeypatch, "overlap", "jitter")
    with nsysdiag.open(path, cache_dir=cache) as rep:
        # neither jitter nor overlap reads tail_ratio or gap_normal_ns: read from disk
        other = rep.analysis("jitter", settings=Settings(tail_ratio=3.0, gap_normal_ns=1))
        assert other.to_dict() == default and calls == {"overlap": 0, "jitter": 0}
        # slow_ratio is jitter's own: jitter runs again, overlap's result is reused
        strict = rep.analysis("jitter", settings=Settings(slow_ratio=3.0))
        assert calls == {"overlap": 0, "jitter": 1}
        assert strict.worst_slow_pct == 0.0 and default["summary"]["worst_slow_pct"] > 3.3
        # low_overlap_pct is read only by overlap, which jitter runs: both run again
        rep.analysis("jitter", settings=Settings(low_overlap_pct=0.0))
        assert calls == {"overlap": 1, "jitter": 2}
        assert rep.analysis("overlap", settings=Settings(low_overlap_pct=0.0)).findings == ()
        assert calls == {"overlap": 1, "jitter": 2}
    with nsysdiag.open(path, cache_dir=cache) as rep:
        # each value read has its entry on disk: all three come back without a run
        rep.analysis("jitter", settings=Settings(slow_ratio=3.0, seed=9))
        rep.analysis("jitter", settings=Settings(low_overlap_pct=0.0))
        assert rep.analysis("jitter").to_dict() == default
    assert calls == {"overlap": 1, "jitter": 2}
    stored = list((cache / "views").glob("*/results/jitter-*/fields-*.json"))
    assert len(stored) == 1  # one field list, three entries (one per set of values)
    assert len(list(stored[0].parent.glob("*/result.json"))) == 3


# -- the recorder misses no read ---------------------------------------------------------
def _other(value):
    """Another valid value of a setting: far enough to change any figure that reads it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2 + 1
    return value / 2


@pytest.mark.parametrize("name", ANALYSES)
def test_settings_a_run_did_not_read_do_not_change_its_result(name, tmp_path, monkeypatch):
    # Every setting the run did not read, changed at once: the cached result is reused,
    # and it equals a fresh run's under the changed settings, which reads the same fields.
    # A read the recorder missed would make the two differ (or the fields).
    with nsysdiag.open(EXAMPLE, cache_dir=tmp_path) as rep:
        first = rep.analysis(name)
        read = fields(rep, first)
    changed = Settings(**{f: _other(v) for f, v in DEFAULTS.to_dict().items() if f not in read})
    assert all(getattr(changed, f) == getattr(DEFAULTS, f) for f in read)
    with nsysdiag.open(EXAMPLE, cache=False) as rep:
        fresh = rep.analysis(name, settings=changed)
        assert fields(rep, fresh) == read
    calls = counting(monkeypatch, name)
    with nsysdiag.open(EXAMPLE, cache_dir=tmp_path) as rep:
        cached = rep.analysis(name, settings=changed)
    assert calls == {name: 0}
    assert cached.to_dict() == fresh.to_dict() == first.to_dict()
    assert results_mod._same(cached.summary, fresh.summary)
    for table in fresh.tables:
        assert cached.tables[table].equals(fresh.tables[table]), table


def test_what_a_nested_analysis_read_before_it_failed_counts(builder, tmp_path, monkeypatch):
    # a caller that goes on after a nested analysis' error depends on what led to it
    path = trace(builder, tmp_path)
    real = module("overlap").run

    def failing(report, *, settings):
        if settings.sync_copy_pct >= 0:
            raise nsysdiag.InputError("no")

    reads = Reads()
    with nsysdiag.open(path, cache=False) as rep:
        monkeypatch.setattr(module("overlap"), "run", failing)
        with pytest.raises(nsysdiag.InputError):
            rep.analysis("overlap", settings=recording(DEFAULTS, reads))
        assert reads.names == ("sync_copy_pct",)
        assert not any(rep.results_memo.values())  # nothing kept
        monkeypatch.setattr(module("overlap"), "run", real)
        rep.analysis("overlap", settings=recording(DEFAULTS, reads))
    assert reads.names == ("low_overlap_pct", "sync_copy_pct")
