"""Plant a mechanism into a copy of a real SQLite export (the detection benchmark's tool).

Each planter rewrites rows of a *copy* of an export the way the mechanism would have
changed the capture, inside chosen units (instances of the NVTX range the diagnosis
chose), so that everything else keeps the baseline's natural jitter:

- ``stall_between``: the launching thread stops between two CUDA calls in the middle of
  the unit for ``d`` ns (another thread holds the GIL, Python work): every host event from
  that instant on moves later by ``d`` (events that span it end ``d`` later), and the GPU
  work of the calls that moved moves with them. The GPU drains what was queued and idles.
- ``stall_before``: the same stretch just after the unit opens, before its first CUDA call
  (a data loader or input preparation in the launching thread).
- ``queueing``: the unit's range opens ``d`` ns earlier, its work unchanged (the request
  waited for the worker before its work began).
- ``other_gpu``: another process' kernels occupy the GPU for ``d`` ns from one of the
  unit's kernels on; the unit's own GPU work waits for them (a queue replayed in launch
  order on each stream), and the unit's closing synchronization returns when its work is
  done, moving the rest of the host's events.
- ``pcie``: the unit's copies take ``d`` ns longer in all, sharing the link with another
  process' copies in the same direction that overlap them; the GPU queue and the closing
  synchronization as for ``other_gpu``.
- ``volume``: the unit uploads more bytes: one more host-to-device copy (a short async
  call on the host, ``d`` ns on the link at 20 GB/s).
- ``more_work``: the unit launches a block of its own calls again (the same kernels, the
  same host time per call), adding about ``d`` ns of host time.

All times are ns. The planters assume the trace's CPU-side tables carry ``start``/``end``
and the GPU-side tables ``correlationId`` matched to ``CUPTI_ACTIVITY_KIND_RUNTIME``.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import numpy as np

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET")
HOST_TABLES = (RUNTIME, "NVTX_EVENTS", "OSRT_API", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
               "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "OSRT_CALLCHAINS")
#: the process id the planted other work runs under (not a pid of the baselines)
OTHER_PID = 0x7E570000 << 24
OTHER_STREAM = 4242


@dataclass(frozen=True)
class Unit:
    row: int  #: NVTX_EVENTS rowid
    start: int
    end: int
    tid: int  #: globalTid of the thread that opened it


class Export:
    """A writable copy of an export, with the rows a planter needs."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(path)
        names = {r[0] for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        self.host = [t for t in HOST_TABLES if t in names and self._has(t, "start")]
        self.gpu = [t for t in GPU_TABLES if t in names]
        self._next_corr = int(self.db.execute(
            f"SELECT coalesce(max(correlationId), 0) FROM {RUNTIME}").fetchone()[0]) + 1

    def _has(self, table: str, column: str) -> bool:
        return any(r[1] == column for r in self.db.execute(f"PRAGMA table_info({table})"))

    def close(self) -> None:
        self.db.commit()
        self.db.close()

    def units(self, name: str) -> list[Unit]:
        rows = self.db.execute(
            "SELECT rowid, start, end, globalTid FROM NVTX_EVENTS WHERE end IS NOT NULL AND "
            "coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) = ? "
            "ORDER BY start", (name,)).fetchall()
        return [Unit(*map(int, r)) for r in rows]

    def unit(self, row: int) -> Unit:
        r = self.db.execute("SELECT rowid, start, end, globalTid FROM NVTX_EVENTS "
                            "WHERE rowid = ?", (row,)).fetchone()
        return Unit(*map(int, r))

    def calls(self, u: Unit, name_like: str | None = None) -> list[tuple[int, int, int]]:
        """(start, end, correlationId) of the unit's thread's CUDA calls inside it."""
        q = (f"SELECT r.start, r.end, r.correlationId FROM {RUNTIME} r "
             "WHERE r.globalTid = ? AND r.start >= ? AND r.end <= ?")
        args: list = [u.tid, u.start, u.end]
        if name_like:
            q += " AND r.nameId IN (SELECT id FROM StringIds WHERE value LIKE ?)"
            args.append(name_like)
        return [tuple(map(int, r)) for r in self.db.execute(q + " ORDER BY r.start", args)]

    # -- primitives ---------------------------------------------------------------------
    def host_shift(self, t: int, d: int, tid: int | None = None) -> None:
        """Every host event from ``t`` on moves ``d`` later (one spanning ``t`` ends ``d``
        later, except an OS call of thread ``tid``, which is busy, not in that call), and
        the GPU work of the CUDA calls that moved moves with them, as does planted other
        work from ``t`` on."""
        for g in self.gpu:
            self.db.execute(
                f"UPDATE {g} SET start = start + ?1, end = end + ?1 WHERE correlationId IN "
                f"(SELECT correlationId FROM {RUNTIME} WHERE start >= ?2) "
                "OR (globalPid = ?3 AND start >= ?2)", (d, t, OTHER_PID))
        for h in self.host:
            busy = " AND globalTid != ?3" if h == "OSRT_API" and tid is not None else ""
            self.db.execute(f"UPDATE {h} SET end = end + ?1 WHERE start < ?2 AND end > ?2"
                            + busy, (d, t, tid) if busy else (d, t))
            self.db.execute(f"UPDATE {h} SET start = start + ?1, end = end + ?1 "
                            "WHERE start >= ?2", (d, t))

    def own_gpu(self, u: Unit) -> list[tuple[str, int, int, int, int]]:
        """(table, rowid, start, end, stream) of the GPU work the unit's calls launched."""
        out = []
        for g in self.gpu:
            out += [(g, *map(int, r)) for r in self.db.execute(
                f"SELECT k.rowid, k.start, k.end, k.streamId FROM {g} k JOIN {RUNTIME} r "
                "USING (correlationId) WHERE r.globalTid = ? AND r.start >= ? "
                "AND r.start <= ?", (u.tid, u.start, u.end))]
        return sorted(out, key=lambda x: x[2])

    def replay(self, u: Unit, busy: tuple[int, int] | None,
               longer: dict[tuple[str, int], int] | None = None) -> None:
        """Replay the unit's own GPU work in order on each stream: each piece starts when
        its stream is free, not inside ``busy`` (other work holding the GPU), and pieces
        in ``longer`` last that much more. Then the unit's last synchronization returns
        when its work is done, and the host events after it move by the delay."""
        longer = longer or {}
        free: dict[int, int] = {}
        last_old = last_new = 0
        for table, rowid, start, end, stream in self.own_gpu(u):
            dur = end - start + longer.get((table, rowid), 0)
            s = max(start, free.get(stream, 0))
            if busy is not None and s < busy[1] and s + dur > busy[0] and start >= busy[0]:
                s = max(s, busy[1])
            free[stream] = s + dur
            last_old, last_new = max(last_old, end), max(last_new, s + dur)
            if s != start or s + dur != end:
                self.db.execute(f"UPDATE {table} SET start = ?, end = ? WHERE rowid = ?",
                                (s, s + dur, rowid))
        syncs = self.calls(u, "%Synchronize%")
        if not syncs or last_new <= last_old:
            return
        s_start, s_end, _ = syncs[-1]
        delay = last_new + 2000 - s_end
        if delay > 0:
            self.host_shift(s_end - 1, delay)

    def add_kernels(self, t: int, d: int, device: int, template_rowid: int) -> None:
        """Another process' kernels on its own stream covering [t, t + d)."""
        piece = max(d // 8, 1)
        for i in range(0, d, piece):
            self.db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM "
                "CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = ?", (template_rowid,))
            self.db.execute(
                "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ?, end = ?, streamId = ?, "
                "globalPid = ?, correlationId = ?, deviceId = ? WHERE rowid = "
                "last_insert_rowid()",
                (t + i, t + min(i + piece, d), OTHER_STREAM, OTHER_PID, self._corr(), device))

    def _corr(self) -> int:
        self._next_corr += 1
        return self._next_corr

    def copy_row(self, table: str, rowid: int, **values: int) -> int:
        """Insert a copy of a row with some columns changed; the new rowid."""
        self.db.execute(f"INSERT INTO {table} SELECT * FROM {table} WHERE rowid = ?", (rowid,))
        new = int(self.db.execute("SELECT last_insert_rowid()").fetchone()[0])
        sets = ", ".join(f"{k} = ?" for k in values)
        self.db.execute(f"UPDATE {table} SET {sets} WHERE rowid = ?", (*values.values(), new))
        return new


# -- planters ------------------------------------------------------------------------
def _middle_gap(ex: Export, u: Unit, rng: np.random.Generator) -> int | None:
    calls = ex.calls(u)
    if len(calls) < 4:
        return None
    i = int(rng.integers(len(calls) // 4, 3 * len(calls) // 4))
    return calls[i][1] + 1


def stall_between(ex: Export, u: Unit, d: int, rng: np.random.Generator) -> bool:
    t = _middle_gap(ex, u, rng)
    if t is None:
        return False
    ex.host_shift(t, d, u.tid)
    return True


def stall_before(ex: Export, u: Unit, d: int, rng: np.random.Generator) -> bool:
    calls = ex.calls(u)
    if not calls:
        return False
    ex.host_shift(min(u.start + 1, calls[0][0]), d, u.tid)
    return True


def queueing(ex: Export, u: Unit, d: int, rng: np.random.Generator) -> bool:
    ex.db.execute("UPDATE NVTX_EVENTS SET start = start - ? WHERE rowid = ?", (d, u.row))
    return True


def other_gpu(ex: Export, u: Unit, d: int, rng: np.random.Generator) -> bool:
    own = [w for w in ex.own_gpu(u) if w[0] == "CUPTI_ACTIVITY_KIND_KERNEL"]
    if len(own) < 4:
        return False
    _, rowid, start, _, _ = own[int(rng.integers(len(own) // 4, 3 * len(own) // 4))]
    device = int(ex.db.execute("SELECT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL "
                               "WHERE rowid = ?", (rowid,)).fetchone()[0])
    ex.replay(u, (start, start + d))
    ex.add_kernels(start, d, device, rowid)
    return True


def pcie(ex: Export, u: Unit, d: int, rng: np.random.Generator) -> bool:
    copies = [w for w in ex.own_gpu(u) if w[0] == "CUPTI_ACTIVITY_KIND_MEMCPY"]
    if not copies:
        return False
    each = d // len(copies)
    ex.replay(u, None, {(w[0], w[1]): each for w in copies})
    for table, rowid, *_ in copies:  # the other process' copy in the same direction
        start, end = ex.db.execute(f"SELECT start, end FROM {table} WHERE rowid = ?",
                                   (rowid,)).fetchone()
        ex.copy_row(table, rowid, start=start - each // 4, end=end + each // 4,
                    globalPid=OTHER_PID, streamId=OTHER_STREAM, correlationId=ex._corr(),
                    bytes=int(64 << 20))
    return True


def volume(ex: Export, u: Unit, d: int, rng: np.random.Generator) -> bool:
    copies = [w for w in ex.own_gpu(u) if w[0] == "CUPTI_ACTIVITY_KIND_MEMCPY"]
    h2d = [w for w in copies if ex.db.execute(
        "SELECT copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE rowid = ?",
        (w[1],)).fetchone()[0] == 1]
    calls = ex.calls(u, "%Memcpy%")
    if not h2d or not calls:
        return False
    call = ex.db.execute(f"SELECT rowid, start, end, correlationId FROM {RUNTIME} WHERE "
                         "correlationId = (SELECT correlationId FROM "
                         "CUPTI_ACTIVITY_KIND_MEMCPY WHERE rowid = ?)",
                         (h2d[0][1],)).fetchone()
    if call is None:
        return False
    c_row, c_start, c_end, _ = map(int, call)
    length = c_end - c_start
    ex.host_shift(c_end + 1, length + 200)
    corr = ex._corr()
    ex.copy_row(RUNTIME, c_row, start=c_end + 100, end=c_end + 100 + length,
                correlationId=corr)
    g_start, g_end = ex.db.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                                   "WHERE rowid = ?", (h2d[0][1],)).fetchone()
    ex.copy_row("CUPTI_ACTIVITY_KIND_MEMCPY", h2d[0][1], start=g_end + 1, end=g_end + 1 + d,
                correlationId=corr, bytes=int(d * 20))  # 20 GB/s = 20 bytes/ns
    ex.replay(ex.unit(u.row), None)
    return True


def more_work(ex: Export, u: Unit, d: int, rng: np.random.Generator) -> bool:
    calls = ex.calls(u)
    if len(calls) < 8:
        return False
    a = int(rng.integers(len(calls) // 8, len(calls) // 2))
    b = a
    while b < len(calls) - 1 and calls[b][1] - calls[a][0] < d:
        b += 1
    lo, hi = calls[a][0], calls[b][0]
    span = hi - lo
    if span <= 0:
        return False
    rows = ex.db.execute(f"SELECT rowid, start, end, correlationId FROM {RUNTIME} WHERE "
                         "globalTid = ? AND start >= ? AND start < ?",
                         (u.tid, lo, hi)).fetchall()
    gpu = {}
    for g in ex.gpu:
        for r in ex.db.execute(f"SELECT rowid, correlationId, start, end FROM {g} WHERE "
                               f"correlationId IN (SELECT correlationId FROM {RUNTIME} "
                               "WHERE globalTid = ? AND start >= ? AND start < ?)",
                               (u.tid, lo, hi)):
            gpu.setdefault(int(r[1]), []).append((g, *map(int, r)))
    ex.host_shift(hi, span)
    for rowid, start, end, corr in rows:
        new = ex._corr()
        ex.copy_row(RUNTIME, rowid, start=start + span, end=end + span, correlationId=new)
        for g, g_row, _, g_start, g_end in gpu.get(int(corr), []):
            ex.copy_row(g, g_row, start=g_start + span, end=g_end + span, correlationId=new)
    ex.replay(ex.unit(u.row), None)
    return True


PLANTERS = {
    "stall_between": stall_between,
    "stall_before": stall_before,
    "queueing": queueing,
    "other_gpu": other_gpu,
    "pcie": pcie,
    "volume": volume,
    "more_work": more_work,
}
