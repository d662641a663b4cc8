"""What a report captured: per view, present / empty / not captured, and why.

The probe reads only table lists and row counts, so it is cheap. Analyses ask it before
running and say "not captured" (with the nsys option that would capture the data) instead
of failing or reporting zeros that are not measurements.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ..adapters.base import Source
from ..errors import MissingDataError
from ..fileio import write_atomic
from .cache import note
from .definitions import VIEWS

PRESENT, EMPTY, NOT_CAPTURED = "present", "empty", "not_captured"

_CUDA_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")

#: views whose absence, when CUDA was traced, means "none happened" rather than "not traced"
_CUDA_EVENT_VIEWS = ("memcpys", "memsets", "syncs", "cuda_graphs", "kernels")


@dataclass(frozen=True)
class ViewStatus:
    """Whether one normalized view has data, and if not, why."""

    name: str
    status: str
    source_rows: int
    reason: str
    hint: str

    @property
    def present(self) -> bool:
        return self.status == PRESENT


class _Statuses(Mapping):
    """The views' statuses, some decided only when first asked for (a function in place
    of the status); once all are, ``decided`` is called with them."""

    def __init__(self, statuses: dict[str, ViewStatus | Callable[[], ViewStatus]],
                 decided: Callable[[dict[str, ViewStatus]], None] | None = None) -> None:
        self._statuses, self._decided = dict(statuses), decided
        self._pending = sum(callable(v) for v in self._statuses.values())

    def __getitem__(self, name: str) -> ViewStatus:
        status = self._statuses[name]
        if callable(status):
            status = self._statuses[name] = status()
            self._pending -= 1
            if not self._pending and self._decided:
                self._decided(self._statuses)  # type: ignore[arg-type]
        return status

    def __iter__(self) -> Iterator[str]:
        return iter(self._statuses)

    def __len__(self) -> int:
        return len(self._statuses)


@dataclass(frozen=True)
class Probe:
    """The capture status of every normalized view of a report."""

    path: str
    views: Mapping[str, ViewStatus]
    cuda_traced: bool

    def __getitem__(self, name: str) -> ViewStatus:
        return self.views[name]

    def present(self, name: str) -> bool:
        return self.views[name].present

    def settle(self) -> None:
        """Decide every status not decided yet (which stores a cached probe)."""
        for name in self.views:
            self.views[name]

    def require(self, *names: str, command: str = "this analysis") -> None:
        """Raise :class:`MissingDataError` unless every named view has rows."""
        for name in names:
            st = self.views[name]
            if not st.present:
                raise MissingDataError(f"{command} needs {name}: {st.reason}", path=self.path,
                                       hint=st.hint)

    def to_dict(self) -> dict:
        return {"cuda_traced": self.cuda_traced,
                "views": {k: asdict(v) for k, v in self.views.items()}}


def _reason(name: str, status: str, cuda_traced: bool, has_runtime: bool) -> str:
    if status == PRESENT:
        return ""
    if name == "kernels":
        if has_runtime:
            return "CUDA API calls were traced but no kernel ran in the capture"
        return "no CUDA trace in this capture"
    if name in _CUDA_EVENT_VIEWS and cuda_traced:
        what = {"memcpys": "memory copies", "memsets": "memsets", "syncs": "CUDA synchronizations",
                "cuda_graphs": "CUDA graph launches"}[name]
        return f"CUDA was traced and the application made no {what}"
    return {
        "api_calls": "no CUDA API trace in this capture",
        "nvtx_ranges": "no NVTX ranges (no NVTX annotations, or nvtx was not traced)",
        "os_runtime": "OS runtime calls were not traced",
        "gpu_metrics": "GPU metrics were not sampled",
        "um_page_faults": "unified-memory page faults were not traced (or none happened)",
        "threads": "no thread names recorded",
        "processes": "no process table in this export",
        "devices": "no GPU information in this export",
    }.get(name, "not captured")


def probe(source: Source, graph_nodes: Callable[[], bool | None] | None = None,
          decided: Callable[[dict[str, ViewStatus]], None] | None = None) -> Probe:
    """Probe a source for the status of every normalized view.

    ``cuda_graphs`` is decided when first asked for: node-level graph tracing shows only
    as graph node ids on the kernels, and finding one means scanning the kernels
    (``graph_nodes`` may answer from elsewhere first, as the report does from its kernels
    view once built; None from it means it cannot). ``decided`` is called once every
    status is known.
    """
    tables = source.tables()
    cuda_traced = any(source.row_count(t) > 0 for t in _CUDA_TABLES)
    has_runtime = source.row_count("CUPTI_ACTIVITY_KIND_RUNTIME") > 0

    def status(name: str, rows: int) -> ViewStatus:
        spec = VIEWS[name]
        source_tables = spec.source_tables[:1] if name == "cuda_graphs" else spec.source_tables
        if rows > 0:
            st = PRESENT
        elif any(t in tables for t in source_tables) or (name in _CUDA_EVENT_VIEWS and cuda_traced):
            st = EMPTY
        else:
            st = NOT_CAPTURED
        return ViewStatus(name, st, rows, _reason(name, st, cuda_traced, has_runtime),
                          "" if st == PRESENT else spec.capture_hint)

    def graphs() -> ViewStatus:
        nodes = graph_nodes() if graph_nodes else None
        if nodes is None:
            nodes = _graph_nodes(source)
        kernels = source.row_count("CUPTI_ACTIVITY_KIND_KERNEL") if nodes else 0
        return status("cuda_graphs", source.row_count(VIEWS["cuda_graphs"].source_tables[0])
                      + kernels)

    views: dict[str, ViewStatus | Callable[[], ViewStatus]] = {
        name: graphs if name == "cuda_graphs"
        else status(name, sum(source.row_count(t) for t in spec.source_tables))
        for name, spec in VIEWS.items()}
    return Probe(str(source.path), _Statuses(views, decided), cuda_traced)


def _stored_statuses(data: object) -> tuple[dict[str, ViewStatus], bool] | None:
    """The statuses and ``cuda_traced`` of a stored probe when every field has its type
    and every view its known status, else None."""
    if (not isinstance(data, dict) or not isinstance(data.get("views"), dict)
            or not isinstance(data.get("cuda_traced"), bool)
            or data["views"].keys() != VIEWS.keys()):
        return None
    views = {}
    for name, v in data["views"].items():
        try:
            status = ViewStatus(**v)
        except TypeError:
            return None
        if (status.name != name or status.status not in (PRESENT, EMPTY, NOT_CAPTURED)
                or type(status.source_rows) is not int or status.source_rows < 0
                or (status.source_rows > 0) != (status.status == PRESENT)
                or not isinstance(status.reason, str) or not isinstance(status.hint, str)):
            return None
        views[name] = status
    return views, data["cuda_traced"]


def cached_probe(source: Source, directory: Path,
                 graph_nodes: Callable[[], bool | None] | None = None,
                 unchanged: Callable[[], None] | None = None) -> Probe:
    """The probe of ``source``, kept as ``probe.json`` in its view cache directory (once
    every status is decided, and ``unchanged()`` found the input unchanged since opened).

    Counting the rows of a big table costs SQLite a read of every row; the cache directory
    is keyed by the input's identity, so the stored answer stays valid. A stored probe
    that is not valid (damaged, edited) is probed again, with a note.
    """
    stored = directory / "probe.json"
    try:
        text = stored.read_text()
    except OSError:
        text = None  # absent (or unreadable): probe
    if text is not None:
        try:
            read = _stored_statuses(json.loads(text))
        except ValueError:
            read = None
        if read is not None:
            return Probe(str(source.path), read[0], read[1])
        note(f"cached {stored} is damaged; probing the export again")

    def store(views: dict[str, ViewStatus]) -> None:  # called once result is made
        text = json.dumps({"views": {k: asdict(v) for k, v in views.items()},
                           "cuda_traced": result.cuda_traced})
        if unchanged is not None:
            unchanged()  # the counts are of one version of the input
        try:
            write_atomic(stored, lambda tmp: Path(tmp).write_text(text))
        except OSError:
            pass  # an unwritable cache only costs the reuse

    result = probe(source, graph_nodes, store)
    return result


def _graph_nodes(source: Source) -> bool:
    """True when some kernel carries a graph node id (node-level graph tracing)."""
    return source.any_nonzero("CUPTI_ACTIVITY_KIND_KERNEL", "graphNodeId")
