"""The checks of the diagnosis chain (C1/C2, D1/D2, E1/E2, CUDA Graphs) as findings and scores.

Each check reads the measured evidence of the analyses and yields

* findings (layer, severity, title, evidence with numbers and units, fix), and
* a score in [0, 1] for the layer it examines: how strongly the evidence *specific to that
  layer* says it is a problem (cpu: starved dispatch queue and launch gaps; gpu: kernels of
  the same name running intermittently slower, GPU time taken by other work; pcie:
  same-direction copy contention, pageable copies, bandwidth far below the link).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..formatting import fmt_ns
from .model import Finding

if TYPE_CHECKING:
    from ..analyses.base import AnalysisResult
    from ..report import Report
    from .engine import Settings
    from .model import TailSummary


def component_layer(component: str) -> str | None:
    """Which layer a tail-attribution component belongs to (None: waiting, not a cause).

    Time in synchronization calls and GPU idle time are consequences (the host waits for
    the GPU, or the GPU waits for the host) and are not counted for any layer.
    """
    c = component.lower()
    if "pending" in c:
        # the unit's work was submitted but nothing ran: the GPU (or work the trace does
        # not show) held it back
        return "gpu"
    if "idle" in c or "sync" in c:
        return None
    if "copy" in c or "memcpy" in c or "memset" in c or "transfer" in c:
        return "pcie"
    if "kernel" in c and ("launch" in c or "api" in c):
        return "cpu"
    if (
        "kernel" in c
        or "other_work" in c
        or "other_gpu" in c
        or "gpu_other" in c
        or "interfer" in c
    ):
        return "gpu"
    if "outside" in c or "launch" in c or "cpu" in c or "queue" in c or "other_cuda" in c:
        return "cpu"
    return None


def _cuda_call(component: str) -> bool:
    """A CPU-side component that is time inside CUDA API calls (not outside them)."""
    c = component.lower()
    return "outside" not in c and any(w in c for w in ("launch", "api", "memcpy", "memset"))


def _num(d: dict, *keys: str, default: float | None = None) -> float | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return default


class Evidence:
    """The analyses' results, read as the method's checks."""

    def __init__(
        self,
        report: Report,
        results: dict[str, AnalysisResult],
        settings: Settings,
        graphs_in_use: bool,
    ):
        self.report = report
        self.results = results
        self.settings = settings
        self.graphs_in_use = graphs_in_use
        self._scores: dict[str, float] = {"cpu": 0.0, "gpu": 0.0, "pcie": 0.0}
        self._reasons: dict[str, list[str]] = {"cpu": [], "gpu": [], "pcie": []}
        self._jitter: AnalysisResult | None = results.get("jitter")

    def summary(self, name: str) -> dict[str, Any]:
        r = self.results.get(name)
        return r.summary if r is not None and r.ok else {}

    # -- scores -------------------------------------------------------------------------
    def _score(self, layer: str, value: float, reason: str) -> None:
        if value > self._scores[layer]:
            self._scores[layer] = min(1.0, value)
        if value > 0 and reason:
            self._reasons[layer].append(reason)

    def check_score(self, layer: str) -> float:
        return self._scores.get(layer, 0.0)

    def reason(self, layer: str) -> str:
        parts = self._reasons.get(layer) or []
        attr = self.attribution_detail(layer)
        if attr:
            parts = [attr, *parts]
        return "; ".join(parts[:3]) if parts else "the evidence is weak"

    def unit_reason(self) -> str:
        r = self.results.get("ranges")
        return r.message if r is not None else "the ranges analysis did not run"

    def attribution(self) -> dict[str, dict[str, Any]]:
        attr = self.summary("ranges").get("attribution") or {}
        return attr if isinstance(attr, dict) else {}

    def attribution_shares(self) -> dict[str, float]:
        """Layer -> share of the tail's extra latency explained by that layer.

        The ranges analysis decomposes each unit twice, on the CPU side (launch, memcpy,
        sync and other CUDA calls, time outside CUDA) and on the GPU side (own kernels,
        own copies, other work, idle), and each side sums to the unit's duration. The
        waiting component of each side says which side the extra latency belongs to: GPU
        idle time means the GPU waited for the host (CPU-side cause), time in sync calls
        means the host waited for the GPU. So the GPU-idle share of the extra latency
        weighs the CPU side's causes and the rest weighs the GPU side's; within a side,
        each cause counts by its share of that side's positive growth.
        """
        sides: dict[str, dict[str, float]] = {"cpu": {}, "gpu": {}}
        idle = 0.0
        pageable = self.pageable_dominant()
        for comp, v in self.attribution().items():
            share = _num(v, "share_of_delta", default=0.0) if isinstance(v, dict) else 0.0
            side = comp.split("_", 1)[0]
            if side not in sides or not share or share <= 0:
                continue
            if side == "gpu" and "idle" in comp and "pending" not in comp:
                idle += share
                continue
            layer = component_layer(comp)
            if pageable and layer == "cpu" and _cuda_call(comp):
                # pageable copies are staged by the driver, which blocks CUDA calls of every
                # kind while the link is busy: their growth is transfer time
                layer = "pcie"
            if layer:
                sides[side][layer] = sides[side].get(layer, 0.0) + share
        weight = {"cpu": min(1.0, idle), "gpu": max(0.0, 1.0 - min(1.0, idle))}
        shares: dict[str, float] = {}
        for side, layers in sides.items():
            total = sum(layers.values())
            for layer, v in layers.items():
                shares[layer] = shares.get(layer, 0.0) + weight[side] * v / total
        return {k: round(min(1.0, v), 4) for k, v in shares.items()}

    def attribution_detail(self, layer: str) -> str:
        best = None
        for comp, v in self.attribution().items():
            if component_layer(comp) != layer or not isinstance(v, dict):
                continue
            delta = _num(v, "delta_ns", default=0.0) or 0.0
            if delta > 0 and (best is None or delta > best[1]):
                best = (comp, delta, _num(v, "share_of_delta", default=0.0) or 0.0)
        if best is None:
            return ""
        return (
            f"the slowest units spend {fmt_ns(best[1])} more in {best[0].replace('_', ' ')} "
            f"than the median ({best[2]:.0%} of the extra latency)"
        )

    # -- checks -------------------------------------------------------------------------
    def run_all(self) -> list[Finding]:
        out: list[Finding] = []
        for check in (
            self.c1_launch,
            self.c2_threads,
            self.d1_jitter,
            self.d2_metrics,
            self.e1_transfers,
            self.overlap,
            self.graphs,
        ):
            out.extend(check())
        return out

    def c1_launch(self) -> list[Finding]:
        g = self.summary("launch_gaps")
        lat = self.summary("launch_latency")
        out = []
        p99 = _num(g, "p99_ns")
        p50 = _num(g, "p50_ns")
        if p99 is not None:
            over = p99 > self.settings.gap_p99_ns
            depth = _num(lat, "depth_at_launch_p50")
            shallow = depth is not None and depth <= 1
            ev = [
                f"{int(g.get('count', 0))} gaps between kernels; P50 {fmt_ns(p50)}, "
                f"P99 {fmt_ns(p99)} (threshold {fmt_ns(self.settings.gap_p99_ns)})"
            ]
            share = _num(g, "share_above_normal_pct")
            if share is not None:
                ev.append(
                    f"{share:.1f}% of gaps exceed the normal {fmt_ns(self.settings.gap_normal_ns)}"
                )
            if depth is not None:
                ev.append(
                    f"dispatch queue depth at launch: P50 {depth:g} launched-but-not-started kernels"
                )
            api = _num(lat, "api_duration_p50_ns")
            if api is not None:
                ev.append(f"launch call CPU cost P50 {fmt_ns(api)}")
            if over and not self.graphs_in_use:
                self._score(
                    "cpu",
                    0.7 if shallow else 0.4,
                    f"P99 launch gap {fmt_ns(p99)} with the dispatch queue "
                    + ("nearly empty" if shallow else "not drained"),
                )
                out.append(
                    Finding(
                        "cpu",
                        "warning",
                        f"Kernel launch overhead: P99 launch gap {fmt_ns(p99)} "
                        f"exceeds {fmt_ns(self.settings.gap_p99_ns)}",
                        tuple(ev),
                        "Cut per-kernel CPU cost on the launch path: capture the hot loop as a CUDA "
                        "Graph, fuse small kernels, keep the launching thread free of other work, "
                        "or spread independent work over more CUDA streams.",
                        check="C1",
                        weight=p99 / self.settings.gap_p99_ns,
                    )
                )
            elif p50 is not None:
                out.append(
                    Finding(
                        "cpu",
                        "info",
                        f"Launch gaps within bounds (P99 {fmt_ns(p99)})",
                        tuple(ev),
                        check="C1",
                        weight=0.1,
                    )
                )
        return out

    def c2_threads(self) -> list[Finding]:
        # CPU time outside CUDA calls is measured per unit by the ranges analysis; OS
        # runtime blocking adds what the threads waited on when it was traced.
        if not self.report.probe.present("os_runtime"):
            return []
        rows = self.report.sql(
            "SELECT name, count(*) AS n, sum(duration_ns)::BIGINT AS total_ns FROM os_runtime "
            "GROUP BY name ORDER BY total_ns DESC LIMIT 3"
        ).fetchall()
        if not rows:
            return []
        ev = tuple(f"{n}: {c} calls, {fmt_ns(t)} blocked in total" for n, c, t in rows)
        return [
            Finding(
                "cpu",
                "info",
                "Where CPU threads blocked (OS runtime trace)",
                ev,
                check="C2",
                weight=0.05,
            )
        ]

    def _jitter_result(self) -> AnalysisResult | None:
        if self._jitter is None and self.report.probe.present("kernels"):
            self._jitter = self.report.analysis("jitter")
            self.results["jitter"] = self._jitter
        return self._jitter

    def d1_jitter(self) -> list[Finding]:
        j = self._jitter_result()
        if j is None or not j.ok or not j.summary.get("kernels_examined"):
            return []
        s = j.summary
        slow = _num(s, "time_weighted_slow_pct", default=0.0) or 0.0
        ratio = _num(s, "time_weighted_p99_over_p50", default=1.0) or 1.0
        score = min(1.0, slow / 10.0)
        ev = (
            f"{slow:.1f}% of launches of the top kernels (time-weighted) run over 1.5x their "
            f"median; time-weighted P99/P50 of kernel durations {ratio:.2f}",
            f"worst: {str(s.get('worst_kernel'))[:80]} with P99/P50 "
            f"{_num(s, 'worst_p99_over_p50', default=0):.2f}",
        )
        if score >= 0.3:
            self._score("gpu", score, f"{slow:.1f}% of kernel launches run over 1.5x their median")
            return [
                Finding(
                    "gpu",
                    "warning" if score >= 0.5 else "info",
                    "Kernel execution time is intermittently inflated",
                    ev,
                    "Find what shares the GPU during the slow launches (other streams or "
                    "processes, MPS clients); check clocks and memory behaviour with "
                    "--gpu-metrics-devices; isolate or schedule the competing work.",
                    check="D1",
                    weight=score,
                )
            ]
        return [Finding("gpu", "info", "Kernel durations are stable", ev, check="D1", weight=0.02)]

    def d2_metrics(self) -> list[Finding]:
        if not self.report.probe.present("gpu_metrics"):
            return [
                Finding(
                    "info",
                    "info",
                    "GPU metrics not captured",
                    ("DRAM bandwidth and SM activity would confirm memory-bound phases",),
                    "Capture with nsys profile --gpu-metrics-devices=all.",
                    check="D2",
                )
            ]
        rows = self.report.sql(
            "SELECT metric_name, avg(value) AS mean, quantile_cont(value, 0.99) AS p99, count(*) "
            "FROM gpu_metrics WHERE regexp_matches(lower(metric_name), 'dram|vram|sm active|pcie') "
            "GROUP BY 1 ORDER BY 1"
        ).fetchall()
        ev = tuple(f"{m}: mean {a:.1f}, P99 {p:.1f} ({n} samples)" for m, a, p, n in rows)
        return [
            Finding(
                "gpu",
                "info",
                "GPU metrics (D2)",
                ev or ("no DRAM/SM/PCIe metrics found",),
                check="D2",
                weight=0.05,
            )
        ]

    def pageable_dominant(self) -> bool:
        """Most copy time moves pageable host memory (the driver stages it through a bounce buffer)."""
        t = self.summary("transfers")
        return (_num(t, "pageable_time_pct", default=0.0) or 0.0) >= 50.0

    def e1_transfers(self) -> list[Finding]:
        t = self.summary("transfers")
        if not t:
            return []
        contention = _num(t, "contention_share_pct", default=0.0) or 0.0
        pageable = int(_num(t, "pageable_copies", default=0.0) or 0)
        pageable_pct = _num(t, "pageable_time_pct")
        ev = []
        score = min(1.0, contention / 40.0)
        if contention > 0:
            ev.append(f"{contention:.0f}% of copy time overlaps another copy in the same direction")
            for d in ("htod", "dtoh"):
                shared = _num(t, f"{d}_overlapped_median_gbps")
                alone = _num(t, f"{d}_alone_median_gbps")
                if shared and alone:
                    ev.append(
                        f"{d.upper()} median {shared:.1f} GB/s while overlapped vs "
                        f"{alone:.1f} GB/s alone"
                    )
        if pageable:
            ev.append(
                f"{pageable} copies from/to pageable host memory"
                + (f" ({pageable_pct:.0f}% of copy time)" if pageable_pct is not None else "")
            )
        low_link = False
        for d in ("htod", "dtoh"):
            pct = _num(t, f"{d}_achieved_pct_of_link")
            link = _num(t, f"link_{d}_gbps")
            if pct is not None and link:
                ev.append(
                    f"{d.upper()} copies reach {pct:.0f}% of the link "
                    f"({link:.0f} GB/s, {t.get('link_source', 'default')} figure)"
                )
                low_link = low_link or pct < 50
        if self.pageable_dominant():
            score = max(score, 0.6 if low_link else 0.5)
        elif pageable:
            score = max(score, 0.3)
        if score > 0:
            self._score("pcie", score, "; ".join(ev[:2]))
        if not ev:
            return []
        return [
            Finding(
                "pcie",
                "warning" if score >= 0.5 else "info",
                "Host-device transfers are slowed" if score >= 0.3 else "Host-device transfers",
                tuple(ev),
                "Use pinned (page-locked) host buffers, overlap copies with compute on separate "
                "streams, batch small copies, and keep other processes' copies off the link "
                "(measure the link with nvbandwidth and pass --baseline).",
                check="E1",
                weight=score,
            )
        ]

    def overlap(self) -> list[Finding]:
        r = self.results.get("overlap")
        if r is None or not r.ok or not r.findings:
            return []
        return [
            Finding(
                "cpu",
                "info",
                "Serialized compute and copies",
                tuple(r.findings),
                "Issue copies asynchronously (cudaMemcpyAsync from pinned memory) on a "
                "stream other than compute's.",
                check="overlap",
                weight=0.05,
            )
        ]

    def graphs(self) -> list[Finding]:
        s = self.summary("graphs") or (
            self.results["graphs"].summary if "graphs" in self.results else {}
        )
        if not s.get("in_use"):
            return []
        ev = [
            f"{int(_num(s, 'graph_launches', default=0) or 0)} graph launches "
            f"({s.get('trace_level', '?')}-level tracing)"
        ]
        share = _num(s, "graph_gpu_time_pct")
        if share is not None:
            ev.append(f"{share:.0f}% of kernel GPU time runs inside graphs")
        return [
            Finding(
                "graph",
                "info",
                "CUDA Graphs in use: launch overhead is ~0",
                tuple(ev),
                "With graphs, look at memory bandwidth and L2 cache contention "
                "(capture --gpu-metrics-devices=all) rather than launch overhead.",
                check="graphs",
                weight=0.3,
            )
        ]


def tail_findings(tail: TailSummary, ranges: AnalysisResult | None) -> list[Finding]:
    """The tail itself and its attribution, as findings."""
    if ranges is None or not ranges.ok or tail.p50_ns is None:
        return []
    ev = [
        f"{tail.n} x '{tail.unit}': P50 {fmt_ns(tail.p50_ns)}, P90 {fmt_ns(tail.p90_ns)}, "
        f"P99 {fmt_ns(tail.p99_ns)} (P99/P50 {tail.p99_over_p50:.2f}); shape {tail.shape} "
        f"(confidence {tail.shape_confidence:.2f})"
    ]
    attr = ranges.summary.get("attribution") or {}
    grown = sorted(
        (
            (k, v)
            for k, v in attr.items()
            if isinstance(v, dict) and (_num(v, "delta_ns", default=0) or 0) > 0
        ),
        key=lambda kv: -(_num(kv[1], "delta_ns", default=0) or 0),
    )
    for comp, v in grown[:4]:
        ev.append(
            f"slowest units vs median: {comp.replace('_', ' ')} "
            f"{fmt_ns(_num(v, 'median_mean_ns'))} -> {fmt_ns(_num(v, 'tail_mean_ns'))} "
            f"(+{fmt_ns(_num(v, 'delta_ns'))}, {(_num(v, 'share_of_delta', default=0) or 0):.0%} "
            "of the extra latency)"
        )
    layer = component_layer(grown[0][0]) if grown else None
    sev = (
        "critical"
        if tail.level == "abnormal"
        else ("warning" if tail.level == "elevated" else "info")
    )
    return [
        Finding(
            layer or "info",
            sev,
            f"Latency tail of '{tail.unit}' is {tail.level}",
            tuple(ev),
            check="A/B",
            weight=tail.p99_over_p50 or 0,
        )
    ]
