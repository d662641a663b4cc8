"""The view cache under hostile conditions the tests make: an export changed in place with
its size and mtime kept, an export changed while read, damaged cache files, a damaged
probe.json, concurrent cold-cache builds (issue 39, classes 3 and 5)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, TraceBuilder, standard

import nsysdiag
from nsysdiag.errors import InputError
from nsysdiag.fileio import content_identity
from nsysdiag.views.cache import ViewFiles


@pytest.fixture(autouse=True)
def _bounded():
    """Every test here ends within 120 s, whatever goes wrong."""
    def stop(*_):
        raise TimeoutError("test ran past 120 s")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _trace(kernel_ns: int) -> TraceBuilder:
    b = TraceBuilder("current")
    for i in range(3):
        b.launch(1000 + i * 10000, 2000 + i * 10000, 3000 + i * 10000,
                 3000 + i * 10000 + kernel_ns, name="gemm")
    return b


def _kernel_sum(path: Path, **kw) -> int:
    with nsysdiag.open(path, **kw) as rep:
        return rep.execute("SELECT sum(end_ns - start_ns) FROM kernels")[0][0]


def _entry(path: Path) -> Path:
    with nsysdiag.open(path) as rep:
        rep.ensure_views("kernels")
        return rep.cache_path


def test_changed_in_place_with_same_size_and_mtime_is_read_again(tmp_path):
    a = _trace(1000).write(tmp_path / "a.sqlite")
    b = _trace(2000).write(tmp_path / "b.sqlite")
    assert a.stat().st_size == b.stat().st_size  # the same layout, other durations
    assert _kernel_sum(a) == 3000
    st = a.stat()
    with open(a, "r+b") as fh:  # in place: same inode, size and (restored) mtime
        fh.write(b.read_bytes())
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = a.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size,
                                                                 st.st_mtime_ns)
    assert _kernel_sum(a) == 6000


def test_same_stat_other_bytes_is_another_identity(tmp_path):
    """The sampled hash tells apart content the stat fields cannot."""
    a = _trace(1000).write(tmp_path / "a.sqlite")
    before = content_identity(a)
    data = bytearray(a.read_bytes())
    data[-1] ^= 0xFF
    with open(a, "r+b") as fh:
        fh.write(data)
    assert content_identity(a) != before


def test_changed_while_read_is_an_error_and_nothing_is_kept(tmp_path):
    a = _trace(1000).write(tmp_path / "a.sqlite")
    with nsysdiag.open(a) as rep:
        rep.ensure_views("devices")
        st = a.stat()
        os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # a writer touched it
        with pytest.raises(InputError, match="changed while it was being read"):
            rep.ensure_views("kernels")
        assert not (rep.cache_path / "kernels.json").exists()
        assert not list(rep.cache_path.glob("kernels-*.parquet"))


def test_changed_while_read_exits_3_with_one_line(tmp_path, monkeypatch):
    """On the command line: the writer is simulated by a hook on the view build."""
    from nsysdiag.cli.main import main
    from nsysdiag.views import build

    a = _trace(1000).write(tmp_path / "a.sqlite")
    real = build.ViewStore._write

    def write_then_touch(self, spec, tmp, likely):
        real(self, spec, tmp, likely)
        os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 1))

    monkeypatch.setattr(build.ViewStore, "_write", write_then_touch)
    assert main(["kernel-summary", str(a)]) == 3


def _damage(entry: Path, view: str, how: str) -> None:
    file = entry / json.loads((entry / f"{view}.json").read_text())["file"]
    data = bytearray(file.read_bytes())
    if how == "flip":  # one bit of the data pages: DuckDB reads it without complaint
        data[len(data) // 3] ^= 0x10
    elif how == "truncate":
        data = data[: len(data) // 2]
    file.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_damaged_view_file_is_rebuilt_with_a_note(tmp_path, capfd, how):
    a = _trace(1000).write(tmp_path / "a.sqlite")
    entry = _entry(a)
    _damage(entry, "kernels", how)
    assert _kernel_sum(a) == 3000
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "cached view kernels" in err and "rebuilding it" in err
    assert _kernel_sum(a) == 3000  # the rebuilt entry is intact: no second note
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("record", [
    "{", '{"file": "../../etc/passwd", "size": 1, "crc32": 1}', '{"file": 3}', "[]"])
def test_damaged_view_record_is_rebuilt(tmp_path, capfd, record):
    a = _trace(1000).write(tmp_path / "a.sqlite")
    entry = _entry(a)
    (entry / "kernels.json").write_text(record)
    assert _kernel_sum(a) == 3000
    assert "rebuilding it" in capfd.readouterr().err


@pytest.mark.parametrize("edit", [
    lambda d: "not json",
    lambda d: json.dumps({**d, "cuda_traced": "yes"}),
    lambda d: json.dumps({**d, "views": {**d["views"], "kernels": {
        **d["views"]["kernels"], "source_rows": "many"}}}),
    lambda d: json.dumps({**d, "views": {**d["views"], "kernels": {
        **d["views"]["kernels"], "status": "empty"}}}),
])
def test_damaged_probe_is_probed_again(tmp_path, capfd, edit):
    from nsysdiag.cli.main import main

    a = standard("current").write(tmp_path / "a.sqlite")
    assert main(["info", "--json", str(a)]) == 0
    good = json.loads(capfd.readouterr().out)
    stored = next((Path(os.environ["NSYSDIAG_CACHE_DIR"]) / "views").glob("*/probe.json"))
    stored.write_text(edit(json.loads(stored.read_text())))
    assert main(["info", "--json", str(a)]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out) == good
    assert "probe.json is damaged" in err


def test_publish_is_write_once(tmp_path):
    """A second builder of the same view keeps the first one's file, never replacing it
    under a reader."""
    files = ViewFiles(tmp_path)
    first = files.new_file("kernels")
    first.write_bytes(b"first")
    assert files.publish("kernels", first) == first
    inode = first.stat().st_ino
    second = files.new_file("kernels")
    second.write_bytes(b"second")
    assert files.publish("kernels", second) == first
    assert not second.exists() and first.stat().st_ino == inode
    assert files.lookup("kernels") == first


RACE = """
import sys
sys.path.insert(0, {root!r})
import nsysdiag
with nsysdiag.open({path!r}) as rep:
    d = nsysdiag.diagnose(rep)
    print(rep.execute("SELECT count(*), sum(end_ns - start_ns) FROM kernels")[0])
"""


def test_three_processes_on_a_cold_cache(tmp_path):
    a = standard("current").write(tmp_path / "a.sqlite")
    code = RACE.format(root=str(ROOT), path=str(a))
    for i in range(3):
        env = {**os.environ, "NSYSDIAG_CACHE_DIR": str(tmp_path / f"cache{i}")}
        procs = [subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(3)]
        outs = [p.communicate(timeout=100) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
        assert {o for o, _ in outs} == {"(3, 7500)\n"}


def test_damaged_cached_result_is_computed_again(tmp_path, capfd):
    a = standard("current").write(tmp_path / "a.sqlite")
    with nsysdiag.open(a) as rep:
        first = rep.analysis("kernel_summary").to_arrow().to_pylist()
        stored = sorted((rep.cache_path / "results").glob("kernel_summary-*/*/0.arrow"))
    assert stored
    data = bytearray(stored[0].read_bytes())
    data[len(data) // 2] ^= 0x01
    stored[0].write_bytes(bytes(data))
    with nsysdiag.open(a) as rep:
        assert rep.analysis("kernel_summary").to_arrow().to_pylist() == first
    assert "computing it again" in capfd.readouterr().err


def test_publish_without_hard_links(tmp_path, monkeypatch):
    """A file system without hard links: the record is renamed into place, the view
    still published and read back intact."""
    import errno

    def no_link(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    files = ViewFiles(tmp_path)
    f = files.new_file("kernels")
    f.write_bytes(b"data")
    assert files.publish("kernels", f) == f and files.lookup("kernels") == f
    a = _trace(1000).write(tmp_path / "a.sqlite")
    assert _kernel_sum(a) == 3000 and _kernel_sum(a) == 3000
