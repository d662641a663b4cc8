#!/usr/bin/env python3
"""Make the exports of a distributed training run: N ranks, one export each, for the
``nsysdiag ranks`` benchmark (issue 38: 8 ranks of 1M kernels in <= 60 s cold).

Each rank runs steps of 10 GEMM launches and an all-reduce the step waits for (an NVTX
``train_step`` range per step), built with ``fixtures/nsysbuild.py`` for one tile of
``--steps`` steps and tiled with ``bench/make_large.py`` to ``--kernels`` kernels. Rank
``--straggler``'s launching thread stalls 3 ms between two launches in 5% of the steps,
so its all-reduce arrives late there and every other rank waits.

    python bench/make_ranks.py --ranks 8 --kernels 1_000_000 --out /tmp/ranks
    python -m nsysdiag --no-cache ranks /tmp/ranks/rank*.sqlite
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import make_large  # noqa: E402

from fixtures.nsysbuild import TraceBuilder  # noqa: E402

US, MS = 1_000, 1_000_000
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
UTC0 = 1_750_000_000_000_000_000


def tile(rank: int, ranks: int, steps: int, straggler: int) -> TraceBuilder:
    b = TraceBuilder(pid=1000 + rank)
    b.session_start(UTC0)
    stalled = {i for i in range(steps) if i % 20 == 7}

    def arrival(i: int, r: int) -> int:  # a few us of jitter per rank, 3 ms for a stall
        return (i * 5 * MS + 1200 * US + 7 * US * ((i + r) % 5)
                + (3 * MS if r == straggler and i in stalled else 0))

    for i in range(steps):
        s = i * 5 * MS
        extra = 0
        for k in range(10):
            if rank == straggler and i in stalled and k == 5:
                extra = 3 * MS
            t = s + 50 * US + k * 100 * US + extra
            b.launch(t, t + 5 * US, t + 10 * US, t + 90 * US, name="gemm")
        mine = arrival(i, rank)
        end = max(arrival(i, r) for r in range(ranks)) + 300 * US  # every rank ends together
        b.launch(mine - 5 * US, mine, mine, end, name=AR, stream=13)
        b.nvtx(s, end + 10 * US, "train_step")
    # a last call at the same time on every rank, so every tile spans the same time (the
    # copies make_large lays end to end then start at the same times on every rank)
    b.api(steps * 5 * MS - 10 * US, steps * 5 * MS, "cudaDeviceSynchronize")
    return b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--kernels", type=lambda s: int(s.replace("_", "")), default=1_000_000,
                   help="kernels per rank (default 1M)")
    p.add_argument("--steps", type=int, default=2000, help="steps in one tile")
    p.add_argument("--straggler", type=int, default=3)
    p.add_argument("--out", required=True, help="output folder (rank<N>.sqlite)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.ranks):
            src = Path(tmp) / f"tile{r}.sqlite"
            tile(r, args.ranks, args.steps, args.straggler).write(src)
            make_large.main(["--src", str(src), "--kernels", str(args.kernels),
                             "--out", str(out / f"rank{r}.sqlite")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
