"""Every threshold and rule of the method, in one frozen object.

The analyses read the figures they judge with (a gap is "normal" below
``gap_normal_ns``), the diagnosis reads the rest (a tail is abnormal above
``tail_ratio``); both take a :class:`Settings` and nothing else sets a threshold. Times are
nanoseconds (``_ns``), shares percent (``_pct``), sizes bytes (``_bytes``); a ratio has no
unit. The command line's options map onto these fields (``--normal-threshold-us 5`` sets
``gap_normal_ns = 5000``; the microseconds are converted once, where the option is read).
``docs/diagnosis.md`` explains each rule. A :class:`Recording` view (:func:`recording`) is
a ``Settings`` that notes which fields are read: the results cache keys an analysis'
result by the fields its run read (``analyses/results.py``).

Examples
--------
>>> from nsysdiag.settings import Settings
>>> s = Settings(gap_p99_ns=50_000)
>>> s.gap_p99_ns, s.gap_normal_ns
(50000, 5000)
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import UsageError


def _rule(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class Settings:
    """Thresholds and rules of the diagnosis chain (``docs/diagnosis.md``).

    Each field's documentation (its unit included) is in ``dataclasses.fields(Settings)``
    metadata ``doc``; :func:`describe` lists them.
    """

    # -- step A: is the tail abnormal? ------------------------------------------------------
    tail_ratio: float = _rule(2.0, "P99/P50 of the unit's latency above which the tail is "
                                   "abnormal (ratio)")
    elevated_ratio: float = _rule(1.3, "P99/P50 above which the tail is elevated: a cause is "
                                       "named only when two kinds of evidence agree (ratio)")
    tail_pct: float = _rule(1.0, "the slowest percent of units compared with the median band "
                                 "(45th-55th percentile), % in (0, 50]")
    range_min_instances: int = _rule(20, "instances an NVTX range name needs to be chosen as "
                                         "the unit automatically")
    unit_min_median_ns: int = _rule(1_000, "an NVTX range whose median duration is below this "
                                           "is an operation, not a unit of work, ns")
    warmup_ratio: float = _rule(10.0, "a leading unit longer than this multiple of the "
                                      "median is warm-up (ratio)")
    keep_warmup: bool = _rule(False, "keep the warm-up units (module loading, handle "
                                     "creation, JIT, first allocations, a slow start) in the "
                                     "tail figures (true/false)")
    seed: int = _rule(0, "seed of the tail-shape classifier's random generator")
    min_units: int = _rule(50, "units the tail figures must rest on for a verdict (and the "
                               "tail-shape classifier for a shape; at least 10); fewer give "
                               "the verdict 'insufficient'")
    lone_outlier_ratio: float = _rule(
        10.0, "the slowest unit is a lone outlier when it lasts more than this multiple of "
              "the second slowest: it is reported alone and the slow-unit comparison (the "
              "tail attribution) does not count (ratio)")
    # -- the capture ---------------------------------------------------------------------------
    incomplete_pct: float = _rule(
        1.0, "share of launch calls without kernel records (or of kernels without launch "
             "calls) from which the capture is incomplete and the verdict says so, %")
    # -- the verdict -------------------------------------------------------------------------
    min_score: float = _rule(0.35, "score (0-1) a layer needs to be named for an abnormal tail")
    corroborate_attribution: float = _rule(
        0.4, "share (0-1) of the tail's extra latency the layer must explain for an elevated "
             "tail to get a cause")
    corroborate_check: float = _rule(
        0.5, "check score (0-1) the same layer needs for an elevated tail to get a cause")
    # -- the verdict's confidence ------------------------------------------------------------
    score_attribution_weight: float = _rule(
        0.5, "weight of a layer's share (0-1) of the tail's extra latency in its score")
    score_check_weight: float = _rule(
        0.3, "weight of the layer's checks' score (0-1) in its score")
    score_shape_weight: float = _rule(
        0.2, "weight of the tail shape's vote (its confidence, 0-1) in the score of the layer "
             "the shape points at")
    confidence_base: float = _rule(
        0.45, "a named cause's confidence before its evidence: base + span x score x "
              "min(1, margin_floor + margin_gain x the score's margin over the runner-up) "
              "(0-1)")
    confidence_span: float = _rule(
        0.5, "what the score and its margin add to confidence_base at most (0-1)")
    confidence_margin_floor: float = _rule(
        0.3, "the margin term's value at a margin of 0: a layer that wins by nothing keeps "
             "this part of its score (0-1)")
    confidence_margin_gain: float = _rule(
        2.0, "the margin term's slope: a margin of (1 - margin_floor) / gain gives the "
             "score in full (ratio)")
    shape_outvoted_factor: float = _rule(
        0.9, "confidence factor when the shape points elsewhere but what grew decides (the "
             "layer explains decisive_share of the tail's extra latency) (ratio)")
    shape_disagrees_factor: float = _rule(
        0.8, "confidence factor when the shape points elsewhere and what grew does not "
             "decide (ratio)")
    attribution_leans_share: float = _rule(
        0.3, "share (0-1) of the tail's extra latency from which another layer than the "
             "named one leads the attribution, lowering confidence by "
             "attribution_leans_factor")
    attribution_leans_factor: float = _rule(
        0.85, "confidence factor when the attribution leans to another layer (ratio)")
    elevated_factor: float = _rule(
        0.85, "confidence factor of a cause named for an elevated (not abnormal) tail "
              "(ratio)")
    vetoed_factor: float = _rule(
        0.85, "confidence factor when a higher-scoring layer was passed over because its "
              "own measurements speak against it (ratio)")
    signature_base: float = _rule(
        0.55, "confidence of a mechanism whose own signature was measured, at a strength of "
              "0: base + signature_span x strength (0-1)")
    signature_span: float = _rule(
        0.4, "what a signature's strength (0-1) adds to signature_base at most (0-1)")
    decisive_share: float = _rule(
        0.6, "share (0-1) of the tail's extra latency from which what grew decides the "
             "layer whatever the shape says")
    normal_healthy_confidence: float = _rule(
        0.9, "confidence of healthy for a normal tail (a tight shape raises it to its own "
             "confidence, up to confidence_max) (0-1)")
    elevated_healthy_confidence: float = _rule(
        0.8, "confidence of healthy for an elevated tail no evidence corroborates a cause "
             "of (0-1)")
    confidence_max: float = _rule(0.97, "the most confidence a verdict states (0-1)")
    incomplete_confidence: float = _rule(
        0.5, "the most confidence a named cause keeps when the capture is incomplete (0-1)")
    culprit_share: float = _rule(
        0.1, "share (0-1) of its side's growth in the tail from which a component runs the "
             "analyses that name its culprit (interference for other GPU work, workload)")
    support_min_units: int = _rule(
        5, "slow units standing out that a named cause must rest on to be confident: one that "
           "fewer carry is a few units' cause, at most unsettled_confidence (units)")
    unsettled_confidence: float = _rule(
        0.55, "the most confidence of a verdict the evidence does not settle (a cause resting "
              "on fewer than support_min_units units; healthy while the slow units' growth "
              "has a host layout short of a signature): under 0.6, not confident (0-1)")
    support_units: int = _rule(
        20, "slowest units judged one by one for the verdict's support when the slowest "
            "tenth holds as many (units)")
    # -- the checks' scores ------------------------------------------------------------------
    signature_score_floor: float = _rule(
        0.5, "score (0-1) of a layer whose mechanism's own signature was measured, at a "
             "strength of 0 (C3's host layout, other GPU work in the slow units, transfer "
             "volume): floor + (1 - floor) x the signature's strength")
    warning_score: float = _rule(
        0.5, "check score (0-1) from which a check's finding is a warning, not information "
             "(D1 jitter, E1 transfers)")
    finding_score: float = _rule(
        0.3, "check score (0-1) from which D1's jitter scores the GPU and E1's title names "
             "what it found wrong")
    launch_shallow_score: float = _rule(
        0.7, "C1's cpu score for launch-bound gaps past gap_p99_ns with the dispatch queue "
             "nearly empty (the host starves the GPU) (0-1)")
    launch_deep_score: float = _rule(
        0.4, "C1's cpu score for the same gaps with the queue not drained (0-1)")
    uvm_score_offset: float = _rule(
        0.3, "the pcie score of unified-memory migrations at least uvm_pct of the time: "
             "their share (0-1) plus this (0-1)")
    pageable_slow_score: float = _rule(
        0.5, "E1's pcie score when pageable copies dominate the copy time and run slower than "
             "pinned ones would (0-1; copies slow against the copy model as well: "
             "pageable_slow_low_link_score)")
    pageable_slow_low_link_score: float = _rule(
        0.6, "E1's pcie score when pageable copies dominate, run slower than pinned ones "
             "would and are slow against the copy model (0-1)")
    pageable_minor_score: float = _rule(
        0.3, "E1's pcie score when some pageable copies run slower than pinned ones would, "
             "but do not dominate the copy time (0-1)")
    low_link_score: float = _rule(
        0.5, "E1's pcie score when copies are slow against the copy model (0-1)")
    # -- C3: the host side's signature -------------------------------------------------------
    host_signature_share: float = _rule(
        0.6, "share (0-1) of the slow units' extra latency that one long host stretch, or "
             "the wait before their work began, must hold to name a host stall or queueing")
    host_signature_ratio: float = _rule(
        3.0, "the slow units' longest stretch without a CUDA call over the median band's "
             "from which it is a stall, not natural jitter (ratio)")
    # -- C1: launch gaps and the dispatch queue ----------------------------------------------
    gap_normal_ns: int = _rule(5_000, "a launch gap above this is not normal, ns")
    gap_p99_ns: int = _rule(20_000, "a P99 launch gap above this signals a CPU-side "
                                    "scheduling bottleneck, ns")
    launch_min_gaps: int = _rule(
        100, "launch-bound gaps needed for their P99 to stand as launch overhead (with fewer, "
             "the P99 is the largest of a few one-off launches) (gaps)")
    launch_cost_pct: float = _rule(
        5.0, "share of the units' time (without units, of the GPU work's span) the GPU must "
             "lose in launch-bound gaps for launch overhead to be a warning; below, a P99 "
             "past gap_p99_ns is reported as not the bottleneck, %")
    prelaunched_idle_pct: float = _rule(
        10.0, "share of the idle time in gaps before already launched kernels from which "
              "launch gaps says they are not launch overhead, %")
    idle_cause_max_kernels: int = _rule(
        100_000_000, "kernels up to which the diagnosis splits GPU idle time by cause "
                     "(gpu_idle, which holds a row per gap in memory); above, check C1 reads "
                     "the method's figure over all gaps, and nsysdiag gpu-idle makes the "
                     "split on request")
    idle_cause_pct: float = _rule(
        50.0, "share of a gap before a kernel that copies, other processes' work or the "
              "time between units must cover to be its cause (gpu_idle), %")
    shallow_queue_depth: int = _rule(1, "a dispatch-queue depth at launch at or below this is "
                                        "a near-empty queue: launch latency judges its P90, "
                                        "check C1 its P50 (kernels)")
    deep_queue_depth: int = _rule(4, "a P50 (or P99) depth at launch at or above this is a "
                                     "queue that stays deep (backs up at times) (kernels)")
    # -- D1: kernel duration jitter ------------------------------------------------------------
    slow_ratio: float = _rule(1.5, "a kernel launch is slow above this multiple of its "
                                   "name's median duration (ratio)")
    jitter_top: int = _rule(10, "kernel names examined for jitter, by total GPU time")
    slow_full_score_pct: float = _rule(
        10.0, "time-weighted share of slow launches that scores the GPU layer 1, %")
    # -- the culprit: other GPU work by name, more work vs slower work ---------------------------
    culprit_min_units: int = _rule(
        10, "slowest units compared with the median band to name other GPU work and to tell "
            "more work from slower work: the tail widened to this many when the slowest "
            "tenth holds as many (units)")
    workload_ratio: float = _rule(
        1.5, "the slowest units do more work when they launch at least this multiple of the "
             "median band's kernels (or kernel time at its per-kernel speed) (ratio)")
    work_explains: float = _rule(
        0.5, "share (0-1) of the slowest units' extra latency that their extra work must "
             "explain (extra kernels at the latency-per-kernel slope over every unit, extra "
             "own copy time, or the latency expected at the slow units' sizes) for the tail "
             "to be named after the work")
    collective_share: float = _rule(
        0.5, "share (0-1) of the growth of the slowest units' own kernel time that must be "
             "NCCL collective time for GPU growth to be named waiting at collectives for "
             "another rank, not the kernels running slower")
    size_min_rho: float = _rule(
        0.5, "rank correlation (Spearman) of latency with a unit's bytes, kernels or launch "
             "calls from which latency follows that measure of size (workload)")
    new_size_share: float = _rule(
        0.5, "share (0-1) of the slowest units that must be the first of their size (no "
             "earlier unit had it) for the tail to be one of new sizes")
    new_size_lift: float = _rule(
        2.0, "the slowest units' share of new sizes must be at least this multiple of all "
             "units' share (new sizes are no accident among them) (ratio)")
    new_size_min_ratio: float = _rule(
        2.0, "units of a new size must take at least this multiple of the latency expected "
             "at their size, against the units of a size seen before, for a cost paid once "
             "per size (ratio)")
    # -- E1: transfers ---------------------------------------------------------------------
    large_copy_bytes: int = _rule(1 << 20, "copies at least this large give the P90 "
                                           "bandwidth compared with the link, bytes")
    low_link_pct: float = _rule(50.0, "copies reaching less than this share of the speed "
                                      "the copy model expects (latency + bytes over the "
                                      "link, by memory kind) are slow, %")
    contention_pct: float = _rule(10.0, "share of a direction's copy time overlapping other "
                                        "copies of that direction from which it is reported, %")
    contention_full_score_pct: float = _rule(
        40.0, "share of copy time in same-direction contention that scores PCIe 1, %")
    pageable_dominant_pct: float = _rule(
        50.0, "share of copy time moving pageable host memory from which pageable copies "
              "dominate (CUDA calls' growth then counts as transfer time), %")
    copy_latency_ns: int = _rule(2_000, "fixed cost of a pinned host copy on the GPU: the "
                                        "expected time of a copy is this plus its bytes "
                                        "over the link's bandwidth, ns")
    pageable_copy_latency_ns: int = _rule(10_000, "fixed cost of a pageable host copy "
                                                  "(staged by the driver), ns")
    pageable_link_pct: float = _rule(50.0, "share of the link a pageable copy is expected "
                                           "to reach, %")
    managed_copy_latency_ns: int = _rule(20_000, "fixed cost of a unified-memory migration "
                                                 "(page faults), ns")
    managed_link_pct: float = _rule(50.0, "share of the link a unified-memory migration "
                                          "is expected to reach, %")
    plausible_margin_pct: float = _rule(
        10.0, "a copy or memset faster than the link (host copies) or the GPU's memory "
              "bandwidth (on the device) by more than this is suspect data, %")
    min_finding_copies: int = _rule(3, "copies a device and direction needs to be judged")
    uvm_pct: float = _rule(10.0, "share of the units' time (without units: of the GPU work's "
                                 "span) spent in unified-memory migrations, or by the GPU "
                                 "resolving page faults, from which they are a warning "
                                 "(below: information), %")
    # -- overlap and CUDA Graphs --------------------------------------------------------------
    sync_copy_pct: float = _rule(10.0, "share of copy time from synchronous copy APIs from "
                                       "which it is reported, %")
    low_overlap_pct: float = _rule(10.0, "copy time overlapping kernels below this share is "
                                         "reported, %")
    graphs_outside_pct: float = _rule(10.0, "kernel GPU time outside CUDA graphs at or above "
                                            "this share is reported (when graphs are in use), %")

    # -- ranks: collectives across the exports of one run --------------------------------------
    rank_clock_tolerance_ns: int = _rule(20_000, "exports placed by their session starts whose "
                                                 "collectives' ends disagree by more than this "
                                                 "are placed by those ends instead, ns")
    straggler_share_pct: float = _rule(50.0, "a rank is named the straggler when it caused "
                                             "more than this share of the waits at "
                                             "collectives, %")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise UsageError(f"{f.name} must be true or false, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not math.isfinite(value)
            ):
                raise UsageError(f"{f.name} must be a finite number, got {value!r}")
            if value < 0:
                raise UsageError(f"{f.name} must be a number >= 0, got {value!r}")
            if f.type in ("int", int) and not isinstance(value, int):
                raise UsageError(f"{f.name} must be an integer, got {value!r}")
        if self.min_units < 10:
            raise UsageError(f"min_units must be at least 10, got {self.min_units!r}")

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes`` (validated)."""
        return dataclasses.replace(self, **changes)

    def pick(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The fields ``names`` as a dict (what an analysis reads: its results cache key)."""
        return {n: getattr(self, n) for n in names}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Reads:
    """The fields of one :class:`Settings` that a computation read, collected by the
    :class:`Recording` views it was given (:func:`recording`). Thread-safe: a view may be
    read from any thread (an analysis' worker threads, forked cursors)."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def add(self, names: Iterable[str]) -> None:
        with self._lock:
            self._names.update(names)

    @property
    def names(self) -> tuple[str, ...]:
        """The fields read so far, sorted."""
        with self._lock:
            return tuple(sorted(self._names))


class _Read:
    """A field of a :class:`Recording` view: its first read notes the name in the view's
    :class:`Reads` and keeps the value in the instance, which later reads find first (this
    descriptor defines no ``__set__``), so a field costs one call however often it is read.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, view: Recording | None, owner: type | None = None) -> Any:
        if view is None:
            return self
        state = view.__dict__
        value = getattr(state["_source"], self.name)
        if self.name not in state["_fixed"]:
            state["_reads"].add((self.name,))
        state[self.name] = value
        return value


class Recording(Settings):
    """A view of a :class:`Settings` that notes which fields are read (:func:`recording`).

    It is a ``Settings`` (same fields, values and methods); ``replace`` gives a view that
    records into the same :class:`Reads`, except the fields it changed (their values come
    from the caller, not from the settings recorded). Whatever reads every field
    (``pick``, ``to_dict``, ``dataclasses.replace``, equality, a copy or a pickle) records
    them all: the record may hold more than needed, never less. ``Recording(...)`` makes a
    plain ``Settings``, so ``dataclasses.replace`` of a view gives one too.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Settings:  # type: ignore[misc]
        return Settings(*args, **kwargs)

    def replace(self, **changes: Any) -> Settings:
        state = self.__dict__
        return _view(state["_source"].replace(**changes), state["_reads"],
                     state["_fixed"] | changes.keys())

    def __reduce_ex__(self, protocol: Any) -> Any:
        # a copy or a pickle is a plain Settings read in full
        self.__dict__["_reads"].add(FIELDS - self.__dict__["_fixed"])
        return _unpickle, (self.__dict__["_source"].to_dict(),)

    def __repr__(self) -> str:
        self.__dict__["_reads"].add(FIELDS - self.__dict__["_fixed"])
        return repr(self.__dict__["_source"])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Settings):
            return self.to_dict() == other.to_dict()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self.to_dict().values()))


#: the names of the fields of :class:`Settings`
FIELDS = frozenset(f.name for f in dataclasses.fields(Settings))
for _name in FIELDS:
    setattr(Recording, _name, _Read(_name))


def _unpickle(values: dict[str, Any]) -> Settings:
    return Settings(**values)


def _view(source: Settings, reads: Reads, fixed: frozenset[str] | set[str]) -> Recording:
    view = object.__new__(Recording)
    view.__dict__.update(_source=source, _reads=reads, _fixed=frozenset(fixed))
    return view


def recording(settings: Settings, reads: Reads) -> Recording:
    """A view of ``settings`` whose field reads are noted in ``reads``.

    Given a view, the view of its plain values (its own record is not told).
    """
    return _view(plain(settings), reads, ())


def plain(settings: Settings) -> Settings:
    """The plain ``Settings`` behind a view (``settings`` itself when it is one): reading it
    records nothing."""
    return settings.__dict__["_source"] if isinstance(settings, Recording) else settings


def note_reads(settings: Settings, names: Iterable[str]) -> None:
    """Record in ``settings``' view (when it is one) that ``names`` were read from it: what
    a computation given the view read through another view of the same values (an analysis
    that another one runs), except the fields the view was given by ``replace``."""
    if isinstance(settings, Recording):
        settings.__dict__["_reads"].add(set(names) - settings.__dict__["_fixed"])


def us_to_ns(value: float, name: str) -> int:
    """A threshold given in microseconds (a command-line option) in whole nanoseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise UsageError(f"{name} must be a number >= 0, got {value!r}")
    return round(value * 1000)


def describe() -> list[tuple[str, Any, str]]:
    """(name, default, documentation) of every setting, in order."""
    return [(f.name, f.default, f.metadata["doc"]) for f in dataclasses.fields(Settings)]


#: the method's defaults
DEFAULTS = Settings()

__all__ = ["DEFAULTS", "FIELDS", "Reads", "Recording", "Settings", "describe", "note_reads",
           "plain", "recording", "us_to_ns"]
