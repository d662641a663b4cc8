"""What every input adapter provides: table discovery and projected, typed reads.

An adapter hides one export format (SQLite file, Parquet directory). It answers which raw
nsys tables exist with which columns, and reads a chosen set of columns of one table as an
Arrow stream with fixed logical types, so the normalized views (``nsysdiag.views``) are
built the same way whatever the format.

Logical column types:

``int``   64-bit signed integer (SQLite INTEGER, Parquet uint/int of any width)
``float`` 64-bit float
``text``  UTF-8 string; bytes that are not valid UTF-8 are replaced with U+FFFD
"""

from __future__ import annotations

import abc
import os
import stat
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError

ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(), "float": pa.float64(), "text": pa.string()}

#: what a path that is neither a file nor a directory is, for the error message
_SPECIAL = {stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device",
            stat.S_IFBLK: "block device"}


def refuse_special(path: Path, hint: str | None = None) -> None:
    """Raise :class:`InputError` unless ``path`` is a regular file or a directory.

    A FIFO, socket or device is refused before anything opens it for reading: ``open()`` of
    a FIFO blocks until a writer comes, and a device may never end. It is opened
    non-blocking and checked with ``fstat``, so that a file swapped for a FIFO after a
    ``stat`` is refused as well.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror})", path=str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = _SPECIAL.get(stat.S_IFMT(mode), "special file")
        raise InputError(f"not a regular file or directory (a {kind})", path=str(path),
                         hint=hint)



class Source(abc.ABC):
    """One Nsight Systems export, opened read-only."""

    #: short name of the format, e.g. ``"sqlite"`` or ``"parquet"``
    kind: str = ""

    def __init__(self, path: Path):
        self.path = path

    @abc.abstractmethod
    def tables(self) -> dict[str, dict[str, str]]:
        """Raw table name -> {column name: declared type, upper case}."""

    @abc.abstractmethod
    def row_count(self, table: str) -> int:
        """Number of rows in a raw table (0 when the table is absent)."""

    @abc.abstractmethod
    def _read_present(
        self, table: str, columns: Mapping[str, str], where: str | None
    ) -> pa.RecordBatchReader:
        """Read the given columns (all present in ``table``) of the rows matching ``where``."""

    @abc.abstractmethod
    def identity(self) -> str:
        """A string that changes whenever the export's content may have changed."""

    def any_nonzero(self, table: str, column: str) -> bool:
        """Whether some row of ``table`` holds a value other than NULL and 0 in the integer
        ``column``. False when either is absent."""
        if column not in self.tables().get(table, {}):
            return False
        return any(_nonzero(batch.column(0)) for batch in self.read(table, {column: "int"}))

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release file handles."""

    def read(
        self, table: str, columns: Mapping[str, str], where: str | None = None
    ) -> pa.RecordBatchReader:
        """Read ``columns`` ({name: logical type}) of ``table`` as an Arrow stream.

        ``where`` is an optional SQL filter on raw column names, written by this package
        (never from user input), pushed down to the export where the format allows.

        Columns the table lacks come back as all-NULL columns of the requested type, and an
        absent table comes back as an empty stream with the requested schema, so callers
        can write one query for every nsys version.
        """
        schema = pa.schema([(name, ARROW_TYPES[kind]) for name, kind in columns.items()])
        have = self.tables().get(table)
        if have is None:
            return pa.RecordBatchReader.from_batches(schema, iter(()))
        present = {c: k for c, k in columns.items() if c in have}
        if not present:
            n = 0 if where else self.row_count(table)
            batch = pa.record_batch([pa.nulls(n, f.type) for f in schema], schema=schema)
            return pa.RecordBatchReader.from_batches(schema, iter([batch]))
        inner = self._read_present(table, present, where)

        def batches():
            for batch in inner:
                n = batch.num_rows
                cols = [
                    _conform(batch.column(f.name), f.type) if f.name in present
                    else pa.nulls(n, f.type)
                    for f in schema
                ]
                yield pa.record_batch(cols, schema=schema)

        return pa.RecordBatchReader.from_batches(schema, batches())


def _nonzero(arr: pa.Array) -> bool:
    return bool(pc.any(pc.not_equal(arr, 0)).as_py())


def _conform(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast one column to its logical type; decode text leniently."""
    if arr.type == target:
        return arr
    if target == pa.string():
        return decode_text(arr)
    return pc.cast(arr, target, safe=False)


def decode_text(arr: pa.Array) -> pa.Array:
    """Binary or string Arrow array -> UTF-8 strings, invalid bytes replaced, '' -> NULL.

    Real exports hold text that is not valid UTF-8 (NVTX strings, process names). Arrow's
    cast validates, so the slow path decodes only the distinct values, in Python.
    """
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        out = arr
    else:
        try:
            out = pc.cast(arr, pa.string())
        except pa.ArrowInvalid:
            enc = pc.dictionary_encode(arr)
            values = [
                None if v is None else v.decode("utf-8", "replace")
                for v in enc.dictionary.to_pylist()
            ]
            out = pc.take(pa.array(values, pa.string()), enc.indices)
    if pa.types.is_large_string(out.type):
        out = pc.cast(out, pa.string())
    return pc.if_else(pc.equal(out, ""), pa.scalar(None, pa.string()), out)
