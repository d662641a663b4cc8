"""Long mutation-fuzzing runs: ``python bench/fuzz_long.py --cases 2000 --seed 1``.

Each case takes one of the small base exports of ``fixtures/fuzz.py``, applies 1-4 random
mutations (values set to huge/negative/NULL/text/invalid UTF-8, tables or columns dropped,
rows duplicated, strings corrupted) and runs open + info + views + analyses + diagnose on
it (:func:`fixtures.fuzz.exercise`). The property: only nsysdiag's own errors escape and
results are finite and consistent. Unlike the hypothesis tests (``tests/test_fuzz.py``),
which stop at the first failure, this keeps going and prints every distinct failure with
the first case that showed it, so it can run for hours.

Prints the cases run, the failures, the distinct failures (``[known]`` marks those in
``fixtures.fuzz.KNOWN_BUGS``) and, per distinct failure, a reproducer (base and
mutations) and the last frames of the traceback. Exit status 1 when a case failed.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.fuzz import exercise, known_bug, random_case, write_case  # noqa: E402


def _signature(exc: BaseException) -> str:
    """Failure kind: exception type and the innermost nsysdiag frame."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "nsysdiag" in f.filename
              or "fixtures" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    head = str(exc).splitlines()[0][:120] if str(exc) else ""
    if type(exc).__name__ != "PropertyError":
        head = head.split("(")[0][:60]
    known = "[known] " if known_bug(exc) else ""
    return f"{known}{type(exc).__name__} at {where}: {head}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000, help="cases to run [1000]")
    ap.add_argument("--seed", type=int, default=0, help="seed of the case generator [0]")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    ap.add_argument("--progress", type=int, default=100, help="print progress every N cases")
    args = ap.parse_args(argv)
    warnings.simplefilter("error")  # as the test suite does: a warning is a failure

    rng = random.Random(args.seed)
    failures: dict[str, list[tuple[int, str, list, str]]] = collections.defaultdict(list)
    outcomes: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()
    run = 0
    with tempfile.TemporaryDirectory(prefix="nsysdiag-fuzz-") as tmp:
        tmp_dir = Path(tmp)
        for i in range(args.cases):
            if args.max_seconds is not None and time.monotonic() - t0 > args.max_seconds:
                break
            base, muts = random_case(rng, tmp_dir)
            path = write_case(base, muts, tmp_dir / "case.sqlite")
            try:
                errors = exercise(path)
                outcomes["nsysdiag error" if errors else "ok"] += 1
            except Exception as exc:  # noqa: BLE001 - that is what we are counting
                sig = _signature(exc)
                tb = "".join(traceback.format_exception(exc)[-6:])
                failures[sig].append((i, base, muts, tb))
                outcomes["FAILED"] += 1
            run += 1
            if args.progress and run % args.progress == 0:
                print(f"  {run} cases, {sum(len(v) for v in failures.values())} failures, "
                      f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)

    elapsed = time.monotonic() - t0
    n_fail = sum(len(v) for v in failures.values())
    print(f"seed {args.seed}: {run} cases in {elapsed:.0f} s ({elapsed / max(run, 1):.2f} s/case)")
    print(f"outcomes: {dict(outcomes)}")
    n_known = sum(len(v) for k, v in failures.items() if k.startswith("[known]"))
    print(f"failures: {n_fail} ({len(failures)} distinct; {n_known} of them known bugs "
          "listed in fixtures.fuzz.KNOWN_BUGS)")
    for sig, cases in sorted(failures.items(), key=lambda kv: -len(kv[1])):
        i, base, muts, tb = cases[0]
        print(f"\n[{len(cases)}x] {sig}")
        print(f"  first: case {i}, base {base!r}, mutations:")
        for m in muts:
            print(f"    {m}    # {m!r}")
        print("  " + tb.rstrip().replace("\n", "\n  "))
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
