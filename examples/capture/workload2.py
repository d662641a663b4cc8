"""Graded doses of known tail causes on models and frameworks unlike workload.py's.

workload.py plants each cause once, at a dose that is easy to see, into one model (a
12-layer MLP under PyTorch, ranges "request"/"forward"). The diagnosis must also find mild
doses in other programs, so this workload varies the program and the dose:

  programs (--program)
    tf     a 6-layer PyTorch TransformerEncoder serving requests, ranges "infer" > "encode"
    cnn    a small PyTorch conv net training loop (SGD, loss.item()), one range "step"
    cupy   a CuPy MLP serving loop (cuBLAS GEMMs, elementwise kernels), range "handle"
  mechanisms (--mechanism), each at --dose (0 = nothing planted)
    clean    nothing planted: natural jitter only
    gil      a Python thread holds the interpreter lock in bursts of 1..(1+8*dose) ms,
             busy a share `dose` of the time (the launching thread stalls mid-unit)
    loader   the data of a unit is prepared in the unit's own thread first: a share
             `dose` of the units wait 3..(3+12*dose) ms before their first launch
    queue    Poisson arrivals into one worker at load `dose`; each range opens at
             arrival, so the wait in the queue is part of the unit
    gpu      another process runs bursts of GEMMs on the same GPU, busy a share `dose`
    pcie     another process streams pageable copies both ways while each unit moves a
             2 MiB pageable payload; `dose` scales the other process' duty
    sizes    units of heavy-tailed size (32..2048 tokens); every new size grows the
             caching pinned-host allocator (cudaHostAlloc mid-run)

Run under nsys with -t cuda,nvtx,osrt. Prints one summary line per run.
"""
import argparse
import multiprocessing as mp
import queue
import random
import threading
import time

import torch
import torch.cuda.nvtx as tnvtx

D = 1024


class Nvtx:
    """push/pop/start/end over CuPy's NVTX where the program is CuPy, else PyTorch's."""

    def __init__(self, program):
        self.push, self.pop = tnvtx.range_push, tnvtx.range_pop
        self.start, self.end = tnvtx.range_start, tnvtx.range_end
        if program == "cupy":
            try:
                from cupy.cuda import nvtx as cnvtx
                # start/end ranges stay PyTorch's: CuPy's RangeStart refuses its own
                # "no colour" default in some versions (negative value to uint32_t)
                self.push, self.pop = cnvtx.RangePush, cnvtx.RangePop
            except Exception:  # a CuPy built without NVTX: PyTorch's ranges are the same API
                pass


def gil_holder(stop, dose, seed=13):
    rng = random.Random(seed)
    hi = 1 + 8 * dose
    while not stop.is_set():
        burst = rng.uniform(1.0, hi) / 1e3
        if rng.random() < dose:
            end = time.perf_counter() + burst
            x = 0
            while time.perf_counter() < end:
                for i in range(100):
                    x += i * i
        else:
            time.sleep(burst)


def gpu_process(seconds, dose, stop):
    dev = torch.device("cuda:0")
    a = torch.randn(6144, 6144, device=dev, dtype=torch.float16)
    b = torch.randn(6144, 6144, device=dev, dtype=torch.float16)
    rng = random.Random(21)
    end = time.time() + seconds
    while time.time() < end and not stop.is_set():
        if rng.random() < dose:
            for _ in range(3):
                a = (a @ b) / 80
            torch.cuda.synchronize()
        else:
            time.sleep(0.003)


def pcie_process(seconds, dose, stop):
    dev = torch.device("cuda:0")
    host = torch.randn(8 * 1024 * 1024 // 4)
    devbuf = torch.empty_like(host, device=dev)
    rng = random.Random(23)
    end = time.time() + seconds
    while time.time() < end and not stop.is_set():
        if rng.random() < dose:
            devbuf.copy_(host)
            host.copy_(devbuf)
            torch.cuda.synchronize()
        else:
            time.sleep(0.002)


class Torch:
    def __init__(self, program, dev):
        torch.manual_seed(0)
        self.dev = dev
        if program == "tf":
            layer = torch.nn.TransformerEncoderLayer(D, 16, 4 * D, batch_first=True)
            self.model = torch.nn.TransformerEncoder(layer, 6).to(dev).half().eval()
        else:
            self.model = torch.nn.Sequential(
                torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
                torch.nn.Conv2d(64, 128, 3, padding=1, stride=2), torch.nn.ReLU(),
                torch.nn.Conv2d(128, 256, 3, padding=1, stride=2), torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(256, 100),
            ).to(dev)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3, momentum=0.9)
        self.program = program

    def serve(self, hin, hout, tokens=128):
        x = hin.to(self.dev, non_blocking=True).view(4, tokens, D).half()
        with torch.no_grad():
            y = self.model(x)
        hout.copy_(y.float().reshape(-1), non_blocking=True)
        torch.cuda.current_stream().synchronize()

    def train_step(self, hin, labels):
        x = hin.to(self.dev, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(self.model(x), labels)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()


class Cupy:
    def __init__(self):
        import cupy as cp
        self.cp = cp
        rs = cp.random.RandomState(0)
        self.ws = [(rs.standard_normal((D, 4 * D), dtype=cp.float32).astype(cp.float16) / 32,
                    rs.standard_normal((4 * D, D), dtype=cp.float32).astype(cp.float16) / 64)
                   for _ in range(8)]

    def serve(self, hin, hout, tokens=128):
        cp = self.cp
        x = cp.asarray(hin[: 4 * tokens * D]).reshape(4 * tokens, D).astype(cp.float16)
        for w1, w2 in self.ws:
            x = x + cp.maximum(x @ w1, 0) @ w2
            x = x / (cp.abs(x).max(axis=1, keepdims=True) + 1)
        out = x.astype(cp.float32).ravel()
        out.get(out=hout[: out.size])
        cp.cuda.Stream.null.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--program", choices=("tf", "cnn", "cupy"), default="tf")
    ap.add_argument("--mechanism", default="clean",
                    choices=("clean", "gil", "loader", "queue", "gpu", "pcie", "sizes"))
    ap.add_argument("--dose", type=float, default=0.0)
    ap.add_argument("--units", type=int, default=400)
    args = ap.parse_args()
    dev = torch.device("cuda:0")
    prog, mech, dose = args.program, args.mechanism, args.dose
    nv = Nvtx(prog)
    engine = Cupy() if prog == "cupy" else Torch(prog, dev)
    import numpy as np
    pageable = mech == "pcie"
    if prog == "cnn":
        images = [torch.randn(64, 3, 64, 64).pin_memory() for _ in range(4)]
        labels = torch.randint(0, 100, (64,), device=dev)
    elif prog == "cupy":
        hin = np.random.default_rng(0).standard_normal(4 * 2048 * D).astype(np.float32)
        hout = np.empty(4 * 2048 * D, np.float32)
        if not pageable:
            import cupyx
            pin_in = cupyx.empty_pinned(hin.shape, np.float32)
            pin_in[:] = hin
            hin, hout = pin_in, cupyx.empty_pinned(hout.shape, np.float32)
    else:
        hin = torch.randn(4 * 128 * D, pin_memory=not pageable)
        hout = torch.empty(4 * 128 * D, pin_memory=not pageable)

    def unit_work(i, rng):
        if prog == "cnn":
            engine.train_step(images[i % len(images)], labels)
            return
        if mech == "sizes":
            tokens = int(min(2048, 32 * rng.paretovariate(1.3)))
            tokens -= tokens % 8
            if prog == "cupy":
                engine.serve(hin, hout, tokens)
            else:
                # a buffer of the request's own size: the caching host allocator grows
                # (cudaHostAlloc) whenever a size larger than any cached one arrives
                buf_in = torch.empty(4 * tokens * D, pin_memory=True).normal_()
                buf_out = torch.empty(4 * tokens * D, pin_memory=True)
                engine.serve(buf_in, buf_out, tokens)
            return
        engine.serve(hin, hout)

    rng = random.Random(5)
    for i in range(20):  # warm-up outside the measured ranges
        unit_work(i, random.Random(99))
    torch.cuda.synchronize()

    stop = threading.Event()
    threads, procs = [], []
    ctx = mp.get_context("spawn")
    # the other processes stop when asked and exit on their own, so that nsys flushes
    # their CUDA events (a terminated process keeps a handful)
    proc_stop = ctx.Event()
    if mech == "gil" and dose > 0:
        threads.append(threading.Thread(target=gil_holder, args=(stop, dose), daemon=True))
    if mech == "gpu" and dose > 0:
        procs.append(ctx.Process(target=gpu_process, args=(90, dose, proc_stop), daemon=True))
    if mech == "pcie" and dose > 0:
        procs.append(ctx.Process(target=pcie_process, args=(90, dose, proc_stop), daemon=True))
    for p in procs:
        p.start()
    if procs:
        time.sleep(8)  # the other process creates its context first
    for t in threads:
        t.start()

    name = {"tf": "infer", "cnn": "step", "cupy": "handle"}[prog]
    loader = random.Random(31)
    lat = []

    def one(i):
        if mech == "loader" and loader.random() < dose:
            end = time.perf_counter() + loader.uniform(3, 3 + 12 * dose) / 1e3
            x = 0
            while time.perf_counter() < end:  # decoding/augmenting in the unit's thread
                x += 1
        if prog == "tf":
            nv.push("encode")
        unit_work(i, rng)
        if prog == "tf":
            nv.pop()

    if mech == "queue":
        t0 = time.perf_counter()
        one(-1)
        svc = time.perf_counter() - t0
        q = queue.Queue()

        def producer():
            arr = random.Random(7)
            for i in range(args.units):
                time.sleep(arr.expovariate(dose / svc))
                q.put((i, nv.start(name), time.perf_counter()))
            q.put(None)

        pt = threading.Thread(target=producer, daemon=True)
        pt.start()
        while (item := q.get(timeout=60)) is not None:
            i, h, ta = item
            one(i)
            nv.end(h)
            lat.append(time.perf_counter() - ta)
        pt.join(timeout=60)
    else:
        for i in range(args.units):
            ta = time.perf_counter()
            nv.push(name)
            one(i)
            nv.pop()
            lat.append(time.perf_counter() - ta)
    stop.set()
    for t in threads:
        t.join(timeout=5)
    torch.cuda.synchronize()
    proc_stop.set()
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.terminate()
    lat.sort()
    n = len(lat)
    print(f"program={prog} mechanism={mech} dose={dose} n={n} p50_ms={lat[n // 2] * 1e3:.3f} "
          f"p90_ms={lat[int(n * 0.9)] * 1e3:.3f} p99_ms={lat[int(n * 0.99)] * 1e3:.3f} "
          f"p99/p50={lat[int(n * 0.99)] / lat[n // 2]:.2f}", flush=True)


if __name__ == "__main__":
    main()
