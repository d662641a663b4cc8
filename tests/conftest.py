"""Shared test fixtures: paths to the shared corpus and hand-built exports."""

from __future__ import annotations

import atexit
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nsysdiag  # noqa: E402
from fixtures.make_fixtures import standard  # noqa: E402
from fixtures.nsysbuild import TraceBuilder  # noqa: E402

SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "corpus"
H200 = CORPUS / "h200"


_CORPUS_CACHE = Path(tempfile.mkdtemp(prefix="nsysdiag-test-corpus-"))
atexit.register(shutil.rmtree, _CORPUS_CACHE, True)


def open_corpus(path: Path) -> nsysdiag.Report:
    """Open a shared-corpus export with one cache for the whole test session.

    The corpus loops of the analysis tests all read the same 56 files; with a shared
    cache each file's views are built once, by whichever test asks first.
    """
    return nsysdiag.open(path, cache_dir=_CORPUS_CACHE)


def run_on_corpus(run) -> dict:
    """``run(report)`` on every corpus export (shared session cache): path -> result."""
    out = {}
    for path in corpus_sqlite_files():
        with open_corpus(path) as rep:
            out[path] = run(rep)
    return out


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


@pytest.fixture(scope="session")
def labelled(tmp_path_factory) -> dict[str, Path]:
    """The project's own labelled captures (fixtures/h200/*.tar.xz, fixtures/h100/*.tar.xz;
    see fixtures/README.md), extracted once: scenario name -> .sqlite path."""
    out = tmp_path_factory.mktemp("labelled")
    paths = {}
    for tar in sorted((ROOT / "fixtures").glob("h[12]00/*.tar.xz")):
        with tarfile.open(tar) as tf:
            member = next(m for m in tf.getmembers() if m.name.endswith(".sqlite"))
            tf.extract(member, out, filter="data")
            paths[tar.name.removesuffix(".tar.xz")] = out / member.name
    return paths
