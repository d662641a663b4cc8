"""Compiled loops of the views (``nsysdiag.jit``): the kernels' launch calls (``launch.py``;
keys are pairs (process code, correlation id), compared in that order) and the places of
string ids (``build.py``).
"""

from ..jit import jit

_jit = jit()
_inline = jit(inline=True)


@_jit
def _before(code_a, corr_a, code_b, corr_b):
    return code_a < code_b or (code_a == code_b and corr_a < corr_b)


@_jit
def merge_calls(code, corr, start, start_ok, end, end_ok, tid, out_code, out_corr, out_start,
                out_start_ok, out_end, out_end_ok, out_tid):
    """Calls sorted by key, merged per key: the first entry (and the thread of the call that
    made it; NULL entries are skipped), the last return. The outputs may be the inputs.
    Returns the number of keys."""
    n = -1
    for i in range(code.size):
        # read the row before writing: the outputs may be the inputs (merged in place, n <= i)
        c, r, t = code[i], corr[i], tid[i]
        s, s_ok, e, e_ok = start[i], start_ok[i], end[i], end_ok[i]
        if n < 0 or c != out_code[n] or r != out_corr[n]:
            n += 1
            out_code[n] = c
            out_corr[n] = r
            out_start_ok[n] = False
            out_end_ok[n] = False
        if s_ok and (not out_start_ok[n] or s < out_start[n]):
            out_start[n] = s
            out_start_ok[n] = True
            out_tid[n] = t
        if e_ok and (not out_end_ok[n] or e > out_end[n]):
            out_end[n] = e
            out_end_ok[n] = True
    return n + 1


@_jit
def find_keys(key_code, key_corr, code, corr, ok, out):
    """``out[i]``: the index of key (code[i], corr[i]) among the sorted keys, -1 if absent
    (or not ``ok``). Each search gallops from the previous answer, so keys that mostly
    ascend cost little more than a merge; any order is answered correctly."""
    n = key_code.size
    j = 0  # the first key not before the previous one
    for i in range(code.size):
        out[i] = -1
        if not ok[i]:
            continue
        c, r = code[i], corr[i]
        if j > 0 and not _before(key_code[j - 1], key_corr[j - 1], c, r):
            j = 0  # not after the key before the previous answer: search from the start
        step = 1
        while j + step - 1 < n and _before(key_code[j + step - 1], key_corr[j + step - 1], c, r):
            j += step
            step *= 2
        # every key before j is before (c, r); bisect [j, j + step - 1)
        hi = min(j + step - 1, n)
        while j < hi:
            mid = (j + hi) // 2
            if _before(key_code[mid], key_corr[mid], c, r):
                j = mid + 1
            else:
                hi = mid
        if j < n and key_code[j] == c and key_corr[j] == r:
            out[i] = j


@_inline
def _index(keys, v):
    """The index of ``v`` among the sorted ``keys``, -1 if absent (a binary search)."""
    lo, hi = 0, keys.size
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < keys.size and keys[lo] == v else -1


@_jit
def place_ids(values, valid, ids, table, out):
    """``out[i]``: the place (from 1) of ``values[i]`` among the sorted ``ids``, 0 where it
    is not among them or not ``valid``. ``table[v]`` holds the place of each v below its
    size (a lookup instead of a search, since a few ids repeat over millions of values);
    larger values are searched. Returns the number of valid values not among the ids."""
    misses = 0
    for i in range(values.size):
        p = 0
        if valid[i]:
            v = values[i]
            p = table[v] if 0 <= v < table.size else _index(ids, v) + 1
            if p == 0:
                misses += 1
        out[i] = p
    return misses


@_jit
def find_values(values, keys, out):
    """``out[i]``: the index of ``values[i]`` among the sorted ``keys``, -1 if absent. A
    value equal to the one before it is not searched again: processes' keys come in long
    runs, which ``np.searchsorted`` would search again value by value."""
    found = -1
    for i in range(values.size):
        if i == 0 or values[i] != values[i - 1]:
            found = _index(keys, values[i])
        out[i] = found


@_jit
def ascending(code, corr):
    """Whether the keys (code[i], corr[i]) never descend."""
    for i in range(1, code.size):
        if _before(code[i], corr[i], code[i - 1], corr[i - 1]):
            return False
    return True
