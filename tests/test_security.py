"""Hostile inputs: user values are values, nsys is never run through a shell, and no
output path is derived from what a trace contains.

* ``--range`` text with quotes and SQL is bound as a parameter: a clean one-line usage
  error (exit 2) when no range has that name, the range found when one has it, and the
  views intact afterwards;
* the package never runs a shell (no ``shell=True``, ``os.system``, ``os.popen``, ...);
  nsys gets an argument list, with a private copy of the report, so shell metacharacters
  in a report's name reach no shell;
* strings in a trace that look like paths (``../../x``, absolute paths) or shell/SQL
  (``$(...)``, quotes) never become file names: everything nsysdiag writes lands in the
  cache directory or the output the user named;
* paths with quotes, spaces, ``#``, ``?`` and ``%`` work as input and cache locations.
"""

from __future__ import annotations

import ast
import os
import re
import sqlite3
import stat
from pathlib import Path

import pytest
from conftest import ROOT
from test_bad_inputs import fingerprint

import nsysdiag
from fixtures.fuzz import INJECTION
from fixtures.make_fixtures import standard
from fixtures.nsysbuild import TraceBuilder
from nsysdiag.adapters import nsysrep
from nsysdiag.analyses import ANALYSES
from nsysdiag.cli.main import cli, main
from nsysdiag.errors import InputError, UsageError
from nsysdiag.views.definitions import VIEWS

HOSTILE_RANGES = [
    INJECTION,
    "x' OR '1'='1",
    'x"; DROP TABLE kernels; --',
    "step'); SELECT * FROM read_csv('/etc/passwd'); --",
    "%",
    "_",
    "*",
    "\\",
    "step\n--",
]


def _repeated(name: str, tmp_path: Path, filename: str = "units.sqlite") -> Path:
    """25 instances of an NVTX range called ``name``, each around one kernel launch."""
    b = TraceBuilder("current")
    t = 1_000
    for i in range(25):
        b.nvtx(t, t + 10_000 + (i % 3) * 1_000, name)
        b.launch(t + 100, t + 900, t + 1_000, t + 8_000, name="k")
        t += 12_000
    return b.write(tmp_path / filename)


# --------------------------------------------------------------------- --range values

@pytest.mark.parametrize("value", HOSTILE_RANGES, ids=range(len(HOSTILE_RANGES)))
def test_hostile_range_is_a_value(value, tmp_path, capsys):
    path = _repeated("step", tmp_path)
    before = fingerprint(path)
    rc = main(["diagnose", str(path), "--range", value])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nsysdiag: error:"), err
    assert "no" in lines[0] and "range" in lines[0], err
    assert fingerprint(path) == before
    # the views are intact: the statement was never run as SQL
    with nsysdiag.open(path) as rep:
        assert rep.sql("SELECT count(*) FROM kernels").fetchall() == [(25,)]


def test_hostile_range_in_library_call(tmp_path):
    path = _repeated("step", tmp_path)
    with nsysdiag.open(path, cache=False) as rep:
        with pytest.raises(UsageError, match="no .*range"):
            nsysdiag.diagnose(rep, range_name=INJECTION)
        assert rep.sql("SELECT count(*) FROM kernels").fetchall() == [(25,)]


def test_range_named_like_sql_is_found(tmp_path, capsys):
    """A range whose *name* is hostile text is matched exactly, as data."""
    path = _repeated(INJECTION, tmp_path)
    rc = main(["ranges", str(path), "--range", INJECTION, "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "25" in out and "DROP TABLE" in out
    rc = main(["diagnose", str(path), "--range", INJECTION, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert '"unit": "x\'; DROP TABLE kernels; --"' in out


# -------------------------------------------------------------------------- no shell

_SHELL_CALLS = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"),
                ("subprocess", "getstatusoutput"), ("os", "execl"), ("os", "execlp"),
                ("os", "spawnl"), ("os", "spawnlp"), ("pty", "spawn")}


def _package_sources() -> list[Path]:
    return sorted((ROOT / "nsysdiag").rglob("*.py"))


def test_no_shell_anywhere_in_the_package():
    """No call passes ``shell=`` other than a literal False, and none of the shell-running
    helpers is called (AST, so comments and strings do not count)."""
    offences = []
    for f in _package_sources():
        tree = ast.parse(f.read_text(), filename=str(f))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                              and kw.value.value is False):
                    offences.append(f"{f.relative_to(ROOT)}:{node.lineno}: "
                                    f"shell={ast.unparse(kw.value)}")
            fn = node.func
            if (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name)
                    and (fn.value.id, fn.attr) in _SHELL_CALLS):
                offences.append(f"{f.relative_to(ROOT)}:{node.lineno}: {fn.value.id}.{fn.attr}")
    assert not offences, "\n".join(offences)
    assert len(_package_sources()) > 10


def test_no_shell_true_text():
    """The plain-text form of the same check, as a reviewer would grep for it."""
    hits = [f"{f.relative_to(ROOT)}:{i}" for f in _package_sources()
            for i, line in enumerate(f.read_text().splitlines(), 1)
            if re.search(r"shell\s*=\s*True", line)]
    assert not hits, hits


def _hostile_report(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    d.mkdir()
    report = d / "r; touch PWNED $(touch PWNED2) `id` 'q\".nsys-rep"
    report.write_bytes(b"not really a report")
    return report


def test_nsys_gets_an_argument_list(tmp_path, monkeypatch):
    """What reaches Popen: a list of plain strings, no shell, a private copy of the input."""
    report = _hostile_report(tmp_path)
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    seen = {}

    class Stop(Exception):
        pass

    def fake_popen(args, **kwargs):
        seen["args"], seen["kwargs"] = args, kwargs
        raise Stop

    monkeypatch.setattr(nsysrep.subprocess, "Popen", fake_popen)
    with pytest.raises(Stop):
        nsysrep.export_report(report, nsys=str(fake), cache_dir=tmp_path / "cache")
    args, kwargs = seen["args"], seen["kwargs"]
    assert isinstance(args, list) and all(isinstance(a, str) for a in args)
    assert not kwargs.get("shell", False)
    assert args[0] == str(fake) and args[1] == "export"
    assert str(report) not in args and report.name not in " ".join(args)
    assert Path(args[-1]).parent.parent == tmp_path / "cache"


@pytest.mark.skipif(os.name != "posix", reason="fake nsys scripts need /bin/sh")
def test_shell_metacharacters_in_report_name_reach_no_shell(tmp_path, monkeypatch):
    report = _hostile_report(tmp_path)
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    argv_file = tmp_path / "argv.txt"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > "{argv_file}"\n'
                    'echo "Error: not a report" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    before = fingerprint(report)
    with pytest.raises(InputError, match="nsys export failed"):
        nsysrep.export_report(report, nsys=str(fake), cache_dir=tmp_path / "cache")
    argv = argv_file.read_text().splitlines()
    assert argv[:6] == ["export", "--type", "sqlite", "--force-overwrite", "true", "--output"]
    assert len(argv) == 8  # one element per argument: nothing was split or expanded
    assert not list(tmp_path.rglob("PWNED*")), "a shell ran"
    assert fingerprint(report) == before


def test_export_cache_name_is_sanitized(tmp_path):
    report = _hostile_report(tmp_path)
    out = nsysrep.cached_export_path(report, cache_dir=tmp_path / "cache")
    assert out.parent == tmp_path / "cache"
    assert re.fullmatch(r"[A-Za-z0-9._-]+\.sqlite", out.name), out.name


# ---------------------------------------------------------------- output locations

def _trace_with_path_strings(tmp_path: Path, victim: Path) -> Path:
    """An export whose every string is a path or shell text aimed at ``victim``."""
    evil = [f"{victim}/pwned", "../../../../victim/pwned", "..", "/", "$(touch pwned)",
            f"{victim}/../victim/x.parquet", "kernels.parquet", "CON", "a\x00b", INJECTION]
    b = TraceBuilder("current", gpu_name=f"{victim}/gpu")
    t = 1_000
    for i in range(25):
        name = evil[i % len(evil)]
        b.nvtx(t, t + 10_000, "../../victim/step")
        b.launch(t + 100, t + 900, t + 1_000, t + 8_000, name=name)
        b.thread_name(evil[(i + 1) % len(evil)], tid=100 + i)
        t += 12_000
    d = tmp_path / "trace"
    d.mkdir()
    path = b.write(d / "trace.sqlite")
    db = sqlite3.connect(path)
    db.execute("UPDATE PROCESSES SET name = ?", (f"{victim}/proc",))
    db.execute("UPDATE META_DATA_EXPORT SET value = ?", ("../../../victim/meta",))
    db.commit()
    db.close()
    return path


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_output_paths_not_derived_from_trace_contents(tmp_path, capsys, monkeypatch):
    victim = tmp_path / "victim"
    victim.mkdir()
    path = _trace_with_path_strings(tmp_path, victim)
    cache = tmp_path / "cache"
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("NSYSDIAG_CACHE_DIR", str(cache))
    monkeypatch.chdir(out)  # a relative path in a trace would land here
    before_tree = _files_under(tmp_path) - _files_under(cache)
    before = fingerprint(path)
    analysis = sorted(n for n in cli.commands
                      if n not in {"info", "sql", "diagnose", "diff", "batch", "cache"})
    runs = [["info", str(path)], ["sql", str(path), "SELECT * FROM kernels"],
            ["diagnose", str(path), "--json", "--html", str(out / "report.html")],
            *([name, str(path)] for name in analysis)]
    for cmd in runs:
        rc = main(cmd)
        err = capsys.readouterr().err
        assert "Traceback" not in err and rc in (0, 4), (cmd, rc, err)
    assert fingerprint(path) == before
    assert not any(victim.iterdir()), "a trace string became a path"
    created = (_files_under(tmp_path) - _files_under(cache) - {cache}) - before_tree
    assert created == {out / "report.html"}, sorted(map(str, created))
    # the cache holds <identity>-v<format>-<version>/<view>-<hex>.parquet, <view>.json,
    # probe.json and results/<analysis>-<hex key>/ holding fields-<hex>.json and
    # <hex>/{result.json, <n>.arrow}, nothing else
    view_dirs = list((cache / "views").iterdir())
    assert len(view_dirs) == 1
    assert re.fullmatch(r"[0-9a-f]{24}-v\d+-[0-9A-Za-z.+-]+", view_dirs[0].name), view_dirs[0].name
    for f in view_dirs[0].iterdir():
        if f.name in ("results", "probe.json"):
            continue
        view, rest = f.name.split("-", 1) if "-" in f.name else (f.stem, "")
        assert view in VIEWS, f.name
        assert f.name == f"{view}.json" or re.fullmatch(r"[0-9a-f]{16}\.parquet", rest), f.name
    results = list((view_dirs[0] / "results").iterdir())
    assert results
    for d in results:
        name, key = d.name.rsplit("-", 1)
        assert name in ANALYSES and re.fullmatch(r"[0-9a-f]{20}", key), d.name
        for f in d.iterdir():
            if f.is_file():
                assert re.fullmatch(r"fields-[0-9a-f]{20}\.json", f.name), f
                continue
            assert re.fullmatch(r"[0-9a-f]{20}", f.name), f
            assert all(re.fullmatch(r"result\.json|\d+\.arrow", g.name) for g in f.iterdir()), f
    assert {p.name for p in cache.iterdir()} <= {"views", "exports", "spill"}
    # spill/ holds DuckDB's spill files and the analyses' scratch steps, all gone on close
    assert not (cache / "spill").exists() or not any((cache / "spill").iterdir())


def test_odd_paths_work(tmp_path, monkeypatch, capsys):
    """Quotes, spaces, #, ? and % in the input path and in the cache path."""
    d = tmp_path / "we'ird \"dir\" #1 ?x %20"
    d.mkdir()
    path = standard("current").write(d / "tr'ace #?%.sqlite")
    cache = tmp_path / "ca'che ?#%"
    monkeypatch.setenv("NSYSDIAG_CACHE_DIR", str(cache))
    before = fingerprint(path)
    for cmd in (["info", str(path)], ["kernel-summary", str(path)],
                ["sql", str(path), "SELECT count(*) FROM kernels"]):
        rc = main(cmd)
        assert rc == 0, capsys.readouterr().err
    assert "3" in capsys.readouterr().out
    assert fingerprint(path) == before
    assert list(cache.rglob("kernels-*.parquet"))


def test_view_name_is_checked(tmp_path):
    path = standard("current").write(tmp_path / "t.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        with pytest.raises(UsageError, match="no view named"):
            rep.view("kernels; DROP TABLE kernels")
        assert rep.sql("SELECT count(*) FROM kernels").fetchall() == [(3,)]


def test_sql_parameters_are_bound(tmp_path):
    """``Report.sql`` binds values: text that looks like SQL matches nothing and runs nothing."""
    path = standard("current").write(tmp_path / "t.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        rows = rep.sql("SELECT count(*) FROM kernels WHERE name = $n", {"n": INJECTION}).fetchall()
        assert rows == [(0,)]
        assert rep.sql("SELECT count(*) FROM kernels").fetchall() == [(3,)]


def test_input_opened_read_only(tmp_path):
    """The SQLite input is opened with mode=ro&immutable=1 (no locks, no journal)."""
    path = standard("current").write(tmp_path / "t.sqlite")
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    with nsysdiag.open(path, cache=False) as rep:
        rep.info()
        assert "immutable=1" in nsysdiag.adapters.sqlite._uri(rep.source.path)
    assert sorted(os.listdir(tmp_path)) == ["t.sqlite"]
