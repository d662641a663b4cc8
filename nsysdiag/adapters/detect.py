"""Pick the adapter for a path: SQLite export, Parquet directory, or raw report."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .base import Source, refuse_special
from .parquet import ParquetDirSource
from .sqlite import SQLITE_MAGIC, SqliteSource

RAW_SUFFIXES = (".nsys-rep", ".qdrep")

#: Tables of which at least one exists in every nsys export we know of.
SENTINEL_TABLES = (
    "StringIds",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "TARGET_INFO_GPU",
    "TARGET_INFO_SYSTEM_ENV",
    "ThreadNames",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
)

NOT_AN_EXPORT_HINT = (
    "expected an Nsight Systems export: `nsys export --type sqlite REPORT.nsys-rep`")


def open_source(path: str | Path, *, nsys: str | None = None) -> Source:
    """Open ``path`` read-only with the adapter its content calls for.

    Raises
    ------
    InputError
        When the path is missing, unreadable, or not an Nsight Systems export.
    """
    p = Path(path)
    if not p.exists():
        raise InputError("no such file or directory", path=str(p))
    refuse_special(p, hint=NOT_AN_EXPORT_HINT)
    if p.is_dir():
        if not any(p.glob("*.parquet")):
            raise InputError("directory holds no .parquet tables", path=str(p),
                             hint=NOT_AN_EXPORT_HINT)
        source: Source = ParquetDirSource(p)
    else:
        try:
            with p.open("rb") as fh:
                head = fh.read(16)
        except OSError as exc:
            raise InputError(f"cannot be read ({exc.strerror})", path=str(p)) from None
        if head == SQLITE_MAGIC:
            source = SqliteSource(p)
        elif p.suffix.lower() in RAW_SUFFIXES:
            from .nsysrep import export_report

            source = SqliteSource(export_report(p, nsys=nsys))
        elif not head:
            raise InputError("file is empty", path=str(p), hint=NOT_AN_EXPORT_HINT)
        else:
            raise InputError("not an SQLite file or Parquet directory", path=str(p),
                             hint=NOT_AN_EXPORT_HINT)
    if not any(t in source.tables() for t in SENTINEL_TABLES):
        source.close()
        raise InputError("database holds no Nsight Systems tables", path=str(p),
                         hint=NOT_AN_EXPORT_HINT)
    return source
