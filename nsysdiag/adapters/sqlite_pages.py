"""Integer columns of big SQLite tables, decoded straight from the file's b-tree pages.

Why: building the two big views of a big export spent most of its time in SQLite's own
row decoding (its virtual machine steps every column of every row, then the ADBC driver
copies each value into Arrow). The records of these tables are small rows of integers, so a
compiled loop over the leaf pages (numba, ``nogil``, two threads) decodes the same columns
several times faster. The on-disk format is SQLite's documented, stable file format
(https://www.sqlite.org/fileformat2.html, unchanged since SQLite 3.0 in 2004); only the
parts needed for rowid tables of integers are read:

* the table b-tree is walked from its root page (interior pages, type 5) to its leaf
  pages (type 13), left to right, so rows come out in rowid order;
* each leaf cell holds the payload size, the rowid and the record: a header of serial
  types, then the values (big-endian integers of 1, 2, 3, 4, 6 or 8 bytes, the constants
  0 and 1, or NULL). A record shorter than the table (columns added later) reads NULL.

Anything else -- a REAL, TEXT or BLOB value in an integer column, a payload spilled to
overflow pages, a page that is not what the b-tree says, a damaged file -- stops the fast
path at the chunk of pages where it is found. Nothing of that chunk has been handed out,
so the SQLite adapter reads the rows after the last rowid handed out through SQLite
itself, which applies its own ``CAST`` rules and reports damage as usual.

The file is memory-mapped read-only: nothing is written.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..engine import threads

#: leaf pages decoded per batch (about 60-80 rows each in nsys' big tables)
PAGES_PER_CHUNK = 4096
#: decoding threads (the decoder releases the GIL)
THREADS = 2


class Unsupported(Exception):
    """The fast path cannot read this (part of the) table; read it through SQLite."""


@dataclass(frozen=True)
class TableLayout:
    """Where a rowid table lives in the file and which of its columns to decode."""

    root_page: int
    #: for each column of the table, in declared order: its output index, or -1
    column_map: tuple[int, ...]
    #: output index of a column that is an alias of the rowid (INTEGER PRIMARY KEY), or -1
    rowid_column: int


def _records():
    """The compiled decoders (numba is imported on first use only: importing it is slow)."""
    from . import _sqlite_records

    return _sqlite_records


class PageReader:
    """Reads integer columns of rowid tables of one SQLite file, page by page."""

    def __init__(self, path: Path):
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < 512:
                raise Unsupported("not a SQLite file")
            # a read-only map: the input is never written
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        header = self._map[:100]
        if not header.startswith(b"SQLite format 3\x00"):
            raise Unsupported("not a SQLite file")
        page_size = int.from_bytes(header[16:18], "big")
        self.page_size = 65536 if page_size == 1 else page_size
        self.usable = self.page_size - header[20]
        if self.page_size < 512 or len(self._map) < self.page_size:
            raise Unsupported("unexpected page size")
        self.npages = len(self._map) // self.page_size
        self.buf = np.frombuffer(self._map, dtype=np.uint8, count=self.npages * self.page_size)

    def _release(self, pages: np.ndarray | None = None) -> None:
        """Drop the mapped pages (of ``pages``, or all) from this process' memory; they stay
        in the page cache. Otherwise every page read, and the kernel's read-around of
        each, counts in the resident set until the map is closed."""
        if not hasattr(mmap, "MADV_DONTNEED"):
            return
        if pages is None:
            lo, hi = 0, len(self._map)
        elif pages.size:
            lo = (int(pages.min()) - 1) * self.page_size // mmap.PAGESIZE * mmap.PAGESIZE
            hi = min(int(pages.max()) * self.page_size, len(self._map))
        else:
            return
        self._map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def _chunks(self, root: int) -> list[np.ndarray]:
        """The leaf pages of the b-tree at ``root``, left to right, in chunks."""
        pages, status = _records().leaf_pages(self.buf, root, self.page_size, self.npages)
        self._release()
        if status < 0:
            raise Unsupported("not a rowid table b-tree")
        return [pages[i:i + PAGES_PER_CHUNK] for i in range(0, pages.size, PAGES_PER_CHUNK)]

    def _cells(self, chunk: np.ndarray) -> int:
        return int(_records().cell_counts(self.buf, chunk, self.page_size).sum())

    def rows(self, root: int) -> int:
        """The number of rows of the table b-tree at ``root``: its leaf pages' cell counts
        (SQLite's count(*) reads every leaf page whole)."""
        total = 0
        for chunk in self._chunks(root):
            total += self._cells(chunk)
            self._release(chunk)
        return total

    def batches(
        self, layout: TableLayout, names: Sequence[str], progress: list[int]
    ) -> Iterator[pa.RecordBatch]:
        """Record batches of the table, in rowid order.

        ``progress[0]`` holds the last rowid handed out (or is left alone before the first
        batch), so that a caller can read the rest another way after :class:`Unsupported`.
        """
        decode = _records().decode
        chunks = self._chunks(layout.root_page)
        column_map = np.asarray(layout.column_map, np.int64)
        schema = pa.schema([(n, pa.int64()) for n in names])

        def work(chunk: np.ndarray) -> tuple[pa.RecordBatch, int, int] | None:
            """The chunk's rows, first and last rowid; None where it stops."""
            rows = self._cells(chunk)
            # values in an Arrow buffer, handed to Arrow without a copy: numpy's own
            # allocations, freed by other threads, grew the heap past what was in use
            data = pa.allocate_buffer(len(names) * rows * 8)
            values = np.frombuffer(data, np.int64).reshape(len(names), rows)
            valid = np.empty((len(names), rows), np.uint8)
            rowids = np.empty(rows, np.int64)
            got = decode(self.buf, chunk, self.page_size, self.usable, column_map,
                         layout.rowid_column, values, valid, rowids)
            self._release(chunk)
            if got != rows:
                return None
            arrays = []
            for i in range(len(names)):
                nulls = rows - int(np.count_nonzero(valid[i]))
                bitmap = None
                if nulls:
                    bitmap = pa.py_buffer(np.packbits(valid[i], bitorder="little"))
                column = data.slice(i * rows * 8, rows * 8)
                arrays.append(pa.Array.from_buffers(pa.int64(), rows, [bitmap, column], nulls))
            batch = pa.record_batch(arrays, schema=schema)
            return (batch, int(rowids[0]), int(rowids[-1])) if rows else (batch, 0, 0)

        # daemon workers whose results are waited for with a bound (``engine.threads``);
        # a consumer that stops early drops the chunks not yet started
        with threads.Workers(THREADS, stage="decoding SQLite pages") as pool:
            pending: list[threads.Call] = []
            index = 0
            while index < len(chunks) or pending:
                while index < len(chunks) and len(pending) < THREADS + 1:
                    pending.append(pool.submit(work, chunks[index]))
                    index += 1
                done = pending.pop(0).result()
                if done is None:
                    raise Unsupported("a value or page the fast path does not read")
                batch, first, last = done
                if batch.num_rows:
                    if progress[0] is not None and first <= progress[0]:
                        raise Unsupported("rowids out of order between pages")
                    progress[0] = last
                    yield batch
