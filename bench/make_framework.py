#!/usr/bin/env python3
"""Make an NVTX-heavy Nsight Systems SQLite export shaped like a framework's training trace.

Real training captures annotated by a framework carry one NVTX range per operator, nested in
per-module and per-step ranges, with most ranges launching nothing themselves: PyTorch's
``torch.autograd.profiler.emit_nvtx`` (``aten::linear, seq = 12, op_id = 40`` inside
``aten::addmm``...), NeMo and Megatron-LM (``TransformerLayer``, ``self_attention``,
``mlp`` around the same operator names in every step). This script writes such an export
from a fixed per-step template, so its size is a parameter:

* ``--processes`` ranks (one process and one GPU each), every one running the same loop;
* per rank a main thread with, per step, ``train_step`` > ``forward`` / ``backward`` /
  ``optimizer.step`` > ``--layers`` x ``TransformerLayer`` (backward:
  ``TransformerLayerBackward``) > module ranges (``input_layernorm``,
  ``self_attention``, ``mlp``) > operator ranges (``aten::linear`` > ``aten::t`` >
  ``aten::transpose`` > ``aten::as_strided``, ``aten::addmm`` ...), the innermost operator
  of a kernel holding its ``cudaLaunchKernel`` and a ``cudaStreamIsCapturing`` call;
  the step ends in ``cudaStreamSynchronize`` (the loss read back);
* a data-loader thread per rank with ``DataLoader.__next__`` > ``collate`` ranges and
  a pin-memory thread without ranges, neither with GPU work; the main thread
  copies the batch to the GPU at the start of ``train_step`` (``cudaMemcpyAsync`` on a
  copy stream);
* ``--names emit_nvtx`` numbers the operator ranges the way emit_nvtx does (``, seq = N``
  on forward operators, ``, op_id = M`` on all: one name per call); ``--names repeated``
  (default) keeps the bare names, as NeMo/Megatron-style annotation does, so that every
  operator and module name repeats thousands of times (the harder case for the unit
  choice: each is a candidate).

Steps differ: each is stretched by its own factor (lognormal, a few %) and about 10% begin
with a data-loader stall of 5-30 ms (inside ``train_step``, before its first operator), so
that the diagnosis has a tail to explain. GPU
times follow the launches (a kernel starts after its launch and the previous kernel) and
the GPU drains before each step's synchronization.

Rows are computed with NumPy (the template times broadcast over steps and ranks) and
written with ``executemany``; the schema and the small tables come from
``fixtures/nsysbuild.TraceBuilder`` (nsys 2025.3 layout).

Examples
--------
::

    python bench/make_framework.py --ranges 1000000 --out /tmp/fw_1m.sqlite
    python bench/make_framework.py --ranges 10000000 --out /tmp/fw_10m.sqlite --processes 4
"""

from __future__ import annotations

import argparse
import math
import os
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.nsysbuild import TraceBuilder, global_pid, global_tid  # noqa: E402

LAUNCH = "cudaLaunchKernel_v7000"
CAPTURING = "cudaStreamIsCapturing_v10000"
SYNC = "cudaStreamSynchronize_v3020"
MEMCPY = "cudaMemcpyAsync_v3020"


@dataclass
class Template:
    """One step of one rank's main thread, times relative to the step start (ns)."""

    ranges: list[tuple[int, int, str]] = field(default_factory=list)  # start, end, name
    calls: list[tuple[int, int, str, int]] = field(default_factory=list)  # ..., kernel index
    kernels: list[tuple[int, int, str]] = field(default_factory=list)  # start, end, name
    end: int = 0


class _Writer:
    """Lays out one step: a host cursor (ns) and the GPU's, ranges opened and closed."""

    def __init__(self, numbered: bool) -> None:
        self.t = 0
        self.gpu = 0
        self.t_ = Template()
        self.numbered = numbered
        self.seq = 0
        self.op_id = 0

    def name(self, op: str, forward: bool) -> str:
        if not self.numbered or not op.startswith(("aten::", "autograd::")):
            return op
        self.op_id += 1
        if forward and op in ("aten::linear", "aten::layer_norm", "aten::gelu",
                              "aten::scaled_dot_product_attention"):
            self.seq += 1
            return f"{op}, seq = {self.seq}, op_id = {self.op_id}"
        return f"{op}, op_id = {self.op_id}"

    def range(self, name: str, body, pad: int = 800, forward: bool = True) -> None:
        start = self.t
        self.t += pad
        label = self.name(name, forward)
        body()
        self.t += pad
        self.t_.ranges.append((start, self.t, label))

    def leaf(self, name: str, kernel: str | None, gpu_ns: int = 0, forward: bool = True) -> None:
        """An operator range; with ``kernel``, it launches that kernel (gpu_ns long)."""
        def body() -> None:
            if kernel is None:
                self.t += 600
                return
            c0 = self.t
            self.t_.calls.append((c0, c0 + 900, CAPTURING, -1))
            self.t += 1_200
            c1 = self.t
            self.t += 4_500
            k0 = max(c1 + 3_000, self.gpu)
            self.gpu = k0 + gpu_ns
            self.t_.kernels.append((k0, self.gpu, kernel))
            self.t_.calls.append((c1, self.t, LAUNCH, len(self.t_.kernels) - 1))
            self.t += 500
        self.range(name, body, pad=700, forward=forward)


def linear(w: _Writer, gpu_ns: int, forward: bool = True) -> None:
    def body() -> None:
        w.range("aten::t", lambda: w.range(
            "aten::transpose", lambda: w.leaf("aten::as_strided", None), forward=forward),
            forward=forward)
        w.leaf("aten::addmm", "sm90_xmma_gemm_f16f16_f32", gpu_ns, forward)
    w.range("aten::linear", body, forward=forward)


def layer_forward(w: _Writer) -> None:
    def norm() -> None:
        w.range("aten::layer_norm", lambda: w.leaf(
            "aten::native_layer_norm", "vectorized_layer_norm_kernel", 9_000))

    def attention() -> None:
        linear(w, 40_000)
        for _ in range(3):
            w.range("aten::reshape", lambda: w.range("aten::view", lambda: None, pad=400),
                    pad=500)
        w.range("aten::transpose", lambda: w.range("aten::as_strided", lambda: None, pad=300),
                pad=400)
        w.range("aten::scaled_dot_product_attention", lambda: w.leaf(
            "aten::_flash_attention_forward", "flash_fwd_kernel", 60_000))
        linear(w, 20_000)

    def mlp() -> None:
        linear(w, 70_000)
        w.leaf("aten::gelu", "vectorized_elementwise_kernel", 12_000)
        w.range("aten::dropout", lambda: w.range("aten::empty_like", lambda: w.range(
            "aten::empty_strided", lambda: None, pad=300), pad=400), pad=500)
        linear(w, 70_000)

    def body() -> None:
        w.range("input_layernorm", norm)
        w.range("self_attention", attention)
        w.leaf("aten::add", "vectorized_elementwise_kernel", 6_000)
        w.range("mlp", mlp)
    w.range("TransformerLayer", body)


def layer_backward(w: _Writer) -> None:
    def op(grad: str, kernels: list[tuple[str, int]]) -> None:
        def inner() -> None:
            def node() -> None:
                for k, ns in kernels:
                    w.leaf("aten::mm", k, ns, forward=False)
            w.range(grad, node, forward=False)
        w.range(f"autograd::engine::evaluate_function: {grad}", inner, forward=False)

    def no_kernel(grad: str, chain: list[str]) -> None:
        def inner() -> None:
            def node() -> None:
                def nest(rest: list[str]) -> None:
                    if rest:
                        w.range(rest[0], lambda: nest(rest[1:]), pad=500, forward=False)
                nest(chain)
            w.range(grad, node, forward=False)
        w.range(f"autograd::engine::evaluate_function: {grad}", inner, forward=False)

    def body() -> None:
        for _ in range(4):
            no_kernel("TBackward0", ["aten::t", "aten::transpose", "aten::as_strided"])
            no_kernel("torch::autograd::AccumulateGrad", ["aten::detach", "detach"])
        no_kernel("ViewBackward0", ["aten::reshape", "aten::view"])
        for _ in range(2):
            op("AddmmBackward0", [("sm90_xmma_gemm_f16f16_f32", 70_000)] * 2)
        op("GeluBackward0", [("vectorized_elementwise_kernel", 12_000)])
        op("ScaledDotProductFlashAttentionBackward0", [("flash_bwd_kernel", 120_000)])
        for _ in range(2):
            op("AddmmBackward0", [("sm90_xmma_gemm_f16f16_f32", 30_000)] * 2)
        op("NativeLayerNormBackward0", [("layer_norm_grad_kernel", 15_000)])
    w.range("TransformerLayerBackward", body, forward=False)


def step_template(layers: int, numbered: bool) -> Template:
    w = _Writer(numbered)

    def optimizer() -> None:
        for _ in range(max(1, layers // 4)):
            w.leaf("aten::_foreach_add_", "multi_tensor_apply_kernel", 20_000, forward=False)

    def step() -> None:
        w.range("forward", lambda: [layer_forward(w) for _ in range(layers)])
        w.range("backward", lambda: [layer_backward(w) for _ in range(layers)])
        w.range("optimizer.step", optimizer)
        # the loss read back: the host waits for the GPU to drain
        s0 = w.t
        w.t = max(w.t + 5_000, w.gpu + 4_000)
        w.t_.calls.append((s0, w.t, SYNC, -1))
    w.range("train_step", step, pad=20_000)
    w.t_.end = w.t + 400_000
    return w.t_


def build(out: Path, ranges: int, processes: int, layers: int, numbered: bool,
          seed: int) -> dict[str, int]:
    tpl = step_template(layers, numbered)
    loader_ranges = 1 + 4  # DataLoader.__next__ + 4 collate
    per_step = len(tpl.ranges) + loader_ranges
    steps = max(2, math.ceil(ranges / (per_step * processes)))
    rng = np.random.default_rng(seed)

    pids = [1000 + 17 * r for r in range(processes)]
    b = TraceBuilder("current", pid=pids[0], tid=pids[0], gpu_name="NVIDIA H100 80GB HBM3")
    kernel_names = sorted({n for _, _, n in tpl.kernels})
    for s in [LAUNCH, CAPTURING, SYNC, MEMCPY, *kernel_names]:
        b.string(s)
    for p in pids:  # one row per table and process so that the schema and PROCESSES exist
        b.api(0, 1, SYNC, pid=p, tid=p)
        b.kernel(0, 1, name=kernel_names[0], pid=p)
        b.memcpy(0, 1, 1, pid=p)
        b.nvtx(0, 1, "x", pid=p, tid=p)
        for k, label in enumerate(("python", "pt_data_worker", "pt_pin_memory")):
            b.thread_name(label, pid=p, tid=p + k)
    b.system_env("NvDriverVersion", "580.159.04")
    b.write(out)

    db = sqlite3.connect(out)
    db.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
                     "DELETE FROM NVTX_EVENTS; DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME;"
                     "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL;"
                     "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY;")
    gpu_row = db.execute("SELECT * FROM TARGET_INFO_GPU").fetchone()
    for r in range(1, processes):
        db.execute(f"INSERT INTO TARGET_INFO_GPU VALUES ({', '.join('?' * len(gpu_row))})",
                   (gpu_row[0], r, *gpu_row[2:]))
    sid = {s: i for s, i in b.strings.items()}

    # per step: a stretch factor, and a data-loader stall before about 10% of the steps
    stretch = np.exp(rng.normal(0, 0.03, (processes, steps)))
    stall = np.where(rng.random((processes, steps)) < 0.1,
                     rng.uniform(5e6, 30e6, (processes, steps)), 0).astype(np.int64)
    length = (tpl.end * stretch).astype(np.int64) + stall
    origin = np.cumsum(length, axis=1) - length + 1_000_000_000  # step start, ns
    begin = origin + stall  # train_step's cursor origin (after the stall)

    counts = {"nvtx": 0, "runtime": 0, "kernels": 0, "memcpy": 0}
    nvtx_sql = ("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                "VALUES (?, ?, 59, ?, ?, 0)")
    rs = np.array([r[0] for r in tpl.ranges], np.int64)
    re_ = np.array([r[1] for r in tpl.ranges], np.int64)
    rn = [r[2] for r in tpl.ranges]
    outer = rn.index("train_step")
    # emit_nvtx names as a pattern and the step's own counters: "aten::mm, op_id = {op}"
    rn_numbered = []
    for n in rn:
        head, _, tail = n.partition(", ")
        seq = int(tail.split("seq = ")[1].split(",")[0]) if "seq = " in tail else 0
        op = int(tail.split("op_id = ")[1]) if "op_id = " in tail else 0
        pattern = head + (", seq = {seq}" if "seq = " in tail else "") + (
            ", op_id = {op}" if "op_id = " in tail else "")
        rn_numbered.append((pattern, seq, op))
    n_seq = max(t[1] for t in rn_numbered)
    n_op = max(t[2] for t in rn_numbered)
    cs = np.array([c[0] for c in tpl.calls], np.int64)
    ce = np.array([c[1] for c in tpl.calls], np.int64)
    cn = [sid[c[2]] for c in tpl.calls]
    ck = [c[3] for c in tpl.calls]
    ks = np.array([k[0] for k in tpl.kernels], np.int64)
    ke = np.array([k[1] for k in tpl.kernels], np.int64)
    kn = [sid[k[2]] for k in tpl.kernels]
    n_calls = len(tpl.calls) + 1  # + the pin-memory copy
    for r, p in enumerate(pids):
        gt = [global_tid(p, p + k) for k in range(3)]
        gp = global_pid(p)
        chunk = 2_000
        for s0 in range(0, steps, chunk):
            sl = slice(s0, min(steps, s0 + chunk))
            S = sl.stop - sl.start
            b0 = begin[r:r + 1, sl]
            o0 = origin[r:r + 1, sl]
            st = stretch[r:r + 1, sl]
            a = (b0[:, :, None] + (rs[None, None] * st[:, :, None]).astype(np.int64))[0]
            e = (b0[:, :, None] + (re_[None, None] * st[:, :, None]).astype(np.int64))[0]
            a[:, outer] = o0[0]  # the stall (waiting for the batch) is inside the step
            if numbered:  # emit_nvtx's counters grow over the whole run
                rows = [(x, y, n.format(seq=seq + j * n_seq, op=op + j * n_op), gt[0])
                        for j, (xs, ys) in enumerate(zip(a.tolist(), e.tolist(), strict=True),
                                                     sl.start)
                        for x, y, (n, seq, op) in zip(xs, ys, rn_numbered, strict=True)]
            else:
                rows = [(x, y, n, gt[0])
                        for xs, ys in zip(a.tolist(), e.tolist(), strict=True)
                        for x, y, n in zip(xs, ys, rn, strict=True)]
            # data loader: the next batch is fetched during the step (in the stall, when
            # there is one); pin_memory copies it to the GPU just before the step
            for j in range(S):
                o = int(o0[0, j])
                bb = int(b0[0, j])
                rows.append((o + 10_000, o + 10_000 + 400_000 + (bb - o), "DataLoader.__next__",
                             gt[1]))
                for c in range(4):
                    x = o + 20_000 + c * 90_000
                    rows.append((x, x + 80_000, "collate", gt[1]))
            db.executemany(nvtx_sql, rows)
            counts["nvtx"] += len(rows)

            corr0 = 1 + (sl.start * n_calls)
            cst = (b0[:, :, None] + (cs[None, None] * st[:, :, None]).astype(np.int64))[0]
            cen = (b0[:, :, None] + (ce[None, None] * st[:, :, None]).astype(np.int64))[0]
            kst = (b0[:, :, None] + (ks[None, None] * st[:, :, None]).astype(np.int64))[0]
            ken = (b0[:, :, None] + (ke[None, None] * st[:, :, None]).astype(np.int64))[0]
            calls, kernels, copies = [], [], []
            for j, (xs, ys, ka, kb) in enumerate(zip(cst.tolist(), cen.tolist(), kst.tolist(),
                                                     ken.tolist(), strict=True)):
                base = corr0 + j * n_calls
                for i, (x, y, n, k) in enumerate(zip(xs, ys, cn, ck, strict=True)):
                    calls.append((x, y, gt[0], base + i, n))
                    if k >= 0:
                        kernels.append((ka[k], kb[k], r, base + i, gp, kn[k]))
                bb = int(b0[0, j])
                corr = base + n_calls - 1
                calls.append((bb + 2_000, bb + 10_000, gt[0], corr, sid[MEMCPY]))
                copies.append((bb + 12_000, bb + 232_000, r, corr, gp))
            db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, "
                           "globalTid, correlationId, nameId, returnValue) "
                           "VALUES (?, ?, 0, ?, ?, ?, 0)", calls)
            db.executemany(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, "
                "streamId, correlationId, globalPid, demangledName, shortName, launchType, "
                "cacheConfig, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, "
                "localMemoryTotal, gridId, sharedMemoryExecuted, sharedMemoryLimitConfig) "
                "VALUES (?, ?, ?, 1, 7, ?, ?, ?, ?6, 0, 0, 32, 128, 1, 1, 128, 1, 1, 0, 0, 0, "
                "0, 0, 0, 0)", kernels)
            db.executemany(
                "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, "
                "streamId, correlationId, globalPid, bytes, copyKind, deprecatedSrcId, "
                "srcKind, dstKind, copyCount) VALUES (?, ?, ?, 1, 8, ?, ?, 4194304, 1, 0, 1, "
                "2, 1)", copies)
            counts["runtime"] += len(calls)
            counts["kernels"] += len(kernels)
            counts["memcpy"] += len(copies)
    db.commit()
    db.close()
    counts["steps"] = steps
    counts["processes"] = processes
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranges", required=True, type=lambda s: int(s.replace("_", "")),
                   help="target NVTX range count (underscores allowed)")
    p.add_argument("--out", required=True, help="output .sqlite path (overwritten)")
    p.add_argument("--processes", type=int, default=2, help="ranks (default %(default)s)")
    p.add_argument("--layers", type=int, default=12,
                   help="TransformerLayers per step (default %(default)s)")
    p.add_argument("--names", choices=("repeated", "emit_nvtx"), default="repeated",
                   help="operator range names (default %(default)s)")
    p.add_argument("--seed", type=int, default=36)
    args = p.parse_args(argv)
    if args.ranges <= 0 or args.processes <= 0 or args.layers <= 0:
        p.error("--ranges, --processes and --layers must be positive")
    out = Path(args.out)
    if out.exists():
        out.unlink()
    t0 = time.perf_counter()
    counts = build(out, args.ranges, args.processes, args.layers,
                   args.names == "emit_nvtx", args.seed)
    print(f"wrote {out}: {os.path.getsize(out) / 2**20:.1f} MiB in "
          f"{time.perf_counter() - t0:.1f} s; " + ", ".join(
              f"{k} {v:,}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
