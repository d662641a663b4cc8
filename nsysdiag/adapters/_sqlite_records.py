"""The compiled part of ``sqlite_pages``: SQLite b-tree pages and records, in numba.

Imported only when a big table is read (importing numba is slow); compiled
and cached as ``nsysdiag.jit`` says.
"""

import numpy as np

from ..jit import jit

LEAF, INTERIOR = 13, 5

_jit = jit()
_inline = jit(inline=True)
_allocating = jit(allocates=True)


@_inline
def varint(buf, pos, limit):
    """(value, next position), or (0, -1) past ``limit``."""
    v = np.int64(0)
    for i in range(9):
        if pos >= limit:
            return np.int64(0), np.int64(-1)
        b = np.int64(buf[pos])
        pos += 1
        if i == 8:
            return (v << 8) | b, pos
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, pos
    return v, pos


@_inline
def u16(buf, pos):
    return (np.int64(buf[pos]) << 8) | np.int64(buf[pos + 1])


@_inline
def u32(buf, pos):
    return (u16(buf, pos) << 16) | u16(buf, pos + 2)


@_inline
def be_int(buf, pos, width):
    """The signed big-endian integer of ``width`` bytes (1-4, 6 or 8) at ``pos``. Each
    width spelled out, not a loop over the bytes: the compiler combines the byte loads
    (the loop's shift-or chain took a sixth of a big trace's CPU time)."""
    b0 = np.int64(np.int8(buf[pos]))
    if width == 1:
        return b0
    if width == 2:
        return (b0 << 8) | np.int64(buf[pos + 1])
    if width == 3:
        return (b0 << 16) | (np.int64(buf[pos + 1]) << 8) | np.int64(buf[pos + 2])
    if width == 4:
        return ((b0 << 24) | (np.int64(buf[pos + 1]) << 16) | (np.int64(buf[pos + 2]) << 8)
                | np.int64(buf[pos + 3]))
    if width == 6:
        return ((b0 << 40) | (np.int64(buf[pos + 1]) << 32) | (np.int64(buf[pos + 2]) << 24)
                | (np.int64(buf[pos + 3]) << 16) | (np.int64(buf[pos + 4]) << 8)
                | np.int64(buf[pos + 5]))
    return ((b0 << 56) | (np.int64(buf[pos + 1]) << 48) | (np.int64(buf[pos + 2]) << 40)
            | (np.int64(buf[pos + 3]) << 32) | (np.int64(buf[pos + 4]) << 24)
            | (np.int64(buf[pos + 5]) << 16) | (np.int64(buf[pos + 6]) << 8)
            | np.int64(buf[pos + 7]))


@_inline
def header(page, page_size):
    """Offset of a page's b-tree header (page 1 starts with the 100-byte file header)."""
    return (page - 1) * page_size + (100 if page == 1 else 0)


@_allocating
def leaf_pages(buf, root, page_size, npages):
    """Leaf page numbers of the b-tree at ``root``, left to right; status < 0 when
    the tree is not a well-formed table b-tree. Level by level: all leaves of a
    b-tree lie at one depth, so only the first page of the last level is looked at
    here (``decode`` checks every leaf), and no leaf is read twice."""
    level = np.empty(1, np.int64)
    level[0] = root
    depth = 0
    while True:
        depth += 1
        if depth > 64:
            return level[:0], -1
        for i in range(level.size):
            if level[i] < 1 or level[i] > npages:
                return level[:0], -1
        if buf[header(level[0], page_size)] == LEAF:
            return level, 0
        total = 0
        for i in range(level.size):
            head = header(level[i], page_size)
            cells = u16(buf, head + 3)
            if buf[head] != INTERIOR:
                return level[:0], -2
            if head + 12 + 2 * cells > level[i] * page_size:
                return level[:0], -1
            total += cells + 1
        if total > npages:
            return level[:0], -1
        nxt = np.empty(total, np.int64)
        n = 0
        for i in range(level.size):
            base = (level[i] - 1) * page_size
            head = header(level[i], page_size)
            cells = u16(buf, head + 3)
            for c in range(cells):
                ptr = u16(buf, head + 12 + 2 * c)
                if ptr < 12 or ptr + 4 > page_size:
                    return level[:0], -1
                nxt[n] = u32(buf, base + ptr)
                n += 1
            nxt[n] = u32(buf, head + 8)  # the right-most child
            n += 1
        level = nxt


@_allocating
def cell_counts(buf, pages, page_size):
    out = np.empty(pages.size, np.int64)
    for i in range(pages.size):
        out[i] = u16(buf, header(pages[i], page_size) + 3)
    return out


@_jit
def decode(buf, pages, page_size, usable, column_map, rowid_column, values, valid, rowids):
    """Decode the cells of ``pages`` into ``values``/``valid`` (one row per output
    column) and ``rowids``; returns the rows decoded, or -1 at anything unsupported or
    inconsistent (cells overlapping the page header, rowids out of order, values that do
    not fill their record)."""
    ncols = column_map.size
    max_local = usable - 35
    row = 0
    for i in range(pages.size):
        base = (pages[i] - 1) * page_size
        head = header(pages[i], page_size)
        end = base + usable
        if buf[head] != LEAF:
            return -1
        cells = u16(buf, head + 3)
        content = head + 8 + 2 * cells  # cells lie after the cell pointer array
        if content > end:
            return -1
        for c in range(cells):
            ptr = u16(buf, head + 8 + 2 * c)
            pos = base + ptr
            if pos < content or pos >= end:
                return -1
            size, pos = varint(buf, pos, end)
            if pos < 0 or size > max_local:
                return -1  # payload spills to overflow pages
            rowid, pos = varint(buf, pos, end)
            if pos < 0 or pos + size > end or (row > 0 and rowid <= rowids[row - 1]):
                return -1  # rowids rise from cell to cell and page to page
            record_end = pos + size
            hsize, hpos = varint(buf, pos, record_end)
            if hpos < 0 or hsize < 1 or hsize > size:
                return -1
            header_end = pos + hsize
            body = header_end
            for col in range(ncols):
                out = column_map[col]
                if hpos >= header_end:
                    # the record ends before this column: NULL
                    if out >= 0:
                        valid[out, row] = 0
                        values[out, row] = 0
                    continue
                st = np.int64(buf[hpos])
                if st < 0x80:  # every integer or NULL serial type is one byte
                    hpos += 1
                else:
                    st, hpos = varint(buf, hpos, header_end)
                    if hpos < 0:
                        return -1
                if st < 0:
                    return -1
                if st <= 4:
                    width = st
                elif st == 5:
                    width = 6
                elif st == 6 or st == 7:
                    width = 8
                elif st == 8 or st == 9:
                    width = 0
                elif st >= 12:
                    width = (st - 12) >> 1
                else:
                    return -1
                if body + width > record_end:
                    return -1
                if out >= 0:
                    if st == 0:
                        valid[out, row] = 0
                        values[out, row] = 0
                    elif st <= 6:
                        values[out, row] = be_int(buf, body, width)
                        valid[out, row] = 1
                    elif st == 8 or st == 9:
                        values[out, row] = st - 8
                        valid[out, row] = 1
                    else:
                        return -1  # REAL, TEXT or BLOB in an integer column
                body += width
            if hpos == header_end and body != record_end:
                return -1  # the values do not fill the record exactly
            if rowid_column >= 0:
                values[rowid_column, row] = rowid
                valid[rowid_column, row] = 1
            rowids[row] = rowid
            row += 1
    return row
