"""Raw reports (.nsys-rep/.qdrep) exported to SQLite with the nsys CLI.

The real-export tests need an nsys (``.ci/install-nsys.sh`` installs Debian's 2022.4 CLI)
and the shared corpus; they are skipped without them. The others use small fake ``nsys``
scripts and run everywhere with a POSIX shell.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import time
from pathlib import Path

import pytest

from nsysdiag import config
from nsysdiag.adapters import nsysrep
from nsysdiag.adapters.nsysrep import export_report, find_nsys
from nsysdiag.errors import InputError, NsysNotFoundError

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS = SHARED / "corpus" / "public"
REF_DIR = "converted_by_nsys2022.4.2"
COUNTED = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "NVTX_EVENTS",
)

NSYS = find_nsys()
needs_nsys = pytest.mark.skipif(
    NSYS is None, reason="no nsys (run .ci/install-nsys.sh to install Debian's nsight-systems)"
)
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no shared corpus at {CORPUS}")
posix_only = pytest.mark.skipif(os.name != "posix", reason="fake nsys scripts need /bin/sh")


def _raw_reports() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(p for pat in ("*/*.nsys-rep", "*/*.qdrep") for p in CORPUS.glob(pat))


def _reference(report: Path) -> Path:
    return report.parent / REF_DIR / f"{report.name}.sqlite"


#: reports the 2022.4 CLI converted (they have a reference conversion made by that CLI)
CONVERTIBLE = [p for p in _raw_reports() if _reference(p).is_file()]
#: reports from nsys 2023.1+ that it cannot read (no reference conversion)
TOO_NEW = [p for p in _raw_reports() if not _reference(p).is_file()]


def _ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.name}" for p in paths]


def _counts(db_path: Path) -> dict[str, int | None]:
    """Row counts of the compared tables; None where the (lazy) export lacks the table."""
    uri = "file:" + str(db_path) + "?mode=ro&immutable=1"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {
            t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] if t in names else None
            for t in COUNTED
        }


def _fingerprint(path: Path) -> tuple[str, int, int, list[str]]:
    """Input bytes, size, mtime_ns, and what its folder holds."""
    st = path.stat()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest, st.st_size, st.st_mtime_ns, sorted(os.listdir(path.parent))


def _only_exports(cache: Path) -> None:
    """The cache holds finished exports only: no temporary directory or stray file."""
    left = sorted(p.name for p in cache.iterdir())
    assert all(name.endswith(".sqlite") for name in left), left


def _fake_nsys(tmp_path: Path, body: str, name: str = "nsys") -> Path:
    d = tmp_path / "fakebin"
    d.mkdir(exist_ok=True)
    exe = d / name
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return exe


# ------------------------------------------------------------------ real exports


@needs_nsys
@needs_corpus
@pytest.mark.parametrize("report", CONVERTIBLE, ids=_ids(CONVERTIBLE))
def test_export_matches_reference_conversion(report: Path, tmp_path: Path) -> None:
    before = _fingerprint(report)
    cache = tmp_path / "cache"
    out = export_report(report, cache_dir=cache)
    assert out.parent == cache
    assert out.suffix == ".sqlite"
    assert out.read_bytes()[:16] == b"SQLite format 3\x00"
    assert _counts(out) == _counts(_reference(report))
    # the input is read, never written: same bytes, mtime, and nothing added beside it
    assert _fingerprint(report) == before
    _only_exports(cache)


@needs_nsys
@needs_corpus
def test_some_reports_are_convertible() -> None:
    # guards against the parametrized test above silently collecting nothing
    assert len(CONVERTIBLE) >= 3
    assert len(TOO_NEW) >= 1


def _small_convertible() -> Path:
    if not CONVERTIBLE:
        pytest.skip("no convertible report in the corpus")
    return min(CONVERTIBLE, key=lambda p: p.stat().st_size)


@needs_nsys
@needs_corpus
def test_second_call_hits_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = _small_convertible()
    cache = tmp_path / "cache"
    out = export_report(report, cache_dir=cache)
    assert nsysrep.cached_export_path(report, cache_dir=cache) == out
    mtime = out.stat().st_mtime_ns

    def no_run(*args, **kwargs):
        raise AssertionError(f"nsys ran on a cached report: {args!r}")

    monkeypatch.setattr(nsysrep.subprocess, "Popen", no_run)
    monkeypatch.setattr(nsysrep.subprocess, "run", no_run)
    assert export_report(report, cache_dir=cache) == out
    # cached exports are used even when no nsys could be found now
    assert export_report(report, cache_dir=cache, nsys=str(tmp_path / "no" / "nsys")) == out
    assert out.stat().st_mtime_ns == mtime
    assert len(list(cache.iterdir())) == 1


@needs_nsys
@needs_corpus
def test_changed_report_is_exported_again(tmp_path: Path) -> None:
    src = _small_convertible()
    report = tmp_path / src.name
    report.write_bytes(src.read_bytes())
    cache = tmp_path / "cache"
    first = export_report(report, cache_dir=cache)
    st = report.stat()
    os.utime(report, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    second = export_report(report, cache_dir=cache)
    assert second != first
    assert first.is_file() and second.is_file()
    assert _counts(first) == _counts(second)


@needs_nsys
@needs_corpus
def test_default_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.CACHE_ENV, str(tmp_path / "c"))
    report = _small_convertible()
    out = export_report(report)
    assert out.parent == tmp_path / "c" / "exports"
    assert out.parent != report.parent


def _too_new_samples() -> list[Path]:
    """One 'Version number is invalid' (2023.4+) and one ProtobufParseException (2023.1/3)."""
    picks = []
    by_name = {f"{p.parent.name}/{p.name}": p for p in TOO_NEW}
    for key in (
        "p4arth__cuda-perf-sandbox/my_vector_add_report.nsys-rep",  # 2025.5.2
        "LeiWang1999__memfusion_artifact/report1.nsys-rep",  # 2023.1.2
    ):
        if key in by_name:
            picks.append(by_name[key])
    return picks or TOO_NEW[:1]


TOO_NEW_SAMPLES = _too_new_samples()


@needs_nsys
@needs_corpus
@pytest.mark.parametrize("report", TOO_NEW_SAMPLES, ids=_ids(TOO_NEW_SAMPLES))
def test_report_from_newer_nsys_is_input_error(report: Path, tmp_path: Path) -> None:
    before = _fingerprint(report)
    cache = tmp_path / "cache"
    with pytest.raises(InputError) as info:
        export_report(report, cache_dir=cache)
    err = info.value
    assert not isinstance(err, NsysNotFoundError)
    assert err.path == str(report)
    line = err.one_line()
    assert "\n" not in line
    assert line.startswith(f"{report}: nsys export failed: ")
    assert "Version number is invalid" in line or "ProtobufParseException" in line
    assert "nsys export --type sqlite" in line
    assert len(err.message) < 400
    assert _fingerprint(report) == before
    assert list(cache.iterdir()) == []  # no partial export, no temporary directory


@needs_nsys
@needs_corpus
def test_open_source_exports_raw_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from nsysdiag.adapters.detect import open_source

    monkeypatch.setenv(config.CACHE_ENV, str(tmp_path))
    report = next(
        (p for p in CONVERTIBLE if (_counts(_reference(p))["CUPTI_ACTIVITY_KIND_KERNEL"] or 0) > 0),
        None,
    )
    if report is None:
        pytest.skip("no convertible report with kernels")
    source = open_source(report)
    try:
        assert "CUPTI_ACTIVITY_KIND_KERNEL" in source.tables()
    finally:
        source.close()


# ------------------------------------------------------------------ finding nsys


def _no_nsys_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "emptybin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(config.NSYS_ENV, raising=False)
    monkeypatch.setattr(nsysrep, "WELL_KNOWN_GLOBS", ())


def _dummy_report(tmp_path: Path) -> Path:
    report = tmp_path / "in" / "report1.nsys-rep"
    report.parent.mkdir()
    report.write_bytes(b"not really a report")
    return report


def test_missing_nsys_is_nsys_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_nsys_anywhere(tmp_path, monkeypatch)
    assert find_nsys() is None
    report = _dummy_report(tmp_path)
    with pytest.raises(NsysNotFoundError) as info:
        export_report(report, cache_dir=tmp_path / "cache")
    err = info.value
    assert isinstance(err, InputError)
    assert err.path == str(report)
    line = err.one_line()
    assert "\n" not in line
    assert "nsight-systems" in line and "--nsys" in line and config.NSYS_ENV in line
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def test_nonexistent_explicit_nsys_is_not_replaced(tmp_path: Path) -> None:
    # even where a real nsys is installed, a wrong --nsys is an error, not a fallback
    bad = str(tmp_path / "nowhere" / "nsys")
    assert find_nsys(bad) is None
    report = _dummy_report(tmp_path)
    with pytest.raises(NsysNotFoundError) as info:
        export_report(report, nsys=bad, cache_dir=tmp_path / "cache")
    assert bad in info.value.one_line()
    assert "\n" not in info.value.one_line()


@posix_only
def test_find_nsys_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_nsys_anywhere(tmp_path, monkeypatch)
    explicit = _fake_nsys(tmp_path, "exit 0\n", name="nsys-explicit")
    from_env = _fake_nsys(tmp_path, "exit 0\n", name="nsys-env")
    on_path = tmp_path / "pathbin" / "nsys"
    on_path.parent.mkdir()
    on_path.write_text("#!/bin/sh\nexit 0\n")
    on_path.chmod(0o755)
    known = tmp_path / "opt" / "nsight-systems" / "2024.5.1" / "bin" / "nsys"
    older = tmp_path / "opt" / "nsight-systems" / "2022.4.2" / "bin" / "nsys"
    for exe in (known, older):
        exe.parent.mkdir(parents=True)
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)

    monkeypatch.setattr(
        nsysrep, "WELL_KNOWN_GLOBS", (str(tmp_path / "opt/nsight-systems/*/bin/nsys"),)
    )
    assert find_nsys() == str(known)  # newest version first
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert find_nsys() == str(on_path)
    monkeypatch.setenv(config.NSYS_ENV, str(from_env))
    assert find_nsys() == str(from_env)
    assert find_nsys(str(explicit)) == str(explicit)
    assert find_nsys(str(known.parent.parent)) == str(known)  # an install directory
    monkeypatch.setenv(config.NSYS_ENV, str(tmp_path / "missing"))
    assert find_nsys() is None  # a wrong $NSYSDIAG_NSYS is not silently replaced
    (tmp_path / "plain").write_text("not executable")
    assert find_nsys(str(tmp_path / "plain")) is None


# ------------------------------------------------------------------ export mechanics (fake nsys)

FAKE_EXPORT = """\
printf '%s\\n' "$@" > "$(dirname "$0")/argv.txt"
pwd > "$(dirname "$0")/cwd.txt"
out=""
while [ $# -gt 1 ]; do
  if [ "$1" = "--output" ]; then out="$2"; fi
  shift
done
input="$1"
printf 'Exporting 10 events: [==50%%    ]\\rExporting 10 events: [=====100%%]\\n' >&2
{ printf 'SQLite format 3\\000'; cat "$input"; } > "$out"
echo side > "$(dirname "$input")/side-file.txt"
"""


@posix_only
def test_export_mechanics_with_fake_nsys(tmp_path: Path) -> None:
    fake = _fake_nsys(tmp_path, FAKE_EXPORT)
    report = _dummy_report(tmp_path)
    before = _fingerprint(report)
    cache = tmp_path / "cache"
    out = export_report(report, nsys=str(fake), cache_dir=cache)
    argv = (fake.parent / "argv.txt").read_text().splitlines()
    assert argv[:6] == ["export", "--type", "sqlite", "--force-overwrite", "true", "--output"]
    # nsys is run from, writes into, and reads a copy inside a temporary directory of the cache
    tmp_out, tmp_in = Path(argv[6]), Path(argv[7])
    assert tmp_out.parent == tmp_in.parent
    assert tmp_in.parent.parent == cache
    assert tmp_in.suffix == ".nsys-rep"
    assert Path((fake.parent / "cwd.txt").read_text().strip()) == tmp_in.parent.resolve()
    assert out.read_bytes() == b"SQLite format 3\x00" + report.read_bytes()
    assert _fingerprint(report) == before  # the side file went to the temporary directory
    _only_exports(cache)


@posix_only
def test_nsys_error_is_summarized(tmp_path: Path) -> None:
    fake = _fake_nsys(
        tmp_path,
        "printf 'Exporting 5 events: [=10%%   ]\\r' >&2\n"
        "echo 'Exportation error: Section Table Reference magic number mismatch.' >&2\n"
        "exit 1\n",
    )
    report = _dummy_report(tmp_path)
    with pytest.raises(InputError) as info:
        export_report(report, nsys=str(fake), cache_dir=tmp_path / "cache")
    assert not isinstance(info.value, NsysNotFoundError)
    assert info.value.message == (
        "nsys export failed: Exportation error: Section Table Reference magic number mismatch."
    )
    assert "\n" not in info.value.one_line()
    _only_exports(tmp_path / "cache")


@posix_only
def test_nsys_success_without_output_is_input_error(tmp_path: Path) -> None:
    fake = _fake_nsys(tmp_path, "exit 0\n")
    with pytest.raises(InputError, match="wrote no SQLite file"):
        export_report(_dummy_report(tmp_path), nsys=str(fake), cache_dir=tmp_path / "cache")
    _only_exports(tmp_path / "cache")


@posix_only
def test_timeout_kills_nsys(tmp_path: Path) -> None:
    marker = tmp_path / "child-finished"
    # a child of nsys that outlives nsys unless the whole process group is killed
    fake = _fake_nsys(tmp_path, f"( sleep 2; touch '{marker}' ) &\nwait\n")
    start = time.monotonic()
    with pytest.raises(InputError) as info:
        export_report(
            _dummy_report(tmp_path), nsys=str(fake), cache_dir=tmp_path / "cache", timeout_s=0.3
        )
    assert time.monotonic() - start < 1.9
    assert "did not finish within 0.3 s" in info.value.one_line()
    _only_exports(tmp_path / "cache")
    time.sleep(max(0.0, 2.5 - (time.monotonic() - start)))
    assert not marker.exists()  # the whole process group was killed, the child included


def test_missing_input_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        export_report(tmp_path / "absent.nsys-rep", cache_dir=tmp_path / "cache")
    with pytest.raises(InputError, match="not a regular file"):
        export_report(tmp_path, cache_dir=tmp_path / "cache")


def test_a_report_rewritten_with_its_size_and_mtime_is_exported_again(tmp_path: Path) -> None:
    """The export cache is keyed by content identity: a report rewritten in place with
    the same size and its mtime put back (``cp`` over it, then ``touch -r``) is not the
    report whose export is cached."""
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"A" * 300_000)
    st = report.stat()
    first = nsysrep.cached_export_path(report, cache_dir=tmp_path / "cache")
    assert nsysrep.cached_export_path(report, cache_dir=tmp_path / "cache") == first
    with open(report, "r+b") as fh:
        fh.seek(150_000)
        fh.write(b"B")
    os.utime(report, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert report.stat().st_size == st.st_size
    assert report.stat().st_mtime_ns == st.st_mtime_ns
    assert nsysrep.cached_export_path(report, cache_dir=tmp_path / "cache") != first
