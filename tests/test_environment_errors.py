"""Failures the environment causes, made by the tests: Ctrl-C, a file size limit, a full
disk, a concurrent ``cache clear``, DuckDB's memory limit. None may exit 3 blaming the
input (issue 39, class 7); ``--no-cache`` writes nothing under the cache directory."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from conftest import CORPUS, ROOT, need, standard

from nsysdiag.engine.database import environment_error
from nsysdiag.errors import EXIT_INTERRUPTED, EXIT_RESOURCE, ResourceError

CLI = [sys.executable, "-m", "nsysdiag"]


@pytest.fixture(autouse=True)
def _bounded():
    def stop(*_):
        raise TimeoutError("test ran past 240 s")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(240)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def trace(tmp_path) -> Path:
    return standard("current").write(tmp_path / "t.sqlite")


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _run(args, env, preexec=None, timeout=120):
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=preexec, cwd=ROOT)


def test_ctrl_c_exits_130_whenever_it_comes(trace, tmp_path):
    """SIGINT at several moments of a cold run (loading, reading, building): 130 (or 0
    when the run was already done), one line, never 3 or 70. Before nsysdiag's own code
    runs (the interpreter starting, on a loaded machine) Python ends by SIGINT itself."""
    codes = []
    for i, delay in enumerate((0.2, 0.8, 1.5, 2.5, 4.0)):
        env = _env(NSYSDIAG_CACHE_DIR=str(tmp_path / f"c{i}"))
        proc = subprocess.Popen([*CLI, "diagnose", str(trace)], env=env, cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        codes.append(proc.returncode)
        assert proc.returncode in (0, EXIT_INTERRUPTED, -signal.SIGINT), (delay, err)
        if proc.returncode == EXIT_INTERRUPTED:
            assert err.strip() == "nsysdiag: interrupted", err
    assert EXIT_INTERRUPTED in codes


def test_file_size_limit_is_the_environment(trace, tmp_path):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))

    proc = _run(["kernel-summary", str(trace)], _env(NSYSDIAG_CACHE_DIR=str(tmp_path / "c")),
                preexec=limit)
    assert proc.returncode == EXIT_RESOURCE, proc.stderr
    assert "File too large" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_full_disk_is_the_environment(trace, tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # leave no space
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        proc = _run(["kernel-summary", str(trace)], _env(NSYSDIAG_CACHE_DIR=str(mnt)))
        assert proc.returncode == EXIT_RESOURCE, proc.stderr
        assert "No space left" in proc.stderr, proc.stderr
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_concurrent_cache_clear_never_blames_the_input(trace, tmp_path):
    from nsysdiag.batch.cache import clear_cache

    cache = tmp_path / "c"
    codes = set()
    for _ in range(4):
        proc = subprocess.Popen([*CLI, "diagnose", str(trace)], cwd=ROOT, text=True,
                                env=_env(NSYSDIAG_CACHE_DIR=str(cache)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while proc.poll() is None:
            clear_cache(cache)
            time.sleep(0.02)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, EXIT_RESOURCE), err
        if proc.returncode:
            assert "removed while in use" in err or "cannot write the view cache" in err, err
        codes.add(proc.returncode)


def test_duckdb_out_of_memory_names_the_setting():
    con = duckdb.connect()
    con.execute("SET memory_limit = '2MB'")
    con.execute("SET temp_directory = ''")
    with pytest.raises(duckdb.Error) as caught:
        con.execute("SELECT list(range) FROM range(20000000)").fetchall()
    err = environment_error(caught.value)
    assert isinstance(err, ResourceError) and "NSYSDIAG_MEMORY_LIMIT" in err.one_line()


def test_out_of_memory_on_a_real_export_is_one_line(tmp_path):
    trace = need(CORPUS / "h200" / "baseline.sqlite")
    proc = _run(["diagnose", str(trace)], _env(NSYSDIAG_CACHE_DIR=str(tmp_path / "c"),
                                               NSYSDIAG_MEMORY_LIMIT="8MB"), timeout=200)
    assert proc.returncode == EXIT_RESOURCE, proc.stderr
    assert "NSYSDIAG_MEMORY_LIMIT" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_no_cache_writes_nothing_under_the_cache_dir(trace, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in _env(HOME=str(home)).items()
           if k not in ("NSYSDIAG_CACHE_DIR", "XDG_CACHE_HOME")}
    proc = _run(["--no-cache", "diagnose", str(trace)], env)
    assert proc.returncode == 0, proc.stderr
    assert not any(home.rglob("*")), sorted(home.rglob("*"))
