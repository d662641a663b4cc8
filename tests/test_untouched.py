"""No command ever modifies its input: bytes, size and mtime stay, nothing appears beside it.

Every command of the CLI (info, sql, each analysis command, diagnose and its --json and
--html outputs, diff, batch) runs on a SQLite export with the cache (twice: building it,
then reading it) and without it, and on a Parquet-directory export. Before and after each
run the input is fingerprinted: sha256, size and mtime of each file, the mtime of the
input (a directory's changes when a file is added or removed in it) and the listing of
the directory holding it.
"""

from __future__ import annotations

import pytest
from conftest import need
from test_bad_inputs import fingerprint

from fixtures.make_fixtures import standard
from fixtures.parquetdir import sqlite_to_parquet_dir
from nsysdiag.cli.main import cli, main

#: commands that take no PATH of an export or are covered elsewhere (``ranks`` pairs
#: several exports' collectives: tests/test_collectives.py checks its inputs untouched)
_NOT_PER_INPUT = {"info", "sql", "diagnose", "diff", "batch", "cache", "ranks"}
#: commands whose data the standard fixture lacks (no OS runtime trace, no GPU metrics):
#: they exit 4 naming the capture option that records it, and leave the input as it was
_NOT_CAPTURED = {"os-blocking": "--trace=cuda,nvtx,osrt",
                 "gpu-metrics": "--gpu-metrics-devices=all"}


def analysis_commands() -> list[str]:
    return sorted(n for n in cli.commands if n not in _NOT_PER_INPUT)


def commands(path: str, out: str) -> list[list[str]]:
    """Every command on ``path``; outputs (HTML, batch Parquet) go under ``out``."""
    cmds = [
        ["info", path],
        ["info", path, "--json"],
        ["sql", path, "SELECT count(*) AS n FROM kernels"],
        ["sql", path, "SELECT name, start_ns FROM nvtx_ranges ORDER BY 2", "--format", "csv"],
        *([name, path] for name in analysis_commands()),
        ["launch-gaps", path, "--format", "json"],
        ["diagnose", path],
        ["diagnose", path, "--json"],
        ["diagnose", path, "--html", f"{out}/report.html"],
    ]
    if "diff" in cli.commands:
        cmds.append(["diff", path, path])
    if "batch" in cli.commands:
        cmds.append(["batch", path, "-o", f"{out}/batch.parquet", "-j", "1"])
    return cmds


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("untouched")
    (root / "sqlite").mkdir()
    sqlite = standard("current").write(root / "sqlite" / "trace.sqlite")
    (root / "parquet").mkdir()
    src = standard("current").write(root / "src.sqlite")
    pq_dir = sqlite_to_parquet_dir(src, root / "parquet" / "trace_pq")
    src.unlink()
    return {"sqlite": str(sqlite), "parquet": str(pq_dir)}


def _run_all(path: str, tmp_path, capsys, cache_args: list[str], repeat: int = 1) -> None:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    failures = []
    for _ in range(repeat):
        for cmd in commands(path, str(out)):
            before = fingerprint(path)
            capsys.readouterr()
            rc = main([*cache_args, *cmd])
            _, err = capsys.readouterr()
            after = fingerprint(path)
            if after != before:
                failures.append(f"{' '.join(cmd)}: the input changed")
            hint = _NOT_CAPTURED.get(cmd[0])
            if hint is not None and len(cmd) == 2:
                if rc != 4 or hint not in err:
                    failures.append(f"{' '.join(cmd)}: exit {rc}, not 4 with {hint}: "
                                    f"{err.strip()[:300]}")
            elif rc != 0:
                failures.append(f"{' '.join(cmd)}: exit {rc}: {err.strip()[:300]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("cache", ["cache", "no-cache"])
def test_sqlite_input_untouched(cache, inputs, tmp_path, capsys):
    if cache == "cache":  # build the cache, then read it
        _run_all(inputs["sqlite"], tmp_path, capsys, [], repeat=2)
    else:
        _run_all(inputs["sqlite"], tmp_path, capsys, ["--no-cache"])


def test_parquet_input_untouched(inputs, tmp_path, capsys):
    _run_all(inputs["parquet"], tmp_path, capsys, [])


def test_parquet_no_cache_html(inputs, tmp_path, capsys):
    path = inputs["parquet"]
    before = fingerprint(path)
    rc = main(["--no-cache", "diagnose", path, "--html", str(tmp_path / "r.html")])
    assert rc == 0, capsys.readouterr().err
    assert fingerprint(path) == before
    assert (tmp_path / "r.html").is_file()


def test_cache_lives_in_cache_dir(inputs, tmp_path, capsys, monkeypatch):
    """Views are written under the cache directory, nowhere near the input."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("NSYSDIAG_CACHE_DIR", str(cache))
    before = fingerprint(inputs["sqlite"])
    assert main(["kernel-summary", inputs["sqlite"]]) == 0
    assert fingerprint(inputs["sqlite"]) == before
    assert list(cache.rglob("kernels-*.parquet")), "no view cached under NSYSDIAG_CACHE_DIR"


def test_corpus_parquet_dir_untouched(tmp_path, capsys):
    """The real H200 Parquet export, read in place (info and sql: cheap and read-only)."""
    from conftest import H200

    path = str(need(H200 / "baseline_pq"))
    before = fingerprint(path)
    for cmd in (["info", path], ["sql", path, "SELECT count(*) FROM kernels"]):
        assert main(cmd) == 0, capsys.readouterr().err
    assert fingerprint(path) == before
