"""Kernel and NVTX names that carry terminal control sequences (OSC 52 clipboard, OSC 8
links, CSI, the one-character C1 CSI, BEL, bidirectional overrides) reach the terminal
as visible escapes, never as sequences the terminal acts on (issue 39, class 6)."""

from __future__ import annotations

import signal

import pytest
from conftest import TraceBuilder

from nsysdiag.cli.main import main
from nsysdiag.formatting import printable

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
OSC8 = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"
CLEAR = "\x1b[2J"
C1_CSI = "\u009b31m"
BIDI = "\u202egnp.exe"
HOSTILE = (OSC52, OSC8, CLEAR, C1_CSI, BIDI, "\r", "\x08")
#: what the terminal would act on: none may be printed raw
RAW = ("\x1b]", "\x07", CLEAR, "\u009b", "\u202e", "\r", "\x08")


@pytest.fixture(autouse=True)
def _bounded():
    def stop(*_):
        raise TimeoutError("test ran past 120 s")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def hostile(tmp_path):
    b = TraceBuilder("current")
    t = 0
    for i, bad in enumerate(HOSTILE):
        for _ in range(6):
            b.launch(t, t + 500, t + 1000, t + 3000 + 100 * i, name=f"k{i}{bad}[bold red]x[/]")
            b.nvtx(t, t + 4000, f"step{bad}[link=file:///etc/passwd]y[/link]")
            t += 10000
    return b.write(tmp_path / "hostile.sqlite")


def _assert_clean(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text[:2000])


@pytest.mark.parametrize("args", [
    ["diagnose"], ["kernel-summary"],
    ["kernel-summary", "--format", "json"], ["ranges"], ["info"],
    ["sql", "--format", "table", "SELECT name FROM kernels"],
])
def test_names_print_escaped(hostile, capsys, args):
    rc = main([args[0], str(hostile), *args[1:]])
    out, err = capsys.readouterr()
    assert rc in (0, 4), err
    _assert_clean(out)
    _assert_clean(err)
    if args[0] in ("kernel-summary", "sql") and "json" not in args:
        assert "\\x1b]52" in out  # shown, escaped


def test_csv_is_escaped_on_a_terminal_only(hostile, capsys, monkeypatch):
    """CSV written to a file or pipe keeps the names as they are (it is data); on a
    terminal it is escaped like every other output."""
    assert main(["kernel-summary", str(hostile), "--format", "csv"]) == 0
    assert OSC52 in capsys.readouterr().out
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert main(["kernel-summary", str(hostile), "--format", "csv"]) == 0
    out = capsys.readouterr().out
    _assert_clean(out)
    assert "\\x1b]52" in out


def test_coloured_diagnosis_escapes_names_and_markup(hostile, capsys):
    """The rich path (a terminal): names are escaped, and rich markup in a name stays
    text instead of becoming a link or a style."""
    import nsysdiag
    from nsysdiag.render.terminal import print_diagnosis

    with nsysdiag.open(hostile) as rep:
        d = nsysdiag.diagnose(rep)
    print_diagnosis(d, color=True)
    out = capsys.readouterr().out
    _assert_clean(out)
    assert "\x1b]8;" not in out  # no OSC 8 link from [link=...] markup in a name


def test_error_lines_escape_names(hostile, capsys):
    assert main(["diagnose", str(hostile), "--range", f"nope{OSC52}"]) != 0
    _assert_clean(capsys.readouterr().err)


def test_printable_keeps_text_and_escapes_controls():
    assert printable("gemm<float>\tx\n") == "gemm<float>\tx\n"
    assert printable("a\x1bb\u009bc\u202ed") == "a\\x1bb\\x9bc\\u202ed"
    assert printable("a\tb\nc", breaks=False) == "a\\x09b\\x0ac"
    assert printable(printable(OSC8)) == printable(OSC8)
