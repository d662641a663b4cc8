"""Sequential passes of the analyses, compiled with numba.

A running state carried from row to row (the furthest end so far, covered time per class)
is a loop no vectorized numpy expression states directly; numba compiles the loop
(``nsysdiag.jit``).
"""

import numpy as np

from ..jit import jit

_jit = jit()
_inline = jit(inline=True)
_allocating = jit(allocates=True)

#: per-key state of the covered-time sweep (``sweep_keys``): furthest end seen, last piece
#: start, end, class, previous interval's start, end, class (the order check), next probe
#: of the key; K_SEEN: any interval seen
K_MAX, K_LAST_S, K_LAST_E, K_LAST_C, K_PREV_S, K_PREV_E, K_PREV_C, K_PROBE, K_SEEN = range(9)
KEY_STATE = K_SEEN + 1


@_jit
def _answer_key(keys, cum, k, t, grp, sign, out):
    """Add ``sign * covered(key k, t)`` to ``out[grp]``; t is at or after the key's last
    piece's start, before its next piece's."""
    if keys[k, K_SEEN] == 0 or keys[k, K_LAST_E] < keys[k, K_LAST_S]:
        return  # no piece yet
    for c in range(cum.shape[1]):
        out[grp, c] += sign * cum[k, c]
    le = keys[k, K_LAST_E]
    clipped = min(max(t, keys[k, K_LAST_S]), le)
    out[grp, keys[k, K_LAST_C]] -= sign * (le - clipped)


#: what ``_cut`` returns for an interval out of order for its key
OUT_OF_ORDER = np.iinfo(np.int64).min


@_inline
def _cut(keys, k, s, e, c):
    """Take an interval ``[s, e)`` of class ``c`` into key k's order check; return the
    start of its piece (the part beyond the furthest end of the key's earlier intervals;
    no piece when it is not below ``e``), or ``OUT_OF_ORDER``."""
    if keys[k, K_SEEN] == 1:
        ps, pe, pc = keys[k, K_PREV_S], keys[k, K_PREV_E], keys[k, K_PREV_C]
        if s < ps or (s == ps and (e > pe or (e == pe and c < pc))):
            return OUT_OF_ORDER
        lo = max(s, keys[k, K_MAX])
    else:
        lo = s
    keys[k, K_PREV_S], keys[k, K_PREV_E], keys[k, K_PREV_C] = s, e, c
    return lo


@_inline
def _put(keys, cum, k, lo, e, c):
    """Credit the piece ``[lo, e)`` (when not empty) to class ``c`` of key k and move its
    furthest end; the key's probes before ``lo`` must be answered first."""
    if e > lo:
        cum[k, c] += e - lo
        keys[k, K_LAST_S], keys[k, K_LAST_E], keys[k, K_LAST_C] = lo, e, c
    keys[k, K_MAX] = e if keys[k, K_SEEN] == 0 else max(keys[k, K_MAX], e)
    keys[k, K_SEEN] = 1


@_jit
def sweep_keys(code, istart, iend, icls, pts, pgrp, psign, pend, keys, cum, out):
    """One batch of the covered-time sweep (compute/sweep.py has the definitions) over
    intervals of any number of keys, interleaved in any way: each key's must come sorted
    by start, end descending, class. Each is cut into a piece beyond the furthest end of
    its key so far; each probe is answered, when its key's sweep passes it, with the
    covered time per class before its instant, and added, signed, to its group in ``out``.

    ``code``: each interval's key code (-1: a key without probes, skipped). The probes are
    in memory, sorted by key code and instant; key k's run from ``keys[k, K_PROBE]`` (its
    next one) to ``pend[k]``. ``keys`` (``KEY_STATE`` slots, K_LAST_E below K_LAST_S
    before the first piece) and ``cum`` (covered time per class) carry each key's sweep
    from batch to batch. Returns -1 when done, else the index of the first interval out of
    order for its key (nothing after it is taken)."""
    for i in range(code.size):
        k = code[i]
        if k < 0:
            continue
        e, c = iend[i], icls[i]
        lo = _cut(keys, k, istart[i], e, c)
        if lo == OUT_OF_ORDER:
            return i
        if e > lo:
            p = keys[k, K_PROBE]
            while p < pend[k] and pts[p] < lo:
                _answer_key(keys, cum, k, pts[p], pgrp[p], psign[p], out)
                p += 1
            keys[k, K_PROBE] = p
        _put(keys, cum, k, lo, e, c)
    return -1


@_jit
def finish_keys(pts, pgrp, psign, pend, keys, cum, out):
    """Answer every probe ``sweep_keys`` left: those after each key's last piece."""
    for k in range(pend.size):
        for p in range(keys[k, K_PROBE], pend[k]):
            _answer_key(keys, cum, k, pts[p], pgrp[p], psign[p], out)
        keys[k, K_PROBE] = pend[k]


@_jit
def _answer_window(keys, cum, k, t, ref, window, at):
    """Probe ``ref`` of the window sweep at instant ``t`` (as ``_answer_key``): window
    ``ref >> 1``'s start (even ``ref``: subtract the covered time per class before ``t``,
    and note the class of the piece holding ``t``) or end (odd: add it)."""
    if keys[k, K_SEEN] == 0 or keys[k, K_LAST_E] < keys[k, K_LAST_S]:
        return  # no piece yet: nothing covered
    j = ref >> 1
    sign = 1 if ref & 1 else -1
    for c in range(cum.shape[1]):
        window[j, c] += sign * cum[k, c]
    ls, le, lc = keys[k, K_LAST_S], keys[k, K_LAST_E], keys[k, K_LAST_C]
    window[j, lc] -= sign * (le - min(max(t, ls), le))
    if sign < 0 and ls <= t and t < le:
        at[j] = lc


@_jit
def sweep_windows(code, istart, iend, icls, pts, pref, pend, keys, cum, window, at):
    """``sweep_keys`` for windows instead of signed groups: each probe ``p`` is the start
    (``pref[p]`` even) or end (odd) of window ``pref[p] >> 1``; the window's row of
    ``window`` gets the covered time per class inside it, and ``at`` the class of the piece
    holding its start (left as it is where none does); an empty ``pref`` stands for
    ``pref[p] = p``. Probes and state as in ``sweep_keys``; returns the same."""
    for i in range(code.size):
        k = code[i]
        if k < 0:
            continue
        e, c = iend[i], icls[i]
        lo = _cut(keys, k, istart[i], e, c)
        if lo == OUT_OF_ORDER:
            return i
        if e > lo:
            p = keys[k, K_PROBE]
            while p < pend[k] and pts[p] < lo:
                _answer_window(keys, cum, k, pts[p], pref[p] if pref.size else p, window, at)
                p += 1
            keys[k, K_PROBE] = p
        _put(keys, cum, k, lo, e, c)
    return -1


@_jit
def finish_windows(pts, pref, pend, keys, cum, window, at):
    """Answer every probe ``sweep_windows`` left: those after each key's last piece."""
    for k in range(pend.size):
        for p in range(keys[k, K_PROBE], pend[k]):
            _answer_window(keys, cum, k, pts[p], pref[p] if pref.size else p, window, at)
        keys[k, K_PROBE] = pend[k]


@_inline
def _count_right(a, x, j):
    """How many of the sorted ``a`` are <= ``x``, galloping from ``j``, the answer for an
    earlier value: up from it when ``x`` is not below that value, else from the start."""
    n = a.size
    if j > 0 and a[j - 1] > x:
        j = 0
    step = 1
    while j + step - 1 < n and a[j + step - 1] <= x:  # every a before j is <= x
        j += step
        step *= 2
    hi = min(j + step - 1, n)  # a[hi] > x, or hi == n
    while j < hi:
        mid = (j + hi) // 2
        if a[mid] <= x:
            j = mid + 1
        else:
            hi = mid
    return j


@_jit
def covered(lo, hi, before, ts, out):
    """``out[i]``: the length of the pieces ``[lo, hi)`` (sorted, disjoint; ``before``: the
    length of those before each) that lies before ``ts[i]``. Each search gallops from the
    previous answer (``_count_right``), so instants that mostly ascend cost little more
    than a merge; any order is answered correctly."""
    j = 0  # pieces starting at or before the previous instant
    for i in range(ts.size):
        t = ts[i]
        j = _count_right(lo, t, j)
        k = j - 1  # the last piece starting at or before t
        out[i] = 0 if k < 0 else before[k] + min(t, hi[k]) - lo[k]


@_jit
def union_pieces(start, end, state, lo, hi, before):
    """Append to ``lo``/``hi``/``before`` the pieces of a union: intervals (``end >=
    start``) sorted by start, each beyond the furthest end before it, with the union's
    length before each piece. ``state`` (key seen, furthest end, length so far, pieces so
    far) carries the union from batch to batch; the arrays must have room for
    ``start.size`` more pieces."""
    seen, furthest, total, n = state[0], state[1], state[2], state[3]
    for i in range(start.size):
        s, e = start[i], end[i]
        if seen == 0:
            seen, furthest = 1, s
        piece_lo = max(s, furthest)
        if e > piece_lo:
            lo[n], hi[n], before[n] = piece_lo, e, total
            total += e - piece_lo
            n += 1
        furthest = max(furthest, e)
    state[0], state[1], state[2], state[3] = seen, furthest, total, n


@_jit
def follow_streams(codes, start, end, own, last_end, no_end, gap_code, gap_ns):
    """Per stream, the gap before each own unit: ``start`` minus the end of the unit before
    it on its stream (``codes``: the stream of each unit, in start order), when positive.
    ``last_end`` (per stream code; ``no_end`` before its first unit) carries the streams
    from batch to batch. Writes the gaps to ``gap_code``/``gap_ns``; returns their count."""
    n = 0
    for i in range(codes.size):
        c = codes[i]
        previous = last_end[c]
        if own[i] and previous > no_end and start[i] > previous:
            gap_code[n] = c
            gap_ns[n] = start[i] - previous
            n += 1
        last_end[c] = end[i]
    return n


@_jit
def queue_depth(up_t, same_t, down_t, lo, hi, counted, time_at, marked_at, change_t,
                change_depth):
    """A count raised by one at the instants ``up_t``, lowered by one at ``down_t`` and
    left as it is at ``same_t`` (all three sorted), its events netted per instant. The span
    from an instant to the next adds to ``time_at[depth after it]`` when ``counted`` and
    ``lo <= instant < hi``; each ``up`` and ``same`` event adds one to
    ``marked_at[depth after its instant]``; every instant whose events do not net to zero
    goes to ``change_t``/``change_depth`` (while they have room). Returns the number of
    such instants."""
    i = j = k = 0
    n_up, n_same, n_down = up_t.size, same_t.size, down_t.size
    depth = 0
    changes = 0
    has_open = False
    open_t = 0
    while i < n_up or j < n_same or k < n_down:
        t = 0
        first = True
        if i < n_up:
            t, first = up_t[i], False
        if j < n_same and (first or same_t[j] < t):
            t, first = same_t[j], False
        if k < n_down and (first or down_t[k] < t):
            t = down_t[k]
        if has_open and counted and open_t >= lo and open_t < hi:
            time_at[depth] += t - open_t
        net = 0
        marks = 0
        while i < n_up and up_t[i] == t:
            net += 1
            marks += 1
            i += 1
        while j < n_same and same_t[j] == t:
            marks += 1
            j += 1
        while k < n_down and down_t[k] == t:
            net -= 1
            k += 1
        depth += net
        marked_at[depth] += marks
        if net != 0:
            if changes < change_t.size:
                change_t[changes] = t
                change_depth[changes] = depth
            changes += 1
        has_open = True
        open_t = t
    return changes


#: the end of a piece whose end is unknown on both sides (own work and window): the piece
#: is empty
NO_END = np.iinfo(np.int64).min


@_jit
def own_pieces(instance, kernel, device, device_ok, start, end, end_ok, api_end, api_ok,
               udevice, uknown, wstart, wend, wend_ok, offset, fill, out_kernel, out_ws,
               out_ps, out_e):
    """Place each row of own work that ran on its instance's device (``udevice[g]``, where
    ``uknown[g]``) at its instance's next free slot, from ``offset[g] + fill[g]``, as two
    pieces clipped to the window [``wstart[g]``, ``wend[g]``]: [ws, e) from the work's
    start and [ps, e) from its launch call's return. An unknown bound (``*_ok`` False) is
    left out of the clip, as SQL's greatest/least leave NULL out; an end unknown on both
    sides makes both pieces empty (``NO_END``)."""
    for i in range(instance.size):
        g = instance[i]
        if not uknown[g] or not device_ok[i] or device[i] != udevice[g]:
            continue
        w0 = wstart[g]
        if end_ok[i]:
            e = min(end[i], wend[g]) if wend_ok[g] else end[i]
        else:
            e = wend[g] if wend_ok[g] else NO_END
        j = offset[g] + fill[g]
        fill[g] += 1
        out_kernel[j] = kernel[i]
        out_ws[j] = max(start[i], w0)
        out_ps[j] = max(api_end[i], w0) if api_ok[i] else w0
        out_e[j] = e


@_allocating
def own_work(groups, offset, count, kernel, ws, ps, e, out_kernel, out_any, st_group, st_s,
             st_e):
    """Per group ``groups[k]`` (rows ``offset[k]`` to ``offset[k] + count[k]``): the union
    of ``[ws, e)`` over its kernel rows and over all its rows, and the merged stretches of
    ``[ps, e)`` (pieces that overlap or touch merge); pieces that end where (or before)
    they start count nowhere. Each group's pieces are sorted by start here (a group holds a
    range instance's work: tens to thousands). Writes each group's unions at its index k;
    returns the number of stretches written."""
    stretches = 0
    for k in range(groups.size):
        a = offset[k]
        b = a + count[k]
        kernel_union = 0
        any_union = 0
        order = np.argsort(ws[a:b], kind="mergesort")
        any_reach = kernel_reach = np.iinfo(np.int64).min
        for r in order:
            s, end = ws[a + r], e[a + r]
            if end <= s:
                continue
            any_union += max(end - max(s, any_reach), 0)
            any_reach = max(any_reach, end)
            if kernel[a + r]:
                kernel_union += max(end - max(s, kernel_reach), 0)
                kernel_reach = max(kernel_reach, end)
        out_kernel[k] = kernel_union
        out_any[k] = any_union
        order = np.argsort(ps[a:b], kind="mergesort")
        is_open = False
        for r in order:
            s, end = ps[a + r], e[a + r]
            if end <= s:
                continue
            if is_open and s <= st_e[stretches - 1]:
                st_e[stretches - 1] = max(st_e[stretches - 1], end)
            else:
                st_group[stretches] = groups[k]
                st_s[stretches] = s
                st_e[stretches] = end
                stretches += 1
                is_open = True
    return stretches


@_jit
def inside_units(code, t, heads, starts, reach, last, inside):
    """``inside[i]``: whether instant ``t[i]`` of thread ``code[i]`` lies inside one of its
    thread's units: those of thread k start at ``starts[heads[k]:heads[k + 1]]`` (sorted),
    ``reach`` holds the furthest end among each one and those before it, and the last to
    start at or before the instant reaches past it. ``last[k]``: how many of thread k's
    units started at or before its previous instant, where each search gallops from (the
    calls of a thread come in start order), kept from one call to the next."""
    for i in range(code.size):
        k = code[i]
        lo, hi = heads[k], heads[k + 1]
        x = t[i]
        j = lo + _count_right(starts[lo:hi], x, last[k])
        last[k] = j - lo
        inside[i] = j > lo and x < reach[j - 1]


@_jit
def search_right(a, v, out):
    """``out[i]``: how many of the sorted ``a`` are <= ``v[i]`` (``np.searchsorted(a, v,
    'right')``). Each search gallops from the previous answer, so values that mostly ascend
    cost little more than a merge; any order is answered correctly."""
    j = 0
    for i in range(v.size):
        j = _count_right(a, v[i], j)
        out[i] = j


@_jit
def window_runs(cause, key, start, end, limit, run_key, run_head, run_end):
    """The runs of the host windows of ``sweep_causes``: the rows with ``cause < 0``, each
    a window ``[start, min(end, limit)]`` of thread ``key``, taken in row order. Writes
    each run of one key's windows (its key, first row, end row) and returns the number of
    runs; -1 when a window starts before the previous one of its run ends, or when there
    are more runs than ``run_key`` has room for (the windows are then probed sorted)."""
    n = 0
    last_end = 0
    for i in range(cause.size):
        if cause[i] >= 0:
            continue
        k, s = key[i], start[i]
        if n > 0 and run_key[n - 1] == k:
            if s < last_end:
                return -1
        else:
            if n == run_key.size:
                return -1
            run_key[n], run_head[n] = k, i
            n += 1
        last_end = min(end[i], limit[i])
        run_end[n - 1] = i + 1
    return n


@_inline
def _covered_now(keys, cum, k, t, c):
    """Class ``c``'s covered time of key k before instant ``t`` (as ``_answer_key``)."""
    if keys[k, K_SEEN] == 0 or keys[k, K_LAST_E] < keys[k, K_LAST_S]:
        return 0
    got = cum[k, c]
    if keys[k, K_LAST_C] == c:
        le = keys[k, K_LAST_E]
        got -= le - min(max(t, keys[k, K_LAST_S]), le)
    return got


@_jit
def _answer_cause(keys, cum, k, p, cause, start, end, limit, opened, codes, pct, out):
    """Probe ``p`` of ``sweep_causes``: the start (even) or end (odd) of row ``p >> 1``'s
    window. At its start the covered time per class and the class of the piece holding the
    start instant are kept in ``opened[k]``; at its end the window's time per class is the
    difference, and the row's cause goes to ``out`` (``_window_cause``)."""
    row = p >> 1
    n_classes = cum.shape[1]
    if p & 1 == 0:
        t = start[row]
        for c in range(n_classes):
            opened[k, c] = _covered_now(keys, cum, k, t, c)
        opened[k, n_classes] = t
        held = -1
        if keys[k, K_SEEN] == 1 and keys[k, K_LAST_S] <= t and t < keys[k, K_LAST_E]:
            held = keys[k, K_LAST_C]
        opened[k, n_classes + 1] = held
        return
    t = min(end[row], limit[row])
    total = 0
    best = 0
    best_ns = -1
    for c in range(n_classes):
        ns = _covered_now(keys, cum, k, t, c) - opened[k, c]
        total += ns
        if ns > best_ns:
            best, best_ns = c, ns
    outside = max((t - opened[k, n_classes]) - total, 0)
    code = codes[best]
    if outside > best_ns:
        code = codes[n_classes]
    # the call at the drain point wins unless most of the window was outside CUDA
    if not outside >= (outside + total) * (pct / 100.0):
        held = opened[k, n_classes + 1]
        if held == codes[n_classes + 1]:
            code = codes[n_classes + 3]
        elif held == codes[n_classes + 2]:
            code = codes[n_classes + 4]
    out[row] = code


@_jit
def sweep_causes(code, istart, iend, icls, cause, start, end, limit, pend, keys, cum, opened,
                 codes, pct, out):
    """``sweep_windows`` for the host windows of gpu_idle, each finished as the sweep
    passes its end: key k's probes are ``keys[k, K_PROBE]`` to ``pend[k]``, probe ``p``
    the start (even) or end (odd) of row ``p >> 1``'s window (rows with ``cause >= 0`` are
    none), one window after another (``window_runs``). No per-window sums are held: each
    row's cause goes to ``out`` (``_answer_cause``). Returns as ``sweep_keys``."""
    for i in range(code.size):
        k = code[i]
        if k < 0:
            continue
        e, c = iend[i], icls[i]
        lo = _cut(keys, k, istart[i], e, c)
        if lo == OUT_OF_ORDER:
            return i
        if e > lo:
            p = keys[k, K_PROBE]
            while p < pend[k]:
                row = p >> 1
                if cause[row] >= 0:
                    p += 1
                    continue
                t = start[row] if p & 1 == 0 else min(end[row], limit[row])
                if t >= lo:
                    break
                _answer_cause(keys, cum, k, p, cause, start, end, limit, opened, codes, pct,
                              out)
                p += 1
            keys[k, K_PROBE] = p
        _put(keys, cum, k, lo, e, c)
    return -1


@_jit
def finish_causes(cause, start, end, limit, pend, keys, cum, opened, codes, pct, out):
    """Answer every probe ``sweep_causes`` left: those after each key's last piece."""
    for k in range(pend.size):
        for p in range(keys[k, K_PROBE], pend[k]):
            if cause[p >> 1] < 0:
                _answer_cause(keys, cum, k, p, cause, start, end, limit, opened, codes, pct,
                              out)
        keys[k, K_PROBE] = pend[k]


#: what ``sequence_gaps`` returns for a row out of order for its key, and for a tie
SEQ_OUT_OF_ORDER, SEQ_TIE = -1, -2


@_jit
def sequence_gaps(code, start, end, sort_end, in_graph, stream, launch_end, tid, strict,
                  no_end, state, o_code, o_stream, o_before, o_start, o_launch, o_tid, n):
    """One batch of gpu_idle's sequence pass (gpu_idle.sql ``gaps``): per key code (a
    device sequence), rows by start then ``sort_end``; each row's ``before`` is the
    furthest end of the key's earlier rows (none for its first); a row outside graphs
    (``in_graph`` 0) that starts after it follows a gap, written as row ``n`` of the
    ``o_`` arrays (its key code, stream, idle start, idle end, launch return, thread).
    ``state`` (per key: seen, furthest end, last start, last ``sort_end``) carries the keys
    from batch to batch. With ``strict`` (rows as stored) each key's rows must come in that
    order with no two tied on both. Returns the new ``n``, or ``SEQ_OUT_OF_ORDER`` /
    ``SEQ_TIE``."""
    for i in range(code.size):
        k = code[i]
        s, se, e = start[i], sort_end[i], end[i]
        if state[k, 0] == 1:
            if strict:
                ls, lse = state[k, 2], state[k, 3]
                if s < ls or (s == ls and se < lse):
                    return SEQ_OUT_OF_ORDER
                if s == ls and se == lse:
                    return SEQ_TIE
            before = state[k, 1]
            if in_graph[i] == 0 and before > no_end and s > before:
                o_code[n], o_stream[n], o_before[n] = k, stream[i], before
                o_start[n], o_launch[n], o_tid[n] = s, launch_end[i], tid[i]
                n += 1
            state[k, 1] = max(before, e)
        else:
            state[k, 0], state[k, 1] = 1, e
        state[k, 2], state[k, 3] = s, se
    return n


#: the open run of ``place_calls`` (the calls of one process and correlation id, in a row):
#: its first call's thread key, its process key, its id, its earliest start, whether any
#: start is set, whether any call launches, whether a run is open
R_GTID, R_GPID, R_CORR, R_CALL, R_TIMED, R_LAUNCH, R_OPEN = range(7)
#: and where the last searches of a unit key and of a copy ended (``_pair_at``)
R_KEY_AT, R_COPY_AT = 7, 8
RUN_STATE = R_COPY_AT + 1
#: what ``place_calls`` returns: done; a process' ids do not rise from run to run (an id's
#: calls are apart, or ids fall); more processes than its table holds
PLACED, NOT_RUNS, TOO_MANY_PROCESSES = range(3)


@_inline
def _pair_below(a0, a1, x0, x1, i):
    """Whether row ``i`` of ``a0``, ``a1`` comes before ``(x0, x1)``."""
    return a0[i] < x0 or (a0[i] == x0 and a1[i] < x1)


@_inline
def _pair_at(a0, a1, x0, x1, at):
    """The row of ``(x0, x1)`` among the rows of ``a0``, ``a1`` (sorted by both), or -1.
    ``at[0]``: where the previous search ended, from which this one gallops (ascending
    values cost little more than a merge), and where it ends."""
    n = a0.size
    j = at[0]
    if j > n or (j > 0 and not _pair_below(a0, a1, x0, x1, j - 1)):
        j = 0
    step = 1
    while j + step - 1 < n and _pair_below(a0, a1, x0, x1, j + step - 1):
        j += step
        step *= 2
    hi = min(j + step - 1, n)
    while j < hi:
        mid = (j + hi) >> 1
        if _pair_below(a0, a1, x0, x1, mid):
            j = mid + 1
        else:
            hi = mid
    at[0] = j
    if j < n and a0[j] == x0 and a1[j] == x1:
        return j
    return -1


@_inline
def _rises(gpid, corr, procs, proc_last, proc_used):
    """Whether ``corr`` is above the last id of process ``gpid`` (True for its first id),
    which it becomes; -1 when the table (open addressing, at most half full) has no room."""
    mask = procs.size - 1
    x = gpid >> 24
    x ^= x >> 17
    slot = ((x * 0x9E3779B1) >> 7) & mask
    while proc_used[slot] == 1 and procs[slot] != gpid:
        slot = (slot + 1) & mask
    if proc_used[slot] == 1:
        if corr <= proc_last[slot]:
            return 0
        proc_last[slot] = corr
        return 1
    if 2 * (proc_used[procs.size] + 1) > procs.size:  # the count of used slots
        return -1
    proc_used[slot] = 1
    proc_used[procs.size] += 1
    procs[slot] = gpid
    proc_last[slot] = corr
    return 1


@_inline
def _close_run(run, procs, proc_last, proc_used, key_pid, key_k, heads, u_start, u_last,
               u_end, u_end_ok, cp_gpid, cp_corr, cp_htod, cp_htod_ok, cp_dtoh, cp_dtoh_ok,
               by_process, htod, dtoh, launches):
    """Check the open run's id and add it to its unit (``place_calls``); its status."""
    rises = _rises(run[R_GPID], run[R_CORR], procs, proc_last, proc_used)
    if rises < 0:
        return TOO_MANY_PROCESSES
    if rises == 0:
        return NOT_RUNS
    if run[R_TIMED] == 0:
        return PLACED
    g = run[R_GTID]
    k = _pair_at(key_pid, key_k, (g >> 24) & 16777215, 0 if by_process else g & 16777215,
                 run[R_KEY_AT:R_KEY_AT + 1])
    if k < 0:
        return PLACED
    lo, hi = heads[k], heads[k + 1]
    t = run[R_CALL]
    j = lo + _count_right(u_start[lo:hi], t, u_last[k])
    u_last[k] = j - lo
    j -= 1
    if j < lo or u_end_ok[j] == 0 or t > u_end[j]:
        return PLACED
    launches[j] += run[R_LAUNCH]
    c = _pair_at(cp_gpid, cp_corr, run[R_GPID], run[R_CORR], run[R_COPY_AT:R_COPY_AT + 1])
    if c >= 0:
        if cp_htod_ok[c]:
            htod[j] += cp_htod[c]
        if cp_dtoh_ok[c]:
            dtoh[j] += cp_dtoh[c]
    return PLACED


@_jit
def place_calls(gtid, corr, start, timed, launch, last, run, procs, proc_last, proc_used,
                key_pid, key_k, heads, u_start, u_last, u_end, u_end_ok, cp_gpid, cp_corr,
                cp_htod, cp_htod_ok, cp_dtoh, cp_dtoh_ok, by_process, htod, dtoh, launches):
    """One batch of workload's size pass (``analyses/workload.py``: ``sizes_accelerated``)
    over launch and copy calls in their stored order (start order). The calls of one
    (process, correlation id) are taken as one run of rows, with the earliest start, any
    launch, and the first call's thread; each run's id must rise above its process' last
    (``procs``: an open-addressing table of process keys, their last id in ``proc_last``,
    ``proc_used[procs.size]`` the count used), else the calls are not runs. A run of a
    unit's key (``key_pid``, ``key_k``: sorted, its row the key's code; ``k`` 0 with
    ``by_process``) and with a start goes to the last of the key's units (starting at
    ``u_start[heads[k]:heads[k + 1]]``, sorted; the search gallops from ``u_last[k]``, its
    previous answer) to start at or before it, when that one ends at or after it: its
    launch counted in ``launches``, its copies' bytes (``cp_*``: per process and id,
    sorted by both) added to ``htod`` and ``dtoh``. ``run`` carries
    the open run (``RUN_STATE`` slots) to the next batch; ``last``: close it (the stream's
    end; the batch may be empty). Returns ``PLACED``, ``NOT_RUNS`` or
    ``TOO_MANY_PROCESSES``."""
    for i in range(gtid.size):
        g = gtid[i] & -16777216
        if run[R_OPEN] == 1 and g == run[R_GPID] and corr[i] == run[R_CORR]:
            if timed[i] and (run[R_TIMED] == 0 or start[i] < run[R_CALL]):
                run[R_CALL] = start[i]
                run[R_TIMED] = 1
            if launch[i]:
                run[R_LAUNCH] = 1
            continue
        if run[R_OPEN] == 1:
            status = _close_run(run, procs, proc_last, proc_used, key_pid, key_k, heads,
                                u_start, u_last, u_end, u_end_ok, cp_gpid, cp_corr, cp_htod,
                                cp_htod_ok, cp_dtoh, cp_dtoh_ok, by_process, htod, dtoh,
                                launches)
            if status != PLACED:
                return status
        run[R_GTID], run[R_GPID], run[R_CORR] = gtid[i], g, corr[i]
        run[R_CALL] = start[i] if timed[i] else 0
        run[R_TIMED] = 1 if timed[i] else 0
        run[R_LAUNCH] = 1 if launch[i] else 0
        run[R_OPEN] = 1
    if last and run[R_OPEN] == 1:
        run[R_OPEN] = 0
        return _close_run(run, procs, proc_last, proc_used, key_pid, key_k, heads, u_start,
                          u_last, u_end, u_end_ok, cp_gpid, cp_corr, cp_htod, cp_htod_ok,
                          cp_dtoh, cp_dtoh_ok, by_process, htod, dtoh, launches)
    return PLACED


_INT64_MIN = np.iinfo(np.int64).min


@_jit
def unit_stretches(units, inst, start, end, busy, a, b, cs, ce, ce_ok, cl, out_i, out_ns,
                   out_lead, out_ov):
    """host_stall's stretches (``analyses/host_stall.py``: ``accelerated``) of the measured
    ``units`` (rows of ``inst``, ``start``, ``end``, ``busy``: the latest end of another
    unit of the thread inside it, ``INT64_MIN`` for none), each unit's calls the slice
    ``[a, b)`` of the sorted calls (starts ``cs``, ends ``ce`` where ``ce_ok``, ``cl``:
    kernel launches). Per unit, in order: the lead (from its start to its first call, the
    whole unit without one; its overlap with ``busy``), the tail (from the furthest return
    to its end, where that is before the end) and each call's gap (its start less the
    furthest end among the calls before it, where positive; of the lead before the first
    launch). Writes the rows where ``out_i`` has room for them (a first call with empty
    arrays counts them) and returns their number."""
    n = 0
    room = out_i.size
    for u in range(units.size):
        i = units[u]
        ai, bi = a[i], b[i]
        if n < room:
            out_i[n] = inst[i]
            out_ns[n] = (cs[ai] if bi > ai else end[i]) - start[i]
            out_lead[n] = True
            out_ov[n] = max(0, busy[i] - start[i]) if busy[i] != _INT64_MIN else 0
        n += 1
        reach = _INT64_MIN
        for j in range(ai, bi):
            if ce_ok[j] and ce[j] > reach:
                reach = ce[j]
        if bi <= ai or reach == _INT64_MIN:
            continue
        if reach < end[i]:
            if n < room:
                out_i[n], out_ns[n], out_lead[n], out_ov[n] = inst[i], end[i] - reach, False, 0
            n += 1
        first_launch = cs[ai]
        for j in range(ai, bi):
            if cl[j]:
                first_launch = cs[j]
                break
        before = ce[ai] if ce_ok[ai] else _INT64_MIN
        for j in range(ai + 1, bi):
            if before != _INT64_MIN and cs[j] - before > 0:
                if n < room:
                    out_i[n], out_ns[n] = inst[i], cs[j] - before
                    out_lead[n], out_ov[n] = cs[j] <= first_launch, 0
                n += 1
            if ce_ok[j] and (before == _INT64_MIN or ce[j] > before):
                before = ce[j]
    return n


@_jit
def count_at_bounds(pid, t, pids, heads, bounds, last, le, lt):
    """Per process ``pids[k]`` (sorted) and each of its sorted distinct bounds
    ``bounds[heads[k]:heads[k + 1]]`` (m of them): how many calls lie at or before the
    bound, and how many before it, as histograms to be summed cumulatively: call ``t[i]``
    of process ``pid[i]`` adds 1 to ``le[heads[k] + k + j]`` with j the bounds below it, and
    to ``lt[...]`` with j the bounds at or below it (m + 1 slots per process). Calls of
    other processes are skipped. Each search gallops from the process' previous answer
    (``last[k]``; the calls come in start order)."""
    k = 0
    for i in range(t.size):
        p = pid[i]
        if k >= pids.size or pids[k] != p:
            lo, hi = 0, pids.size
            while lo < hi:
                mid = (lo + hi) >> 1
                if pids[mid] < p:
                    lo = mid + 1
                else:
                    hi = mid
            if lo >= pids.size or pids[lo] != p:
                k = pids.size
                continue
            k = lo
        b = bounds[heads[k]:heads[k + 1]]
        below = _count_right(b, t[i] - 1, last[k])
        last[k] = below
        upto = below + 1 if below < b.size and b[below] == t[i] else below
        le[heads[k] + k + below] += 1
        lt[heads[k] + k + upto] += 1
