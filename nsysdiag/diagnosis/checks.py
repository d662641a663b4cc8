"""The checks of the diagnosis chain (C1, C3, D1/D2, E1/E2, CUDA Graphs) as findings and scores.

Check C2 (where CPU threads blocked) is the rule the os_blocking analysis declares
(``rule`` in its module, found by ``rules.py``): a check that reads one analysis' result
and yields findings only can live with its analysis.

Each check reads the measured evidence of the analyses and yields

* findings (layer, severity, title, evidence with numbers and units, fix), and
* a score in [0, 1] for the layer it examines: how strongly the evidence *specific to that
  layer* says it is a problem (cpu: starved dispatch queue and launch gaps; gpu: kernels of
  the same name running intermittently slower, GPU time taken by other work; pcie:
  same-direction copy contention, pageable copies, bandwidth far below the link).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..analyses.gpu_idle import MEANING as IDLE_MEANING
from ..analyses.gpu_idle import GpuIdleResult, breakdown
from ..analyses.graphs import GraphsResult
from ..analyses.host_stall import HostStall, Layout
from ..analyses.interference import InterferenceResult
from ..analyses.ranges import Component, ComponentGrowth, RangesResult
from ..analyses.transfers import DIRECTIONS, TransfersResult
from ..analyses.workload import (
    WorkloadResult,
    is_new_size_tail,
    is_size_tail,
    is_transfer_volume_tail,
    is_workload_tail,
)
from ..formatting import fmt_ns, fmt_ratio
from ..layers import CAUSE_LAYERS, Layer
from .model import Analyses, Finding, Mechanism

if TYPE_CHECKING:
    from ..settings import Settings
    from .model import TailSummary


def component_layer(component: Component | str) -> Layer | None:
    """Which layer a tail-attribution component belongs to (None: waiting, not a cause).

    Time in synchronization calls and GPU idle time are consequences (the host waits for
    the GPU, or the GPU waits for the host) and are not counted for any layer. The layer
    is data of the component (:class:`~nsysdiag.analyses.ranges.Component`).
    """
    return Component(component).layer


class HostSignature(NamedTuple):
    """A host-side mechanism's signature (:meth:`Evidence.host_signature`)."""

    mechanism: Mechanism
    stall: HostStall  #: the layout measured
    share: float  #: the share (0-1) of the slow units' growth the layout holds
    units: int | None  #: None: read in their means; else how many show it on their own


class Evidence:
    """The analyses' results, read as the method's checks: measurements in, findings and
    scores out. It runs no SQL and no analysis (the engine measures first); it reads each
    result by type (``self.results.transfers``: the result when it measured, else None)."""

    def __init__(
        self,
        results: Analyses,
        settings: Settings,
        graphs_in_use: bool,
        *,
        host_stall: HostStall | None = None,
        unit_time_ns: float | None = None,
        lone_outlier: bool = False,
    ):
        self.results = results
        self.settings = settings
        self.graphs_in_use = graphs_in_use
        #: the units' summed duration (shares of unit time), ns
        self.unit_time_ns = unit_time_ns
        #: one extreme unit would carry the slow-unit comparison: the attribution is not used
        self.lone_outlier = lone_outlier
        self._scores: dict[Layer, float] = {layer: 0.0 for layer in CAUSE_LAYERS}
        self._reasons: dict[Layer, list[str]] = {layer: [] for layer in CAUSE_LAYERS}
        #: what check E1 measured wrong (None: it did not measure)
        self.pcie_faults: list[str] | None = None
        #: how the slow units' extra host time is laid out (None: not measured, no
        #: attribution or a lone outlier)
        self._host_stall = host_stall
        #: layer -> strength (0-1) of a mechanism's own signature measured for it (C3's
        #: share of the growth, the other work's share of slow units)
        self.signatures: dict[Layer, float] = {}

    # -- scores -------------------------------------------------------------------------
    def _score(self, layer: Layer, value: float, reason: str) -> None:
        if value > self._scores[layer]:
            self._scores[layer] = min(1.0, value)
        if value > 0 and reason:
            self._reasons[layer].append(reason)

    def _signature_score(self, strength: float) -> float:
        """The score of a layer whose mechanism's own signature was measured at
        ``strength`` (0-1): ``signature_score_floor`` up to 1."""
        floor = self.settings.signature_score_floor
        return floor + (1.0 - floor) * strength

    def check_score(self, layer: Layer) -> float:
        return self._scores.get(layer, 0.0)

    def reason(self, layer: Layer) -> str:
        parts = self._reasons.get(layer) or []
        attr = self.attribution_detail(layer)
        if attr:
            parts = [attr, *parts]
        return "; ".join(parts[:3]) if parts else "the evidence is weak"

    def unit_reason(self) -> str:
        r = self.results.get("ranges")  # its message whatever its status
        return r.message if r is not None else "the ranges analysis did not run"

    def time_base(self) -> tuple[float | None, str]:
        """(ns, what it is) that a cost is a share of: the units' summed time; without
        units, the span of the GPU work (None when neither was measured)."""
        if self.unit_time_ns:
            return self.unit_time_ns, "the units' time"
        o = self.results.overlap
        return (o.wall_span_ns if o is not None else None), "the GPU work's span"

    def attribution(self) -> tuple[ComponentGrowth, ...]:
        """The tail attribution's components (largest growth first); empty without it, and
        empty when a lone outlier unit would carry it."""
        r = self.results.ranges
        return r.attribution if r is not None and not self.lone_outlier else ()

    def attribution_shares(self) -> dict[Layer, float]:
        """Layer -> share of the tail's extra latency explained by that layer.

        The ranges analysis decomposes each unit twice, on the CPU side (launch, memcpy,
        sync and other CUDA calls, time outside CUDA) and on the GPU side (own kernels,
        own copies, other work, idle), and each side sums to the unit's duration. The
        waiting component of each side says which side the extra latency belongs to: GPU
        idle time means the GPU waited for the host (CPU-side cause), time in sync calls
        means the host waited for the GPU. So the GPU-idle share of the GPU side's growth
        weighs the CPU side's causes and the rest weighs the GPU side's; within a side,
        each cause counts by its share of that side's growth (``share_of_growth``: of the
        side's positive deltas, so never above 1 when other components shrank).
        """
        sides: dict[str, dict[str, float]] = {"cpu": {}, "gpu": {}}
        idle = 0.0
        pageable = self.pageable_dominant()
        queued = self.queued_behind_own_work()
        for g in self.attribution():
            share = g.share_of_growth
            comp = g.component
            if not share or share <= 0:
                continue
            if comp.waits_for_host or (queued and comp is Component.GPU_OTHER):
                idle += share
                continue
            layer = comp.layer
            if pageable and layer == Layer.CPU and comp.cuda_call:
                # pageable copies are staged by the driver, which blocks CUDA calls of every
                # kind while the link is busy: their growth is transfer time
                layer = Layer.PCIE
            if layer:
                sides[comp.side][layer] = sides[comp.side].get(layer, 0.0) + share
        weight = {"cpu": min(1.0, idle), "gpu": max(0.0, 1.0 - min(1.0, idle))}
        shares: dict[Layer, float] = {}
        for side, layers in sides.items():
            total = sum(layers.values())
            for layer, v in layers.items():
                shares[layer] = shares.get(layer, 0.0) + weight[side] * v / total
        return {k: round(min(1.0, v), 4) for k, v in shares.items()}

    def more_work(self) -> bool:
        """The slow units do more work (:func:`is_workload_tail`) of their own: not when
        they queued behind their own earlier work (C3's queueing signature), as a queued
        unit's window holds the kernels of the work it waited for."""
        w = self.results.workload
        return (w is not None and is_workload_tail(w, self.settings)
                and not self.queued_behind_own_work())

    def queued_behind_own_work(self) -> bool:
        """The slow units queued (check C3's signature: their range opened while the thread
        was busy with earlier units) and the GPU work that grew in their window is the
        program's own: the work they queued behind, a consequence of the wait rather than
        a GPU cause, so its growth weighs the CPU side as GPU idle time does."""
        found = self.host_signature()
        if found is None or found[0] is not Mechanism.QUEUEING:
            return False
        i = self.results.interference
        return i is None or bool(i.own_work)

    def attribution_detail(self, layer: Layer) -> str:
        best = None
        for g in self.attribution():
            if g.component.layer != layer:
                continue
            delta = g.delta_ns or 0.0
            if delta > 0 and (best is None or delta > best[1]):
                best = (g.component, delta, g.share_of_growth or 0.0)
        if best is None:
            return ""
        return (
            f"the slowest units spend {fmt_ns(best[1])} more in "
            f"{best[0].value.replace('_', ' ')} than the median ({best[2]:.0%} of the "
            f"{best[0].side.upper()} side's growth)"
        )

    # -- checks -------------------------------------------------------------------------
    def run_all(self) -> list[Finding]:
        out: list[Finding] = []
        for check in (
            self.capture,
            self.c1_launch,
            self.gpu_idle,
            self.c3_host_stall,
            self.d1_jitter,
            self.d2_metrics,
            self.e1_transfers,
            self.unified_memory,
            self.overlap,
            self.graphs,
            self.interference,
            self.other_work_score,
            self.workload,
        ):
            out.extend(check())
        return out

    def capture(self) -> list[Finding]:
        """What the capture lost or lacks (check ``capture``): critical when it undermines
        the verdict (NVTX only, kernel records or launch calls missing, dropped events)."""
        c = self.results.capture
        if c is None or not c.findings:
            return []
        undermines = c.incomplete or c.nvtx_only
        fix = ("Capture again with nsys profile --trace=cuda,nvtx, and let the captured "
               "work finish (synchronize before the program or the capture range ends).")
        return [Finding(Layer.INFO, "critical" if undermines else "info",
                        "The capture is incomplete" if undermines else "Capture notes",
                        tuple(c.findings), fix if undermines else "", check="capture",
                        weight=1.0 if undermines else 0.01)]

    def unified_memory(self) -> list[Finding]:
        """Unified memory (check E1, managed memory): the migrations (bytes, count, time)
        and the page faults (per unit, per process, GPU time resolving them), with their
        shares of the units' time; a warning when either share reaches
        ``settings.uvm_pct``."""
        t = self.results.transfers
        if t is None or not (t.uvm_copies or t.managed_copies or t.um_faults):
            return []
        whole, of = self.time_base()
        share = 100.0 * t.uvm_time_ns / whole if whole and t.uvm_time_ns else None
        fault_share = (100.0 * t.um_gpu_fault_time_ns / whole
                       if whole and t.um_gpu_fault_time_ns else None)
        ev = []
        if t.uvm_copies:
            ev.append(f"{t.uvm_copies} unified-memory migrations moved "
                      f"{t.uvm_bytes / 1e6:.1f} MB ({t.uvm_htod_bytes / 1e6:.1f} MB host to "
                      f"device, {t.uvm_dtoh_bytes / 1e6:.1f} MB device to host) in "
                      f"{fmt_ns(t.uvm_time_ns)} of GPU time"
                      + _share_text(share, of, whole))
        share = min(share, 100.0) if share is not None else None
        ev.extend(self._fault_evidence(t, fault_share, of))
        if t.managed_copies:
            ev.append(f"{t.managed_copies} explicit copies from or to managed memory")
        worst = max(share or 0.0, fault_share or 0.0)
        heavy = worst >= self.settings.uvm_pct
        if heavy:
            what = ("unified-memory migrations" if (share or 0.0) >= (fault_share or 0.0)
                    else "resolving unified-memory page faults")
            self._score(Layer.PCIE, min(1.0, worst / 100.0 + self.settings.uvm_score_offset),
                        f"{what} take {worst:.0f}% of {of}")
        title = ("Unified memory migrates on demand" if t.uvm_copies
                 else "Unified memory faults on access" if t.um_faults
                 else "Managed memory in use")
        return [Finding(
            Layer.PCIE, "warning" if heavy else "info", title, tuple(ev),
            "Prefetch managed buffers to the GPU before the kernels run "
            "(cudaMemPrefetchAsync), set placement hints with cudaMemAdvise, or use device "
            "memory with explicit asynchronous copies from pinned buffers.",
            check="E1", weight=worst / 100.0,
        )]

    def _fault_evidence(self, t: TransfersResult, fault_share: float | None,
                        of: str) -> list[str]:
        """The page faults in words: count, per unit, GPU time resolving them and its share
        of ``of``, the processes that fault most; or, with migrations and no fault records,
        the capture options that would record them."""
        if not t.um_faults:
            if t.uvm_copies and not t.um_faults_recorded:
                return ["the export holds no page-fault records: capture with nsys profile "
                        "--cuda-um-cpu-page-faults=true --cuda-um-gpu-page-faults=true to see "
                        "how many accesses fault"]
            return []
        r = self.results.ranges
        per_unit = f", {t.um_faults / r.n:.3g} per unit ({r.n} units)" if r and r.n else ""
        ev = [f"{t.um_faults} unified-memory page faults ({t.um_cpu_faults} on the host, "
              f"{t.um_gpu_faults} raised by kernels in {t.um_gpu_fault_groups} groups)"
              f"{per_unit}; the GPU spent {fmt_ns(t.um_gpu_fault_time_ns)} resolving them"
              + (f", {fault_share:.1f}% of {of}" if fault_share is not None else "")]
        procs = t.page_faults()
        if len(procs) > 1:
            ev += [p.line() for p in procs[:3]]
        return ev

    def c1_launch(self) -> list[Finding]:
        """C1: launch overhead, judged on the launch-bound gaps only (gpu_idle: inside
        units when there are units); the method's P50/P99 over every gap is context. A
        gap that copies, synchronizations, CPU work, other processes or the time between
        units explain is no launch overhead."""
        g = self.results.launch_gaps
        idle = self.results.gpu_idle
        lat = self.results.launch_latency
        out: list[Finding] = []
        if g is None or g.p99_ns is None:
            return out
        threshold = g.p99_threshold_ns
        depth = lat.depth_at_launch_p50 if lat is not None else None
        shallow = depth is not None and depth <= self.settings.shallow_queue_depth
        ev = []
        if idle is not None and idle.gaps:
            where = f"inside units of '{idle.unit}'" if idle.unit else "over the whole run"
            if idle.launch_bound_gaps:
                ev.append(
                    f"{idle.launch_bound_gaps} launch-bound gaps {where}: P50 "
                    f"{fmt_ns(idle.launch_bound_p50_ns)}, P99 "
                    f"{fmt_ns(idle.launch_bound_p99_ns)} (threshold {fmt_ns(threshold)}; "
                    f"{idle.launch_bound_idle_pct or 0:.1f}% of the idle time)")
            else:
                ev.append(f"no launch-bound gap {where}")
            ev.append(f"GPU idle time by cause: {breakdown(idle)}")
        ev.append(
            f"all {int(g.count)} gaps between kernels (the method's figure, every cause): "
            f"P50 {fmt_ns(g.p50_ns)}, P99 {fmt_ns(g.p99_ns)}"
        )
        if depth is not None:
            ev.append(
                f"dispatch queue depth at launch: P50 {depth:g} launched-but-not-started kernels"
            )
        api = lat.api_duration.p50_ns if lat is not None else None
        if api is not None:
            ev.append(f"launch call CPU cost P50 {fmt_ns(api)}")
        if idle is not None:
            over, p99 = idle.launch_overhead, idle.launch_bound_p99_ns
        else:  # no cause per gap (gpu_idle did not run): the method's figure
            over, p99 = g.cpu_bound, g.p99_ns
        cost_pct, of = self._launch_cost(idle, ev)
        cheap = cost_pct is not None and cost_pct < self.settings.launch_cost_pct
        n_gaps = idle.launch_bound_gaps if idle is not None else int(g.count)
        few = n_gaps < self.settings.launch_min_gaps
        if over and not self.graphs_in_use and not cheap and not few:
            self._score(
                Layer.CPU,
                (self.settings.launch_shallow_score if shallow
                 else self.settings.launch_deep_score),
                f"P99 launch-bound gap {fmt_ns(p99)} with the dispatch queue "
                + ("nearly empty" if shallow else "not drained"),
            )
            out.append(
                Finding(
                    Layer.CPU,
                    "warning",
                    f"Kernel launch overhead: P99 launch-bound gap {fmt_ns(p99)} "
                    f"exceeds {fmt_ns(threshold)}",
                    tuple(ev),
                    "Cut per-kernel CPU cost on the launch path: capture the hot loop as a CUDA "
                    "Graph, fuse small kernels, keep the launching thread free of other work, "
                    "or spread independent work over more CUDA streams.",
                    check="C1",
                    weight=p99 / threshold,
                )
            )
        elif not over and not cheap and cost_pct is not None and not few \
                and not self.graphs_in_use:
            # each gap short, but together they cost more than a warning's worth: the run
            # is launch-bound (many small kernels); said as a warning, never "within bounds"
            out.append(Finding(
                Layer.CPU, "warning",
                f"Launch-bound: the GPU lost {cost_pct:.1f}% of {of} in {n_gaps} launch-bound "
                f"gaps, each short (P99 {fmt_ns(p99)})",
                tuple(ev),
                "Fewer, larger kernels: fuse small kernels or capture the loop as a CUDA "
                "Graph; the per-launch CPU cost adds up over many launches.",
                check="C1", weight=cost_pct / 100.0))
        else:
            if over and self.graphs_in_use:  # the kernels outside graphs: not the hot path
                title = (f"P99 launch-bound gap {fmt_ns(p99)} outside CUDA Graphs, not "
                         "judged as launch overhead (graphs in use)")
            elif over and few:  # a P99 of a handful of gaps is their largest: one-offs
                title = (f"P99 launch-bound gap {fmt_ns(p99)} exceeds {fmt_ns(threshold)}, "
                         f"but over only {n_gaps} gaps (fewer than "
                         f"{self.settings.launch_min_gaps}): too few for a P99 to show a "
                         "launch loop")
            elif over:  # past the threshold, but the GPU lost little time to it
                title = (f"P99 launch-bound gap {fmt_ns(p99)} exceeds {fmt_ns(threshold)}, "
                         f"but the GPU lost only {cost_pct:.1f}% of {of} in launch-bound gaps: "
                         "not the bottleneck")
            elif p99 is not None:
                title = f"Launch gaps within bounds (P99 launch-bound gap {fmt_ns(p99)})"
            else:
                title = "No launch-bound gaps: the GPU's idle time has other causes"
            if idle is not None and idle.top_cause and idle.top_cause != "launch_bound":
                title += f"; most idle time is {idle.top_cause.replace('_', ' ')}"
            out.append(Finding(Layer.CPU, "info", title, tuple(ev), check="C1", weight=0.1))
        return out

    def _launch_cost(self, idle: GpuIdleResult | None, ev: list[str]
                     ) -> tuple[float | None, str]:
        """(the launch-bound idle time as a % of the time base, the time base's name), with
        its evidence line; None when the causes of idle time were not measured."""
        whole, of = self.time_base()
        if idle is None or not whole:
            return None, of
        cost_ns = (idle.launch_bound_idle_pct or 0.0) / 100.0 * idle.idle_ns
        pct = 100.0 * cost_ns / whole
        ev.append(f"what it cost: the GPU waited {fmt_ns(cost_ns)} in launch-bound gaps, "
                  f"{pct:.1f}% of {of} (a warning from {self.settings.launch_cost_pct:g}%)")
        return pct, of

    def gpu_idle(self) -> list[Finding]:
        """The GPU's idle time by cause, as one info finding."""
        idle = self.results.gpu_idle
        if idle is None or not idle.gaps or not idle.top_cause:
            return []
        ev = [f"{idle.gaps} gaps before kernels, {fmt_ns(idle.idle_ns)} idle in all"]
        for c in idle.causes()[:5]:
            if c.idle_ns:
                ev.append(f"{c.cause.replace('_', ' ')}: {fmt_ns(c.idle_ns)} "
                          f"({c.share_pct:.1f}%, {c.gaps} gaps): {IDLE_MEANING[c.cause]}")
        return [Finding(Layer.INFO, "info", "GPU idle time by cause", tuple(ev), check="idle",
                        weight=0.04)]

    # -- the host side's signature (check C3) --------------------------------------------
    def host_stall(self) -> HostStall | None:
        """How the slow units' extra host time is laid out (None without the attribution
        or a tail set)."""
        return self._host_stall

    def gpu_waited_share(self) -> float:
        """The share of the GPU side's growth in the slow units that is idle time with none
        of their work pending: the GPU waited for the host meanwhile (0..1)."""
        return float(sum(g.share_of_growth or 0.0 for g in self.attribution()
                         if g.component.waits_for_host))

    def host_signature(self) -> HostSignature | None:
        """A host-side mechanism with a signature natural jitter does not show: the slow
        units waited before their work began, or their launching thread ran in one long
        stretch without a CUDA call or a few (each ``host_signature_ratio`` times the
        median band's longest at least), the layout holding ``host_signature_share`` of
        their growth while the GPU waited for the host: in the slow units' means, or else
        in more than half of them, each on its own (their median share). None otherwise."""
        hs = self.host_stall()
        if hs is None:
            return None
        needed = self.settings.host_signature_share
        found = (hs.layout, hs.explains(), None)
        if found[0] in (None, Layout.SPREAD) or found[1] < needed:
            most = hs.most_units()
            if most is None:
                return None
            found = (most[0], most[2], most[1])
        layout, share, units = found
        # a stall leaves the GPU idle; a queued unit waits while the GPU may run the work
        # it queued behind
        if layout in (None, Layout.SPREAD) or share < needed \
                or (layout is not Layout.QUEUED and self.gpu_waited_share() < 0.5):
            return None
        return HostSignature({Layout.QUEUED: Mechanism.QUEUEING,
                              Layout.STALL_BEFORE: Mechanism.HOST_STALL_BEFORE_WORK,
                              Layout.STALL_BETWEEN: Mechanism.HOST_STALL}[layout],
                             hs, share, units)

    def c3_host_stall(self) -> list[Finding]:
        """Check C3: the host-side signature of the tail (see :meth:`host_signature`);
        scores cpu by the share of the units' growth it holds."""
        found = self.host_signature()
        if found is None:
            return []
        mech, hs, share, units = found
        if mech is Mechanism.QUEUEING:
            what = (f"the slowest {hs.slow_n} units waited {fmt_ns(hs.queued_growth_ns)} "
                    "longer than the median band before their work began (their range was "
                    "open while the thread was busy with the previous unit or blocked in "
                    "the OS)")
        else:
            where = ("before its first kernel launch" if mech is Mechanism.HOST_STALL_BEFORE_WORK
                     else "between two CUDA calls")
            many = (f"in {hs.long_count:.1f} stretches of {fmt_ns(hs.threshold_ns)} or more"
                    if hs.long_count >= 1.5 else "in one stretch")
            what = (f"in the slowest {hs.slow_n} units the launching thread ran "
                    f"{fmt_ns(hs.long_slow_ns)} without a CUDA call {many}, mostly {where} "
                    f"(longest {fmt_ns(hs.longest_slow_ns)}, against "
                    f"{fmt_ns(hs.longest_median_ns)} in the median band)")
        kind = "wait" if mech is Mechanism.QUEUEING else "stretch"
        held = (f"that holds {share:.0%} of their extra latency" if units is None else
                f"judged one by one, {units} of the {hs.slow_n} show it, and it holds a "
                f"median {share:.0%} of each one's extra latency (the others grew "
                "otherwise, which blurs the mean)")
        reason = (f"{what}; {held}"
                  + (" while the GPU waited" if mech is not Mechanism.QUEUEING else ""))
        self._score(Layer.CPU, self._signature_score(share), "")
        self._reasons[Layer.CPU].insert(0, reason)  # the mechanism's own measurement first
        self.signatures[Layer.CPU] = share
        title = {Mechanism.QUEUEING: "The slow units queued before their work began",
                 Mechanism.HOST_STALL_BEFORE_WORK: "Host stall before the slow units' first "
                                                   "launch (input preparation, data loading)",
                 Mechanism.HOST_STALL: "Host stall between the slow units' launches (GIL, "
                                       "Python work)"}[mech]
        return [Finding(
            Layer.CPU, "warning", title,
            (what + ".",
             f"the slow units take {fmt_ns(hs.duration_growth_ns)} longer than the median "
             f"band; " + (f"{share:.0%} of it is this {kind}" if units is None else
                          f"in {units} of them this {kind} holds a median {share:.0%} of "
                          "each one's growth")
             + f", and {self.gpu_waited_share():.0%} of the GPU side's growth is idle time"),
            fix=mech.action, check="C3", weight=0.6 * share)]

    def other_work_score(self) -> list[Finding]:
        """Check D1's other half scores the GPU when other work (not the program's own
        stream) is what grew in the slow units and ran in at least half of them, at most
        half as often in the median band (the interference finding says it in words)."""
        i = self.results.interference
        r = self.results.ranges
        if i is None or r is None or r.top_gpu_component is not Component.GPU_OTHER \
                or i.own_work or not i.culprit_slow_units or not i.slow_n:
            return []
        slow = i.culprit_slow_units / i.slow_n
        median = (i.culprit_median_units or 0) / max(1, i.median_n or 0)
        if slow >= 0.5 and median < slow / 2:
            self.signatures[Layer.GPU] = slow
            self._score(Layer.GPU, self._signature_score(slow),
                        f"other GPU work ran in {i.culprit_slow_units} of {i.slow_n} slow "
                        f"units and {i.culprit_median_units or 0} of {i.median_n} median-band "
                        "units")
        return []

    def mechanism(self, layer: Layer) -> Mechanism | None:
        """What was measured inside ``layer`` (cpu: the host signature, else the CPU
        component that grew most; gpu: the GPU component that grew most; pcie: what
        check E1 found)."""
        r = self.results.ranges
        if layer == Layer.WORKLOAD:
            return Mechanism.MORE_WORK
        if layer == Layer.PCIE:
            # contention first (it slows every copy it meets), then volume (the slow units
            # move more: copies slow in every unit do not make a tail)
            faults = self.pcie_faults or []
            if "same-direction contention" in faults:
                return Mechanism.TRANSFER_CONTENTION
            if "transfer volume per unit" in faults:
                return Mechanism.TRANSFER_VOLUME
            return Mechanism.SLOW_TRANSFERS
        if layer == Layer.GPU:
            top = r.top_gpu_component if r is not None else None
            i = self.results.interference
            if top is Component.GPU_OTHER and i is not None and i.own_work:
                return Mechanism.GPU_BOUND  # the program's own work, on its own stream
            w = self.results.workload
            if top is Component.GPU_OWN_KERNEL and w is not None \
                    and (w.collective_share or 0.0) >= self.settings.collective_share:
                return Mechanism.COLLECTIVE_WAIT  # the kernels that grew waited for a peer
            return {Component.GPU_OTHER: Mechanism.OTHER_GPU_WORK,
                    Component.GPU_PENDING_IDLE: Mechanism.GPU_PENDING
                    }.get(top, Mechanism.GPU_EXECUTION)
        if layer != Layer.CPU:
            return None
        found = self.host_signature()
        if found is not None:
            return found[0]
        hs = self.host_stall()
        layout = hs.layout if hs is not None else None
        if layout is Layout.QUEUED:
            return Mechanism.QUEUEING
        top = r.top_cpu_component if r is not None else None
        if top is Component.CPU_LAUNCH:
            return Mechanism.LAUNCH_BOUND
        if layout is Layout.STALL_BEFORE:
            return Mechanism.HOST_STALL_BEFORE_WORK
        if layout is Layout.STALL_BETWEEN:
            return Mechanism.HOST_STALL
        return Mechanism.HOST_WORK

    def d1_jitter(self) -> list[Finding]:
        j = self.results.jitter
        if j is None or not j.kernels_examined:
            return []
        slow = j.time_weighted_slow_pct or 0.0
        ratio = j.time_weighted_p99_over_p50 or 1.0
        score = min(1.0, slow / self.settings.slow_full_score_pct)
        ev = (
            f"{slow:.1f}% of launches of the top kernels (time-weighted) run over "
            f"{self.settings.slow_ratio:g}x their "
            f"median; time-weighted P99/P50 of kernel durations {ratio:.2f}",
            f"worst: {str(j.worst_kernel)[:80]} with P99/P50 "
            f"{j.worst_p99_over_p50 or 0:.2f}",
        )
        if score >= self.settings.finding_score:
            self._score(Layer.GPU, score, f"{slow:.1f}% of kernel launches run over "
                                      f"{self.settings.slow_ratio:g}x their median")
            return [
                Finding(
                    Layer.GPU,
                    "warning" if score >= self.settings.warning_score else "info",
                    "Kernel execution time is intermittently inflated",
                    ev,
                    "Find what shares the GPU during the slow launches (other streams or "
                    "processes, MPS clients); check clocks and memory behaviour with "
                    "--gpu-metrics-devices; isolate or schedule the competing work.",
                    check="D1",
                    weight=score,
                )
            ]
        return [Finding(Layer.GPU, "info", "Kernel durations are stable", ev, check="D1",
                        weight=0.02)]

    def d2_metrics(self) -> list[Finding]:
        metrics = self.results.gpu_metrics
        if metrics is None:
            return [
                Finding(
                    Layer.INFO,
                    "info",
                    "GPU metrics not captured",
                    ("DRAM bandwidth and SM activity would confirm memory-bound phases",),
                    "Capture with nsys profile --gpu-metrics-devices=all.",
                    check="D2",
                )
            ]
        ev = tuple(f"{m.metric_name}: mean {m.mean:.1f}, P99 {m.p99:.1f} ({m.samples} samples)"
                   for m in metrics.rows())
        return [
            Finding(
                Layer.GPU,
                "info",
                "GPU metrics (D2)",
                ev or ("no DRAM/SM/PCIe metrics found",),
                check="D2",
                weight=0.05,
            )
        ]

    def pageable_dominant(self) -> bool:
        """Most copy time moves pageable host memory (the driver stages it through a bounce
        buffer): at least ``settings.pageable_dominant_pct``."""
        t = self.results.transfers
        pct = t.pageable_time_pct if t is not None else None
        return (pct or 0.0) >= self.settings.pageable_dominant_pct

    def e1_transfers(self) -> list[Finding]:
        t = self.results.transfers
        if t is None:
            return []
        contention = t.contention_share_pct or 0.0
        pageable = int(t.pageable_copies or 0)
        pageable_pct = t.pageable_time_pct
        ev = []
        score = min(1.0, contention / self.settings.contention_full_score_pct)
        if contention > 0:
            ev.append(f"{contention:.0f}% of copy time overlaps another copy in the same direction")
            for d in DIRECTIONS:
                f = t.direction(d)
                if f.overlapped_median_gbps and f.alone_median_gbps:
                    ev.append(
                        f"{d.upper()} median {f.overlapped_median_gbps:.1f} GB/s while "
                        f"overlapped vs {f.alone_median_gbps:.1f} GB/s alone"
                    )
        if pageable:
            ev.append(
                f"{pageable} cop{'y' if pageable == 1 else 'ies'} from/to pageable host memory"
                + (f" ({pageable_pct:.0f}% of copy time)" if pageable_pct is not None else "")
            )
        # slow only against what was possible: each copy's expected time from a latency +
        # size/bandwidth model for its direction and memory kind (transfers), so a copy of
        # a few KB, latency-bound, is not judged against the link rate
        low_link = False
        for d in DIRECTIONS:
            f = t.direction(d)
            if f.achieved_pct_of_link is not None and f.link_gbps:
                if f.expected_pct is None:
                    model = ""
                elif f.expected_pct >= 100:
                    # the model's time is a floor for pinned copies over the assumed link;
                    # beating it says the link is wider than assumed, not a fault
                    model = ("; as fast as the copy model expects for their sizes and memory "
                             "kinds, or faster")
                else:
                    model = (f"; {f.expected_pct:.0f}% of the speed the copy model expects "
                             "for their sizes and memory kinds")
                ev.append(
                    f"{d.upper()} copies reach {min(f.achieved_pct_of_link, 100):.0f}% of the "
                    f"link ({f.link_gbps:.0f} GB/s, {t.link_source} figure)"
                    + (" (above the assumed link's figure: the link is wider than assumed)"
                       if f.achieved_pct_of_link > 100 else "") + model
                )
                low_link = low_link or (f.expected_pct is not None and f.copies
                                        >= self.settings.min_finding_copies
                                        and f.expected_pct < self.settings.low_link_pct)
        if t.suspect_copies:
            ev.append(f"{t.suspect_copies} copies/memsets faster than physically possible "
                      "left out as suspect data")
        # pageable copies count when pinned ones would have been materially faster: small
        # copies are latency-bound either way
        slow_pageable = [
            r for r in t.host()
            if r.pinned_expected_pct is not None and r.pageable_copies
            and r.copies >= self.settings.min_finding_copies
            and r.pinned_expected_pct < self.settings.low_link_pct]
        pageable_slow = bool(slow_pageable)
        for r in slow_pageable[:2]:
            # the reason pageable copies are slow, in figures: what pinned copies of the
            # same sizes would take against what these took
            ev.append(f"device {r.device_id} {r.direction}: {r.pageable_copies} of {r.copies} "
                      f"copies from pageable memory run at {r.pinned_expected_pct:.0f}% of "
                      "the speed pinned copies of their sizes would reach")
        if self.pageable_dominant() and pageable_slow:
            score = max(score, self.settings.pageable_slow_low_link_score if low_link
                        else self.settings.pageable_slow_score)
        elif pageable and pageable_slow:
            score = max(score, self.settings.pageable_minor_score)
        if low_link:
            # copies at a fraction of what the model allows are slow whatever else: the
            # finding is a warning like pageable copies that pinned ones would outrun
            score = max(score, self.settings.low_link_score)
        # what E1 measured wrong, if anything (the verdict may not name PCIe without it)
        self.pcie_faults = [what for what, wrong in (
            ("same-direction contention", contention >= self.settings.contention_pct),
            ("copies slow against the copy model", low_link),
            ("pageable copies slower than pinned ones would be", pageable_slow),
        ) if wrong]
        if score > 0:
            self._score(Layer.PCIE, score, "; ".join(ev[:2]))
        suspect = []
        if t.suspect_copies:
            suspect.append(Finding(
                Layer.INFO, "warning",
                f"Suspect data: {t.suspect_copies} copies/memsets faster than physically "
                "possible",
                (f"{t.faster_than_link} host copies faster than their link, "
                 f"{t.faster_than_memory} memsets/device copies faster than the GPU's memory "
                 "bandwidth (devices.memory_bandwidth_bytes_per_s)",
                 "their timestamps or sizes cannot be true: they are left out of every "
                 "bandwidth and contention figure and drive no verdict"),
                check="plausibility", weight=0.2))
        if not ev:
            return suspect
        return suspect + [
            Finding(
                Layer.PCIE,
                "warning" if score >= self.settings.warning_score else "info",
                _transfers_title(self.pcie_faults) if score >= self.settings.finding_score
                else "Host-device transfers",
                tuple(ev),
                "Use pinned (page-locked) host buffers, overlap copies with compute on separate "
                "streams, batch small copies, and keep other processes' copies off the link "
                "(measure the link with nvbandwidth and pass --baseline).",
                check="E1",
                weight=score,
            )
        ]

    def overlap(self) -> list[Finding]:
        r = self.results.overlap
        if r is None or not r.findings:
            return []
        return [
            Finding(
                Layer.CPU,
                "info",
                "Serialized compute and copies",
                tuple(r.findings),
                "Issue copies asynchronously (cudaMemcpyAsync from pinned memory) on a "
                "stream other than compute's.",
                check="overlap",
                weight=0.05,
            )
        ]

    def interference(self) -> list[Finding]:
        """Check D1's other half: the other GPU work of the slow units, by name."""
        r = self.results.interference
        f = _interference_finding(r) if r is not None else None
        return [f] if f is not None else []

    def workload(self) -> list[Finding]:
        """More work vs slower work in the slow units: own kernels per unit, and host-device
        bytes per unit (a transfer-volume tail is check E1's: the link moved more, not
        slower, so it counts as a fault of the transfer layer)."""
        w = self.results.workload
        if w is None:
            return []
        out = [f for f in (_workload_finding(w, self.settings, self.queued_behind_own_work()),)
               if f is not None]
        if is_transfer_volume_tail(w, self.settings):
            what = "transfer volume per unit"
            self.pcie_faults = [*(self.pcie_faults or []), what]
            self._score(Layer.PCIE, self._signature_score(w.copies_explain or 0.0),
                        w.copy_line())
            out.append(Finding(
                Layer.PCIE, "warning",
                "Transfer volume: slow units move "
                f"{(w.slow_copy_bytes or 0) / max(1.0, w.median_copy_bytes or 0):.3g}x the "
                "median's host-device bytes", (w.copy_line(),),
                "The slow units load data over the link that the others do not (weights, "
                "adapters, inputs): keep it resident on the GPU, prefetch it on a side "
                "stream before the unit starts, or group units by what they load.",
                check="E1", weight=w.copies_explain or 0.0))
        return out

    def graphs(self) -> list[Finding]:
        g = self.results.typed(GraphsResult)
        if g is None or not g.in_use:
            return []
        ev = [
            f"{int(g.graph_launches or 0)} graph launches "
            f"({g.trace_level}-level tracing)"
        ]
        if g.graph_gpu_time_pct is not None:
            ev.append(f"{g.graph_gpu_time_pct:.0f}% of kernel GPU time runs inside graphs")
        return [
            Finding(
                Layer.GRAPH,
                "info",
                "CUDA Graphs in use: launch overhead is ~0",
                tuple(ev),
                "With graphs, look at memory bandwidth and L2 cache contention "
                "(capture --gpu-metrics-devices=all) rather than launch overhead.",
                check="graphs",
                weight=0.3,
            )
        ]


def _share_text(share: float | None, of: str, whole: float | None) -> str:
    """", x% of <of>" for a share of time; above 100% (a sum of durations that overlap one
    another, or run outside the units) the figure is not a share and says so."""
    if share is None:
        return ""
    if share <= 100.0:
        return f", {share:.1f}% of {of}"
    return (f", summed over migrations that overlap one another or run outside the units: "
            f"more than {of} ({fmt_ns(whole)}), not a share of it")


def _transfers_title(faults: list[str] | None) -> str:
    """What check E1 found wrong with the transfers, as a title."""
    if not faults:
        return "Host-device transfers"
    return "Host-device transfers: " + "; ".join(faults)


def _interference_finding(r: InterferenceResult) -> Finding | None:
    rows = r.per_stream()
    if not rows or not rows[0].slow_units:
        return None
    top = rows[0]
    slow_frac = top.slow_units / max(1, top.slow_n)
    median_frac = top.median_units / max(1, top.median_n)
    ev = [w.line() for w in rows[:3] if w.slow_units]
    for n in r.tables["per_name"].slice(0, 3).to_pylist():
        if n["slow_units"]:
            ev.append(f"{n['kind']} {str(n['name'])[:80]} (stream {n['stream_id']}): "
                      f"{n['slow_units']} of {n['slow_n']} slow units, {n['median_units']} of "
                      f"{n['median_n']} median-band units")
    strong = slow_frac >= 0.5 and median_frac < slow_frac / 2
    if top.own_stream:
        # the program's own work on its own stream: no one interferes, the GPU is behind
        return Finding(
            Layer.GPU, "warning" if strong else "info",
            f"GPU-bound with the host ahead: the units wait for the program's own earlier "
            f"work on stream {top.stream_id} ({top.names.split('; ')[0][:60]})",
            tuple(ev),
            "No other work interferes: the GPU is the bottleneck and the host launches ahead "
            "of it. Make the kernels faster or fewer, or submit less per unit; time units on "
            "the GPU (CUDA events, an NVTX range ending in a sync).",
            check="D1", weight=slow_frac - median_frac)
    return Finding(
        Layer.GPU, "warning" if strong else "info",
        f"Other GPU work during the slow units: stream {top.stream_id} of "
        f"{top.process_name or 'pid ' + str(top.pid)} ({top.names.split('; ')[0][:60]})",
        tuple(ev),
        "Keep this work off the serving GPU or schedule it between requests (stream "
        "priorities, MPS limits, a separate GPU).",
        check="D1", weight=slow_frac - median_frac)


def _workload_finding(w: WorkloadResult, settings: Settings, queued: bool
                      ) -> Finding | None:
    """The workload finding: a size tail, a workload tail, or what grew in the own kernel
    time, as information. ``queued``: the slow units queued behind their own earlier work
    (:meth:`Evidence.queued_behind_own_work`), so their windows hold that work's kernels
    and sizes, which are no work of their own."""
    if not queued and is_size_tail(w, settings) \
            and not is_transfer_volume_tail(w, settings):
        size = next(r for r in w.size_relation() if r.measure == w.size_measure)
        ev = [w.size_line() or ""]
        ev += [f"{r.what}: slow {r.amount(r.slow_mean)} vs median band "
               f"{r.amount(r.median_mean)}, rank correlation with latency {r.rho:.2f}"
               + (f", explains {r.explains:.0%} of the extra latency"
                  if r.explains is not None else "")
               for r in w.size_relation() if r.rho is not None]
        if is_new_size_tail(w):
            return Finding(
                Layer.WORKLOAD, "warning",
                f"Workload size: {w.slow_new_size_n} of the {w.slow_n} slowest units are "
                f"the first of their {size.what}; latency follows it (rank correlation "
                f"{w.size_rho:.2f})", tuple(ev),
                "Each new size pays a one-off cost (kernels loaded or tuned for a new shape, "
                "a caching allocator growing): pad or bucket the work per unit to a few "
                "sizes and warm each up before serving (or reserve the allocator's largest "
                "size); bound the work per unit where big units are the cost.",
                check="D1", weight=max(w.size_explains or 0, w.slow_new_size_n / w.slow_n))
        return Finding(
            Layer.WORKLOAD, "warning",
            f"Workload size: slow units hold {fmt_ratio(w.size_ratio)} the {size.what} and "
            f"latency follows it (rank correlation {w.size_rho:.2f})", tuple(ev),
            "The slow units are bigger (longer inputs, bigger batches or payloads): bound or "
            "split the work per unit (chunked prefill, batch size caps), or budget latency "
            "per unit of work; judge the rest of the tail on latency per unit of size.",
            check="D1", weight=w.size_explains or 0)
    if w.kernel_ratio is None:
        return None
    ev = [w.line()]
    ev += [f"units with {_kernel_range(b.min_kernels, b.max_kernels)} kernels ({b.units}): "
           f"median latency {fmt_ns(b.p50_ns)}, {fmt_ns(b.mean_per_kernel_ns)} per kernel"
           for b in w.bins()]
    if not queued and is_workload_tail(w, settings):
        return Finding(
            Layer.WORKLOAD, "warning",
            f"Workload size: slow units launch {fmt_ratio(w.kernel_ratio)} the kernels at the "
            "median's per-kernel speed", tuple(ev),
            "The slow units do more work (longer inputs, bigger batches): bound or split the "
            "work per unit (chunked prefill, batch size caps), or budget latency per unit "
            "of work.", check="D1", weight=w.work_ratio or 0)
    waited = (w.collective_share or 0.0) >= settings.collective_share
    if w.collective_share is not None and (w.slow_collective_ns or w.median_collective_ns):
        ev.append(f"NCCL collective time per unit {fmt_ns(w.slow_collective_ns)} in the slow "
                  f"units vs {fmt_ns(w.median_collective_ns)} in the median band: "
                  f"{w.collective_share:.0%} of the growth of own kernel time")
    return Finding(Layer.GPU, "info", "More work or slower work: "
                   + {"slower_work": "the collectives waited longer for another rank"
                      if waited else "the same work runs slower",
                      "more_work": "more kernels in their window, the work they queued "
                                   "behind" if queued
                      else "more work, short of a workload-size tail"}.get(
                          w.kind, "own kernel time did not grow"),
                   tuple(ev), check="D1", weight=0.05)


def _kernel_range(lo: int, hi: int) -> str:
    """'56' when every unit of a bin launches as many kernels, else '40-56'."""
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def tail_findings(tail: TailSummary, ranges: RangesResult | None) -> list[Finding]:
    """The tail itself and its attribution (``ranges``: the ranges analysis' result when
    it measured), as findings."""
    if ranges is None or tail.p50_ns is None:
        return []
    ev = [
        f"{tail.n} x '{tail.unit}': P50 {fmt_ns(tail.p50_ns)}, P90 {fmt_ns(tail.p90_ns)}, "
        f"P99 {fmt_ns(tail.p99_ns)} (P99/P50 {tail.p99_over_p50:.2f}, from {tail.n} units); "
        f"shape {tail.shape_text}"
    ]
    if tail.n < tail.min_units:
        ev.append(f"only {tail.n} units: fewer than the {tail.min_units} a verdict needs")
    if tail.lone_outlier_ns is not None:
        ev.append(f"one unit lasts {fmt_ns(tail.lone_outlier_ns)}, "
                  f"{tail.lone_outlier_ratio:.0f}x the next slowest: a lone outlier, reported "
                  "alone; the slow-unit comparison it would carry is left out")
    grown = sorted((g for g in ranges.attribution if (g.delta_ns or 0) > 0),
                   key=lambda g: -(g.delta_ns or 0))
    if tail.lone_outlier_ns is not None:
        grown = []
    for g in grown[:4]:
        ev.append(
            f"slowest {tail.tail_n} units vs median: {g.component.value.replace('_', ' ')} "
            f"{fmt_ns(g.median_mean_ns)} -> {fmt_ns(g.tail_mean_ns)} "
            f"(+{fmt_ns(g.delta_ns)}, {g.share_of_growth or 0:.0%} "
            f"of the {g.component.side.upper()} side's growth)"
        )
    if grown:
        ev.extend(ranges.offset_notes())
    if {g.component.side for g in grown[:4]} == {"cpu", "gpu"}:
        ev.append("the CPU side (the host thread's time) and the GPU side (the device's) "
                  "each add up to the unit's time: each side's shares add up to 100%, and "
                  "the two sides describe the same time twice")
    layer = grown[0].component.layer if grown else None
    sev = (
        "critical"
        if tail.level == "abnormal"
        else ("warning" if tail.level == "elevated" else "info")
    )
    few = tail.n < tail.min_units
    if few:  # a handful of units judges no tail
        sev = "info"
    title = (f"Too few units of '{tail.unit}' to judge a tail ({tail.n})" if few
             else f"Latency tail of '{tail.unit}' is {tail.level}")
    return [
        Finding(
            layer or "info",
            sev,
            title,
            tuple(ev),
            check="A/B",
            weight=tail.p99_over_p50 or 0,
        )
    ]
