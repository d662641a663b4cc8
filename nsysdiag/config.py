"""Run-time settings read from the environment: cache location and the nsys executable."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

CACHE_ENV = "NSYSDIAG_CACHE_DIR"
NSYS_ENV = "NSYSDIAG_NSYS"


def cache_dir() -> Path:
    """Where nsysdiag keeps Parquet caches and exports of raw reports.

    ``$NSYSDIAG_CACHE_DIR`` when set, else the user's cache directory
    (``~/.cache/nsysdiag`` on Linux).
    """
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path(platformdirs.user_cache_dir("nsysdiag"))


def spill_dir() -> Path:
    """Where DuckDB spills past its memory limit and analyses keep their scratch steps."""
    return cache_dir() / "spill"


MEMORY_ENV = "NSYSDIAG_MEMORY_LIMIT"
#: DuckDB's share of the process' memory, leaving room for the rest (Arrow batches, numpy
#: passes, the compiled decoders' LLVM runtime); a higher limit raised the peak without
#: making a big diagnose faster (docs/performance.md)
DEFAULT_MEMORY_LIMIT = "1000MB"


def memory_limit() -> str:
    """DuckDB's memory limit: ``$NSYSDIAG_MEMORY_LIMIT`` (e.g. ``4GB``), default 1000MB.

    Past the limit DuckDB spills sorts, joins and windows to ``<cache dir>/spill``, so the
    memory a big trace needs stays bounded.
    """
    return os.environ.get(MEMORY_ENV) or DEFAULT_MEMORY_LIMIT
