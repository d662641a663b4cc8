"""Every real export in ../shared/corpus opens and normalizes completely."""

from __future__ import annotations

import sqlite3

import pytest
from conftest import corpus_sqlite_files, open_corpus

FILES = corpus_sqlite_files()

COUNTED = {
    "kernels": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpys": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memsets": "CUPTI_ACTIVITY_KIND_MEMSET",
    "api_calls": "CUPTI_ACTIVITY_KIND_RUNTIME",
}


def source_count(path, table):
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        db.close()


@pytest.mark.skipif(not FILES, reason="shared corpus not available")
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_file_normalizes_with_exact_row_counts(path):
    with open_corpus(path) as rep:
        info = rep.info()
        assert info.format == "sqlite"
        for view, table in COUNTED.items():
            (n,) = rep.sql(f"SELECT count(*) FROM {view}").fetchall()[0]
            assert n == source_count(path, table), view
        # every other view builds too
        for view in ("nvtx_ranges", "syncs", "threads", "devices", "cuda_graphs", "gpu_metrics",
                     "os_runtime", "processes"):
            rep.sql(f"SELECT count(*) FROM {view}").fetchall()


@pytest.mark.skipif(not FILES, reason="shared corpus not available")
def test_corpus_count():
    assert len(FILES) >= 50
