"""Shared test fixtures: paths to the shared corpus and hand-built exports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fixtures.make_fixtures import standard  # noqa: E402
from fixtures.nsysbuild import TraceBuilder  # noqa: E402

SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "corpus"
H200 = CORPUS / "h200"


def corpus_sqlite_files() -> list[Path]:
    return sorted(CORPUS.rglob("*.sqlite")) if CORPUS.is_dir() else []


def need(path: Path) -> Path:
    """Skip the test when a shared file is absent (CI without ../shared)."""
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own cache directory, so tests never share state."""
    monkeypatch.setenv("NSYSDIAG_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def builder():
    return TraceBuilder


@pytest.fixture(params=["current", "old", "legacy"])
def standard_export(request, tmp_path) -> Path:
    """The documented standard fixture (fixtures/make_fixtures.py) in each layout."""
    return standard(request.param).write(tmp_path / f"{request.param}.sqlite")
