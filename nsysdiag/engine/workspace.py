"""The engine's state for one opened report: its scratch directory and the intermediates
that analyses hand on to one another.

``Report.workspace`` holds one; a forked report (:func:`engine.schedule.forked`) gets one
that shares the scratch directory and the hand-overs.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config import spill_dir


class Workspace:
    """Scratch directory and hand-overs of one report."""

    def __init__(self, spill: Path | None = None) -> None:
        #: where scratch directories are made (default: ``config.spill_dir()``)
        self._spill = spill
        self._scratch: str | None = None
        #: intermediates one analysis makes for a later one, by name (see :meth:`handover`)
        self._handed: dict[str, Any] = {}
        #: the SQL steps on this report's connection, by the relation each yields: the
        #: analysis that made it (``engine.steps.Steps``)
        self.steps: dict[str, str] = {}
        self._owner = True  # removes the scratch directory on close

    def scratch_dir(self) -> Path:
        """A private directory for intermediate results, removed by :meth:`close`.

        It lies beside DuckDB's spill files (``<cache dir>/spill``), on disk: the steps of a
        big trace write gigabytes, too much for a RAM-backed /tmp. Falls back to the
        system's temporary directory when the cache directory is not writable.
        """
        if self._scratch is None:
            spill = self._spill or spill_dir()
            try:
                spill.mkdir(parents=True, exist_ok=True)
                self._scratch = tempfile.mkdtemp(prefix="steps-", dir=spill)
            except OSError:
                self._scratch = tempfile.mkdtemp(prefix="nsysdiag-steps-")
        return Path(self._scratch)

    @contextlib.contextmanager
    def handover(self, *names: str) -> Iterator[None]:
        """Let the analyses run inside the block hand the intermediates ``names`` on to one
        another, instead of each computing its own (what is left is dropped at the end).

        An analysis whose pass makes one of them as a by-product keeps it
        (:meth:`expects`, :meth:`hand`) for the one that needs it (:meth:`take`), which
        computes it itself when nothing was handed. The runner opens it for a plan
        (``engine.runner.run``) where one analysis declares that it makes an intermediate
        and another that it needs it (``Runs.makes``, ``Runs.needs``).
        """
        for name in names:
            self._handed.setdefault(name, None)
        try:
            yield
        finally:
            for name in names:
                self._handed.pop(name, None)

    def expects(self, name: str) -> bool:
        """Whether intermediate ``name`` is wanted and not handed yet."""
        return name in self._handed and self._handed[name] is None

    def hand(self, name: str, value: Any) -> None:
        """Keep intermediate ``name`` for a later analysis (only when :meth:`expects`)."""
        if self.expects(name):
            self._handed[name] = value

    def take(self, name: str) -> Any:
        """Intermediate ``name`` if handed (it is then no longer kept), else None."""
        value = self._handed.get(name)
        if value is not None:
            self._handed[name] = None
        return value

    def fork(self) -> Workspace:
        """A workspace for a forked report: the same scratch directory (made now, so both
        share it; this one removes it) and the same hand-overs (an analysis may make an
        intermediate in another thread than the one that reads it)."""
        self.scratch_dir()
        other = Workspace(self._spill)
        other._scratch, other._owner = self._scratch, False
        other._handed = self._handed
        return other

    def close(self) -> None:
        """Remove the scratch directory (when this workspace made it)."""
        if self._scratch and self._owner:
            shutil.rmtree(self._scratch, ignore_errors=True)
        self._scratch = None

