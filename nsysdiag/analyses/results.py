"""Analysis results kept beside the cached views, so a second look at a trace is instant.

``run(report, name, **options)`` returns what ``analyses.<name>.run(report, **options)``
returns. The first call computes it; the result is then kept in memory for the report's
lifetime and on disk under ``<view cache>/results/<name>-<key>/<entry>/`` (``result.json``
for the status, message, summary and findings, one Arrow IPC file per table), read back
into the analysis' result class (``RESULT`` of its module). The key hashes the options
other than the settings, nsysdiag's Python and SQL source and its version, so a change to
any of them computes afresh; the view cache directory itself is keyed by the input's
identity.

Of the settings, a result depends on the fields its run read, and only on those: the
analysis is given a recording view of them (``settings.recording``), which notes each
field read, in whatever thread, and by the analyses it runs in turn (their results carry
their own fields, whether computed, found in memory or on disk; the caller's record takes
the union). The fields read are stored with the result (``fields-<hash>.json`` names them,
the entry directory is named by their values), and a stored result is used only where
those fields hold the same values now. The same code given the same values of the fields
it reads takes the same path, so it reads the same fields and makes the same result; an
analysis may thus have several entries, one per set of fields its paths read.

Writes go to a temporary directory renamed into place. ``result.json`` records the size
and CRC-32 of each table file and of its own metadata (with the settings' values): a
stored result that does not match them (a damaged disk, an edit) is removed, with a note,
and computed again. A result whose summary would not survive JSON unchanged is simply not
stored.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import math
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.feather as feather

from .._version import __version__
from ..engine.runner import Runs, Task
from ..fileio import write_atomic
from ..settings import DEFAULTS, FIELDS, Reads, Settings, note_reads, plain, recording
from ..views.cache import file_crc, note
from ..views.definitions import VIEWS
from . import ANALYSES, module
from .base import AnalysisResult, views_read

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

#: bump when the stored layout changes
RESULTS_FORMAT = 4


@dataclass(frozen=True)
class _Entry:
    """A result and the settings it depends on: the fields its run read, and their values
    (JSON, keys sorted)."""

    fields: tuple[str, ...]
    values: str
    result: AnalysisResult


def run(report: Report, name: str, **options: Any) -> AnalysisResult:
    """The result of analysis ``name`` with ``options``: computed once, then reused.

    An option given its default value counts as left out (``run(rep, "ranges")`` and
    ``run(rep, "ranges", range_name=None)`` are one result)."""
    mod = module(name)
    options = _without_defaults(mod.run, options)
    given = options.get("settings") or DEFAULTS
    settings = plain(given)
    key = _key(name, {k: v for k, v in options.items() if k != "settings"})
    entries: list[_Entry] = report.results_memo.setdefault(key, [])
    entry = next((e for e in entries if _values(settings, e.fields) == e.values), None)
    if entry is None:
        directory = report.cache_path / "results" / f"{name}-{key}"
        entry = _load_entry(directory, name, settings)
        if entry is None:
            reads = Reads()
            try:
                result = mod.run(report, **{**options, "settings": recording(settings, reads)})
            except BaseException:
                # a caller that goes on after the error depends on what led to it
                note_reads(given, reads.names)
                raise
            entry = _Entry(reads.names, _values(settings, reads.names), result)
            _save(entry, directory)
        entries.append(entry)
    # a caller that runs this analysis with its own (recording) settings read these too
    note_reads(given, entry.fields)
    return entry.result


def task(name: str, **options: Any) -> Task:
    """Analysis ``name`` with ``options`` as a task of a plan (``engine.runner.run``): run
    through :func:`run`, as its module declares (``RUNS``), reading the views that
    :func:`views_of` gives."""
    return Task(name, functools.partial(_run_task, name, options), runs(name), views_of(name))


def _run_task(name: str, options: dict[str, Any], report: Report) -> AnalysisResult:
    return run(report, name, **options)


def runs(name: str) -> Runs:
    """How analysis ``name`` runs, as its module declares (``RUNS``; by default: on every
    core, needing nothing)."""
    declared = getattr(module(name), "RUNS", None)
    return declared if declared is not None else Runs()


def views_of(name: str) -> tuple[str, ...]:
    """The views analysis ``name`` reads, in the order of ``views.definitions.VIEWS``: those
    its SQL steps declare (``-- @needs``), those its ``RUNS`` names, and those of the
    analyses it needs; not those only its fallback path reads (``Runs.fallback_views``)."""
    declared = runs(name)
    views = {*views_read(name), *declared.views} - set(declared.fallback_views)
    for need in declared.needs:
        if need in ANALYSES:
            views.update(views_of(need))
    return tuple(v for v in VIEWS if v in views)


def _without_defaults(run_function: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` less those given the default value of the analysis' ``run`` (of the
    same type: 1 is not True), so that one result answers both ways of asking."""
    params = _signature(run_function).parameters
    return {k: v for k, v in options.items()
            if not (k in params and params[k].default is not inspect.Parameter.empty
                    and type(v) is type(params[k].default) and v == params[k].default)}


@functools.cache
def _signature(run_function: Any) -> inspect.Signature:
    return inspect.signature(run_function)


def _values(settings: Settings, fields: tuple[str, ...]) -> str:
    """The values of ``fields`` in ``settings``, as JSON."""
    return json.dumps(settings.pick(fields), sort_keys=True)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


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


def _load_entry(directory: Path, name: str, settings: Settings) -> _Entry | None:
    """The stored result of ``directory`` whose fields hold their values in ``settings``;
    None when there is none."""
    for path in sorted(directory.glob("fields-*.json")):
        try:
            fields = tuple(json.loads(path.read_text()))
            if not set(fields) <= FIELDS:
                raise ValueError("names no setting")
        except (OSError, ValueError, TypeError) as exc:
            if path.exists():
                note(f"cached field list {path} is damaged ({exc}); removing it")
                path.unlink(missing_ok=True)
            continue
        values = _values(settings, fields)
        result = _load(directory / _digest(values), name, values)
        if result is not None:
            return _Entry(fields, values, result)
    return None


def _load(directory: Path, name: str, values: str) -> AnalysisResult | None:
    try:
        stored = json.loads((directory / "result.json").read_text())
    except (OSError, ValueError):
        return None  # absent (a damaged one is found below)
    try:
        text = stored["meta"]
        if zlib.crc32(text.encode()) != stored["crc32"]:
            raise ValueError("metadata does not match its CRC-32")
        meta = json.loads(text)
        if meta["settings"] != values:
            raise ValueError("made with other settings than its name says")
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


def _save(entry: _Entry, base: Path) -> None:
    """Store ``entry`` under ``base``: the result in the directory named by the fields'
    values, then the list of those fields (which lookups read first)."""
    result, directory = entry.result, base / _digest(entry.values)
    meta = {
        "status": result.status, "message": result.message, "summary": result.summary,
        "main": result.main, "findings": list(result.findings), "tables": list(result.tables),
        "settings": entry.values,
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
        try:
            os.replace(tmp, directory)
            tmp = None
        except OSError:
            if not (directory / "result.json").exists():
                raise
            # another process stored it first; its field list may not be written yet
        names = json.dumps(entry.fields)
        write_atomic(base / f"fields-{_digest(names)}.json",
                     lambda path: Path(path).write_text(names))
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
