#!/usr/bin/env python3
"""Make a large, realistic Nsight Systems SQLite export by tiling a real one.

The source export (default: the H200 serving-loop capture
``/work/shared/corpus/h200/baseline.sqlite``, about 112k kernels and 252k
CUDA runtime calls) is copied ``K`` times back to back on the time axis:

* **Time-varying tables** -- every table with a ``start``, ``end`` or
  ``timestamp`` column, or with a ``correlationId`` column
  (``CUPTI_ACTIVITY_KIND_*``, ``NVTX_EVENTS``, ``OSRT_API``,
  ``PROFILER_OVERHEAD``, ``DIAGNOSTIC_EVENT``, ``CUPTI_ACTIVITY_KIND_CUDA_EVENT``
  ...) -- get ``K`` copies of their rows.  Copy ``k`` (0-based) has

  - ``start``/``end``/``timestamp`` + ``k * period``, where ``period`` is the
    source trace span (``ANALYSIS_DETAILS.duration``, or the span of all its
    timestamps if that is larger or the table is missing);
  - ``correlationId`` + ``k * (max correlationId + 1)``, the max taken over
    every table, so API calls and their GPU work stay linked and ids stay
    unique per process;
  - the other per-row ids shifted the same way with their own stride:
    ``gridId`` (kernels), ``eventSyncId`` (CUDA event record <-> sync),
    ``NVTX_EVENTS.eventId`` and ``rangeId`` where present.

  Id values that mean "none" (NULL, 0, or >= 0xFFFFFFFF such as the
  4294967295 sentinel in ``eventSyncId``) are left as they are.  Handle-like
  ids (CUDA ``eventId`` of an event record/sync, ``callchainId``,
  ``graphNodeId``, string ids) are kept, as a real long capture would reuse
  them.
* **Every other table** (``StringIds``, ``TARGET_INFO_*``, ``ENUM_*``,
  ``META_DATA_*``, ``PROCESSES``, ``ThreadNames``, ``OSRT_CALLCHAINS``, ...) is
  copied once.  ``ANALYSIS_DETAILS.duration``/``stopTime`` and
  ``META_DATA_CAPTURE.RUN_DURATION_MS`` are stretched to the new span.

Tables are created from the source's own ``CREATE`` statements, so columns,
types and comments are identical; rows come out in the source's order within
each copy and copies follow each other in time.  The copy runs entirely inside
SQLite (``ATTACH`` + ``INSERT ... SELECT`` with arithmetic, one transaction,
``journal_mode=OFF``, ``synchronous=OFF``); Python never touches a row.

Examples
--------
::

    python bench/make_large.py --kernels 10000000 --out bench/out/large_10m.sqlite
    python bench/make_large.py --copies 3 --out /tmp/x.sqlite --verify
    python bench/make_large.py --kernels 10000000 --out bench/out/large_10m.sqlite --verify-only

``--verify`` re-opens the result and checks that row counts, duplicate
correlationIds per process, kernels without a runtime call and the number of
out-of-order ``start`` values are exactly ``K`` times the source's, and that
copies do not overlap in time or in correlationId.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sqlite3
import sys
import time
import urllib.parse
from dataclasses import dataclass, field

DEFAULT_SRC = "/work/shared/corpus/h200/baseline.sqlite"
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"

TIME_COLS = ("start", "end", "timestamp")
# Id families shifted per copy.  Key: column name; value: tables it applies to
# (None = every time-varying table that has the column).  The stride of a family
# is max(value)+1 over all the tables it applies to, so ids that link rows of
# different tables (correlationId, eventSyncId) stay linked.
ID_FAMILIES: dict[str, tuple[str, ...] | None] = {
    "correlationId": None,
    "eventSyncId": None,
    "gridId": None,
    "eventId": ("NVTX_EVENTS",),  # unique per NVTX row in newer exports;
    # in CUDA_EVENT / SYNCHRONIZATION it is a CUDA event handle -> kept.
    "rangeId": ("NVTX_EVENTS",),
}
# Values outside (0, NONE_ID) mean "no id" and are not shifted.
NONE_ID = 0xFFFFFFFF


def q(name: str) -> str:
    """Quote an SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Table:
    name: str
    sql: str
    columns: list[str]
    rows: int
    time_cols: list[str] = field(default_factory=list)
    id_cols: list[str] = field(default_factory=list)

    @property
    def tiled(self) -> bool:
        return bool(self.time_cols) or "correlationId" in self.columns


@dataclass
class Plan:
    tables: list[Table]
    indexes: list[str]
    copies: int
    period: int
    strides: dict[str, int]
    src_kernels: int
    page_size: int
    analysis: tuple[int, int, int] | None  # duration, startTime, stopTime


def read_source(con: sqlite3.Connection) -> tuple[list[Table], list[str]]:
    tables: list[Table] = []
    for name, sql in con.execute(
        "SELECT name, sql FROM src.sqlite_master WHERE type = 'table' "
        "AND name NOT LIKE 'sqlite_%' ORDER BY rootpage"
    ):
        cols = [r[1] for r in con.execute(f"PRAGMA src.table_info({q(name)})")]
        rows = con.execute(f"SELECT count(*) FROM src.{q(name)}").fetchone()[0]
        t = Table(name, sql, cols, rows)
        t.time_cols = [c for c in TIME_COLS if c in cols]
        tables.append(t)
    for t in tables:
        if not t.tiled:
            continue
        for col, only in ID_FAMILIES.items():
            if col in t.columns and (only is None or t.name in only):
                t.id_cols.append(col)
    indexes = [
        sql
        for (sql,) in con.execute(
            "SELECT sql FROM src.sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        )
    ]
    return tables, indexes


def make_plan(con: sqlite3.Connection, kernels: int | None, copies: int | None) -> Plan:
    tables, indexes = read_source(con)
    by_name = {t.name: t for t in tables}
    if KERNEL_TABLE not in by_name or by_name[KERNEL_TABLE].rows == 0:
        sys.exit(f"error: source has no rows in {KERNEL_TABLE}")
    src_kernels = by_name[KERNEL_TABLE].rows
    if copies is None:
        copies = max(1, math.ceil(kernels / src_kernels))

    # Span of every timestamp in the time-varying tables.
    lo, hi = None, None
    for t in tables:
        for c in t.time_cols:
            a, b = con.execute(f"SELECT min({q(c)}), max({q(c)}) FROM src.{q(t.name)}").fetchone()
            if a is not None:
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
    if lo is None:
        sys.exit("error: source has no timestamps")
    period = hi - lo + 1
    analysis = None
    if "ANALYSIS_DETAILS" in by_name and by_name["ANALYSIS_DETAILS"].rows == 1:
        analysis = con.execute(
            "SELECT duration, startTime, stopTime FROM src.ANALYSIS_DETAILS"
        ).fetchone()
        period = max(period, analysis[0])

    strides: dict[str, int] = {}
    for col in ID_FAMILIES:
        mx = 0
        for t in tables:
            if col in t.id_cols:
                v = con.execute(
                    f"SELECT max({q(col)}) FROM src.{q(t.name)} "
                    f"WHERE {q(col)} > 0 AND {q(col)} < {NONE_ID}"
                ).fetchone()[0]
                if v is not None:
                    mx = max(mx, v)
        if mx:
            strides[col] = mx + 1
    page_size = con.execute("PRAGMA src.page_size").fetchone()[0]
    return Plan(tables, indexes, copies, period, strides, src_kernels, page_size, analysis)


def select_for_copy(t: Table, plan: Plan) -> str:
    """SELECT list for one copy; :toff is the time offset, :<col> each id offset."""
    exprs = []
    for c in t.columns:
        if c in t.time_cols:
            exprs.append(f"{q(c)} + :toff")
        elif c in t.id_cols and c in plan.strides:
            exprs.append(
                f"CASE WHEN {q(c)} > 0 AND {q(c)} < {NONE_ID} THEN {q(c)} + :{c} ELSE {q(c)} END"
            )
        else:
            exprs.append(q(c))
    cols = ", ".join(q(c) for c in t.columns)
    return f"INSERT INTO main.{q(t.name)} ({cols}) SELECT {', '.join(exprs)} FROM src.{q(t.name)}"


def build(plan: Plan, con: sqlite3.Connection) -> None:
    con.executescript(
        f"""
        PRAGMA main.page_size = {plan.page_size};
        PRAGMA main.journal_mode = OFF;
        PRAGMA main.synchronous = OFF;
        PRAGMA main.locking_mode = EXCLUSIVE;
        PRAGMA main.cache_size = -262144;
        PRAGMA temp_store = MEMORY;
        """
    )
    con.execute("BEGIN")
    for t in plan.tables:
        con.execute(t.sql)
    for t in plan.tables:
        t0 = time.perf_counter()
        if not t.tiled:
            con.execute(f"INSERT INTO main.{q(t.name)} SELECT * FROM src.{q(t.name)}")
            continue
        stmt = select_for_copy(t, plan)
        used = [c for c in t.id_cols if c in plan.strides]
        for k in range(plan.copies):
            params = {"toff": k * plan.period}
            params.update({c: k * plan.strides[c] for c in used})
            con.execute(stmt, params)
        if t.rows * plan.copies >= 1_000_000:
            print(
                f"  {t.name}: {t.rows * plan.copies:,} rows in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
    if plan.analysis is not None:
        duration, start, _stop = plan.analysis
        new_duration = duration + (plan.copies - 1) * plan.period
        con.execute(
            "UPDATE main.ANALYSIS_DETAILS SET duration = ?, stopTime = ?",
            (new_duration, start + new_duration),
        )
    names = {t.name for t in plan.tables}
    if "META_DATA_CAPTURE" in names:
        extra_ms = (plan.copies - 1) * plan.period / 1e6
        con.execute(
            "UPDATE main.META_DATA_CAPTURE "
            "SET value = CAST(round(CAST(value AS REAL) + ?) AS INTEGER) "
            "WHERE name = 'RUN_DURATION_MS' AND value GLOB '[0-9]*'",
            (extra_ms,),
        )
    for sql in plan.indexes:
        con.execute(sql)
    con.execute("COMMIT")


# ---------------------------------------------------------------- verification


def _invariants(con: sqlite3.Connection, schema: str, tables: list[Table]) -> dict[str, int]:
    """Counts that must scale exactly by K from source to output."""
    names = {t.name: t for t in tables}
    out: dict[str, int] = {}
    for t in tables:
        if not t.tiled:
            continue
        for c in t.time_cols[:1]:
            out[f"{t.name}: rows with {c} < previous row's"] = con.execute(
                f"SELECT count(*) FROM (SELECT {q(c)} - lag({q(c)}) OVER (ORDER BY rowid) AS d "
                f"FROM {schema}.{q(t.name)}) WHERE d < 0"
            ).fetchone()[0]
        if "correlationId" in t.columns:
            pid = (
                "globalPid"
                if "globalPid" in t.columns
                else ("(globalTid >> 24) & 16777215" if "globalTid" in t.columns else "0")
            )
            out[f"{t.name}: extra rows sharing (process, correlationId)"] = con.execute(
                f"SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n "
                f"FROM {schema}.{q(t.name)} WHERE correlationId IS NOT NULL "
                f"GROUP BY {pid}, correlationId)"
            ).fetchone()[0]
    if KERNEL_TABLE in names and RUNTIME_TABLE in names:
        out["kernels without a runtime call"] = con.execute(
            f"SELECT count(*) FROM {schema}.{KERNEL_TABLE} WHERE correlationId NOT IN "
            f"(SELECT correlationId FROM {schema}.{RUNTIME_TABLE} WHERE correlationId IS NOT NULL)"
        ).fetchone()[0]
    return out


def verify(src: str, out: str, plan: Plan) -> bool:
    con = sqlite3.connect("file:" + urllib.parse.quote(out) + "?mode=ro", uri=True)
    con.execute("ATTACH ? AS src", ("file:" + urllib.parse.quote(src) + "?mode=ro",))
    K, ok = plan.copies, True

    def check(label: str, got: int, want: int) -> None:
        nonlocal ok
        good = got == want
        ok &= good
        print(f"  [{'ok' if good else 'FAIL'}] {label}: {got:,} (want {want:,})")

    print("verify: row counts")
    once_bad = []
    for t in plan.tables:
        n = con.execute(f"SELECT count(*) FROM main.{q(t.name)}").fetchone()[0]
        if t.tiled:
            check(t.name, n, t.rows * K)
        elif n != t.rows:
            once_bad.append(t.name)
    check("tables copied once whose row count differs from the source", len(once_bad), 0)

    print("verify: copies follow each other in time and in ids")
    for t in plan.tables:
        if not t.tiled or t.rows == 0:
            continue
        aggs = []
        for c in t.time_cols:
            aggs += [f"min({q(c)})", f"max({q(c)})"]
        for c in t.id_cols:
            if c in plan.strides:
                aggs += [
                    f"min(CASE WHEN {q(c)} > 0 AND {q(c)} < {NONE_ID} THEN {q(c)} END)",
                    f"max(CASE WHEN {q(c)} > 0 AND {q(c)} < {NONE_ID} THEN {q(c)} END)",
                ]
        if not aggs:
            continue
        rows = con.execute(
            f"SELECT (rowid - 1) / {t.rows} AS k, {', '.join(aggs)} FROM main.{q(t.name)} "
            f"GROUP BY k ORDER BY k"
        ).fetchall()
        # Time: the latest time of copy k must precede the earliest of copy k+1.
        bad = 0
        for a, b in zip(rows, rows[1:], strict=False):
            nt = len(t.time_cols)
            lo_next = min(v for v in b[1 : 1 + 2 * nt : 2] if v is not None) if nt else None
            hi_prev = max(v for v in a[2 : 2 + 2 * nt : 2] if v is not None) if nt else None
            if nt and not hi_prev < lo_next:
                bad += 1
            for j in range(1 + 2 * nt, len(a), 2):  # id ranges disjoint, increasing
                if a[j + 1] is not None and b[j] is not None and not a[j + 1] < b[j]:
                    bad += 1
        check(f"{t.name}: copies ({len(rows)}) overlapping previous one", bad, 0)

    print("verify: invariants scale by K")
    src_inv = _invariants(con, "src", plan.tables)
    out_inv = _invariants(con, "main", plan.tables)
    for label, v in src_inv.items():
        check(label, out_inv[label], v * K)
    con.close()
    return ok


# ---------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring for what is shifted and how.",
    )
    p.add_argument(
        "--src", default=DEFAULT_SRC, help="source nsys SQLite export (default: %(default)s)"
    )
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument(
        "--kernels",
        type=lambda s: int(s.replace("_", "")),
        help="target kernel count (underscores allowed); K = ceil(N / source kernels)",
    )
    size.add_argument("--copies", type=int, help="number of copies K, instead of --kernels")
    p.add_argument("--out", required=True, help="output .sqlite path (overwritten)")
    p.add_argument(
        "--verify", action="store_true", help="check the result afterwards (slow: full scans)"
    )
    p.add_argument(
        "--verify-only",
        action="store_true",
        help="do not write anything; check an --out made earlier with the same --src/size",
    )
    args = p.parse_args(argv)
    for flag, value in (("--kernels", args.kernels), ("--copies", args.copies)):
        if value is not None and value <= 0:
            p.error(f"{flag} must be positive, got {value}")
    src = os.path.abspath(args.src)
    out = os.path.abspath(args.out)
    if not os.path.isfile(src):
        p.error(f"--src {src!r}: no such file")
    if src == out:
        p.error("--out must differ from --src")
    src_uri = "file:" + urllib.parse.quote(src) + "?mode=ro"

    if args.verify_only:
        if not os.path.isfile(out):
            p.error(f"--out {out!r}: no such file")
        con = sqlite3.connect(":memory:")
        con.execute("ATTACH ? AS src", (src_uri,))
        plan = make_plan(con, args.kernels, args.copies)
        con.close()
        print(f"verify {out} against {src}, K = {plan.copies}")
        t1 = time.perf_counter()
        ok = verify(src, out, plan)
        print(f"verify: {'passed' if ok else 'FAILED'} in {time.perf_counter() - t1:.1f} s")
        return 0 if ok else 1

    t0 = time.perf_counter()
    tmp = out + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    # URI names so that the source can be attached read-only.
    con = sqlite3.connect("file:" + urllib.parse.quote(tmp), uri=True, isolation_level=None)
    con.execute("ATTACH ? AS src", (src_uri,))
    plan = make_plan(con, args.kernels, args.copies)

    need = os.path.getsize(src) * plan.copies
    free = shutil.disk_usage(os.path.dirname(out)).free
    if need * 1.1 > free:
        con.close()
        os.remove(tmp)
        sys.exit(f"error: need about {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free at {out}")
    print(
        f"source: {src} ({plan.src_kernels:,} kernels, {os.path.getsize(src) / 2**20:.1f} MiB)\n"
        f"copies: K = {plan.copies}, period {plan.period:,} ns, id strides "
        + ", ".join(f"{c} {s:,}" for c, s in plan.strides.items()),
        flush=True,
    )
    build(plan, con)
    con.close()
    os.replace(tmp, out)
    secs = time.perf_counter() - t0

    tiled = sorted((t for t in plan.tables if t.tiled), key=lambda t: -t.rows)
    print(f"wrote {out}: {os.path.getsize(out) / 2**20:,.1f} MiB in {secs:.1f} s")
    print(f"  span {plan.copies * plan.period / 1e9:,.1f} s; tiled tables (rows):")
    for t in tiled:
        print(f"    {t.name}: {t.rows * plan.copies:,}")
    print(f"  {sum(not t.tiled for t in plan.tables)} other tables copied once")
    if args.verify:
        t1 = time.perf_counter()
        ok = verify(src, out, plan)
        print(f"verify: {'passed' if ok else 'FAILED'} in {time.perf_counter() - t1:.1f} s")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
