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
