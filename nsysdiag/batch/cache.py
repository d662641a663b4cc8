"""The cache directory: normalized views (Parquet) and exports of raw reports."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..config import cache_dir

SUBDIRS = ("views", "exports")


def cache_size(root: Path | None = None) -> tuple[int, int]:
    """(files, bytes) that nsysdiag keeps under the cache root."""
    root = root or cache_dir()
    files = [
        p
        for sub in SUBDIRS
        if (root / sub).exists()
        for p in (root / sub).rglob("*")
        if p.is_file()
    ]
    return len(files), sum(p.stat().st_size for p in files)


def clear_cache(root: Path | None = None) -> tuple[int, int]:
    """Remove everything nsysdiag cached; returns what was removed (files, bytes)."""
    root = root or cache_dir()
    n, size = cache_size(root)
    for sub in SUBDIRS:
        shutil.rmtree(root / sub, ignore_errors=True)
    return n, size
