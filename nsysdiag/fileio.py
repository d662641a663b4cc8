"""Atomic file writes: a reader (or a run killed midway) never sees a half-written file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: Path, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it to ``path``.

    The directory is created when missing; the temporary file never outlives the call.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
