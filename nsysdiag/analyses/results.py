"""Analysis results kept beside the cached views, so a second look at a trace is instant.

``run(report, name, **options)`` returns what ``analyses.<name>.run(report, **options)``
returns. The first call computes it; the result is then kept in memory for the report's
lifetime and on disk under ``<view cache>/results/<name>-<key>/`` (``result.json`` for the
status, message, summary and findings, one Arrow IPC file per table), read back into the
analysis' result class (``RESULT`` of its module). The key hashes the options (of the
settings, only the fields the analysis reads: its module's ``SETTINGS``), nsysdiag's
Python and SQL source and its version, so a change to any of them computes afresh; the
view cache directory itself is keyed by the input's identity. Writes go to a temporary
directory renamed into place. ``result.json`` records the size and CRC-32 of each table
file and of its own metadata: a stored result that does not match them (a damaged disk, an
edit) is removed, with a note, and computed again. A result whose summary would not
survive JSON unchanged is simply not stored.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.feather as feather

from .._version import __version__
from ..settings import DEFAULTS
from ..views.cache import file_crc, note
from . import module
from .base import AnalysisResult

if TYPE_CHECKING:
    from ..report import Report

#: bump when the stored layout changes
RESULTS_FORMAT = 3


def run(report: Report, name: str, **options: Any) -> AnalysisResult:
    """The result of analysis ``name`` with ``options``: computed once, then reused."""
    mod = module(name)
    options = {**options, "settings": options.get("settings") or DEFAULTS}
    # the key holds only the settings the analysis reads: a diagnosis with another tail
    # ratio reuses the launch gaps measured before
    key = _key(name, {**options, "settings": options["settings"].pick(mod.SETTINGS)})
    memo = report.results_memo
    if key not in memo:
        directory = report.cache_path / "results" / f"{name}-{key}"
        result = _load(directory, name)
        if result is None:
            result = mod.run(report, **options)
            _save(result, directory)
        memo[key] = result
    return memo[key]


@functools.cache
def _code_digest() -> str:
    """A hash of nsysdiag's own source (Python and SQL): results made by other code are
    not reused, even between two commits of one version."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".sql") and path.is_file():
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _key(name: str, options: dict[str, Any]) -> str:
    h = hashlib.sha256(f"{RESULTS_FORMAT}|{__version__}|{_code_digest()}|{name}|".encode())
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    for value in options.values():  # an input file given as an option (nvbandwidth JSON)
        if isinstance(value, str) and os.path.isfile(value):
            st = os.stat(value)
            h.update(f"|{os.path.abspath(value)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def _load(directory: Path, name: str) -> AnalysisResult | None:
    try:
        stored = json.loads((directory / "result.json").read_text())
    except (OSError, ValueError):
        return None  # absent (a damaged one is found below)
    try:
        text = stored["meta"]
        if zlib.crc32(text.encode()) != stored["crc32"]:
            raise ValueError("metadata does not match its CRC-32")
        meta = json.loads(text)
        files = [directory / f"{i}.arrow" for i in range(len(meta["tables"]))]
        if [list(file_crc(f)) for f in files] != meta["files"]:
            raise ValueError("a table file does not match its size and CRC-32")
        tables = {t: feather.read_table(f, memory_map=False)
                  for t, f in zip(meta["tables"], files)}
        result_class = module(name).RESULT if meta["summary"] else AnalysisResult
        return result_class.from_summary(
            name, meta["status"], meta["message"], meta["summary"], tables, meta["main"],
            tuple(meta["findings"]),
        )
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        note(f"cached result {directory} is damaged ({exc}); computing it again")
        shutil.rmtree(directory, ignore_errors=True)
        return None


def _save(result: AnalysisResult, directory: Path) -> None:
    meta = {
        "status": result.status, "message": result.message, "summary": result.summary,
        "main": result.main, "findings": list(result.findings), "tables": list(result.tables),
    }
    try:
        json.dumps(meta)
    except (TypeError, ValueError):
        return
    if not _same(json.loads(json.dumps(meta))["summary"], result.summary):
        return
    tmp = None
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        for i, table in enumerate(result.tables.values()):
            feather.write_feather(table, tmp / f"{i}.arrow", compression="zstd")
        meta["files"] = [list(file_crc(tmp / f"{i}.arrow")) for i in range(len(result.tables))]
        text = json.dumps(meta)
        (tmp / "result.json").write_text(json.dumps({"meta": text,
                                                     "crc32": zlib.crc32(text.encode())}))
        os.replace(tmp, directory)
        tmp = None
    except OSError:
        pass  # a read-only or full cache only costs the reuse
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _same(a: Any, b: Any) -> bool:
    """Equal after a JSON round trip (NaN equal to NaN, tuples to lists)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
