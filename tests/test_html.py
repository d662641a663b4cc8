"""The HTML report: self-contained, escaped, drawn by a real browser, written atomically."""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import subprocess
import sys
import zlib
from html import unescape
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import pytest
from conftest import ROOT

import nsysdiag
from nsysdiag.diagnosis.engine import diagnose
from nsysdiag.diagnosis.model import Finding
from nsysdiag.render import html as report_html
from nsysdiag.render.html import TEMPLATES, collect_timelines, render_html, write_html

EVIL_RANGE = "<script>alert(1)</script>request"
EVIL_KERNEL = "<img src=x onerror=alert(1)>"
EXAMPLE = ROOT / "examples" / "gpu-jitter.sqlite"


def unit_trace(builder, path: Path, *, n: int = 60, unit: str = "request",
               gemm: str = "gemm", relu: str = "relu", gemm_ns: float = 20_000,
               tail_every: int = 0, tail_factor: float = 4.0) -> Path:
    """``n`` NVTX units, each: two launches (gemm, relu), an async HtoD copy and a sync.

    gemm durations vary by up to 8 % between units; with ``tail_every`` every such unit's
    gemm is ``tail_factor`` times longer (a latency tail).
    """
    b = builder("current")
    t = 1_000_000
    for i in range(n):
        g = int(gemm_ns * (1 + 0.02 * ((i * 7) % 5)))
        if tail_every and i % tail_every == tail_every - 1:
            g = int(g * tail_factor)
        k1s = t + 4_000
        b.launch(t + 1_000, t + 3_000, k1s, k1s + g, name=gemm, short_name=gemm)
        k2s = k1s + g + 500
        b.launch(t + 3_500, t + 5_000, k2s, k2s + 5_000, name=relu, short_name=relu)
        cs = k2s + 5_500
        corr = b.api(t + 5_500, t + 6_500, "cudaMemcpyAsync_v3020")
        b.memcpy(cs, cs + 20_000, 256 << 10, kind="HtoD", src="pinned", dst="device", corr=corr)
        corr = b.api(t + 7_000, cs + 21_000, "cudaStreamSynchronize_v3020")
        b.sync(t + 7_500, cs + 20_500, corr=corr)
        end = cs + 22_000
        b.nvtx(t, end, unit)
        t = end + 10_000
    b.thread_name("main")
    return b.write(path)


class _Tags(HTMLParser):
    """Every start tag and attribute name of a document."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attrs.update(k for k, _ in attrs)
        self.hrefs += [v or "" for k, v in attrs if k in ("href", "xlink:href")]


def _diagnosed(path: Path):
    with nsysdiag.open(path, cache=False) as rep:
        d = diagnose(rep)
        return d, collect_timelines(rep, d)


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    """A trace whose NVTX text, kernel names and file name carry markup."""
    from fixtures.nsysbuild import TraceBuilder

    directory = tmp_path_factory.mktemp("evil")
    path = unit_trace(TraceBuilder, directory / 'x<svg onload=alert(1)>&".sqlite', unit=EVIL_RANGE,
                      gemm=EVIL_KERNEL, relu=EVIL_KERNEL + "relu", tail_every=10)
    d, tls = _diagnosed(path)
    evil_finding = Finding("gpu", "warning", f"title {EVIL_KERNEL}", (f"evidence {EVIL_RANGE}",),
                           fix=f"fix {EVIL_KERNEL}", check="D1")
    d = dataclasses.replace(d, findings=(*d.findings, evil_finding))
    return d, tls, render_html(d, timelines=tls)


# ----------------------------------------------------------------------------- structure


def test_report_is_self_contained(evil):
    _, _, text = evil
    assert text.startswith("<!DOCTYPE html>")
    low = text.lower()
    assert "http://" not in low and "https://" not in low and "//cdn" not in low
    for needle in ("<script", "<link", "<img", "<iframe", "@import", "url("):
        assert needle not in low.replace("&lt;", "<!esc>"), needle
    parser = _Tags()
    parser.feed(text)
    assert {"script", "img", "link", "iframe", "object", "embed"}.isdisjoint(parser.tags)
    assert not [a for a in parser.attrs if a.startswith("on")]
    assert "src" not in parser.attrs
    assert parser.hrefs and all(h.startswith("#") for h in parser.hrefs)  # in-page links only
    assert "style" in parser.tags and "svg" in parser.tags


def test_report_has_every_plot(evil):
    d, tls, text = evil
    assert d.tail.unit == EVIL_RANGE and d.tail.n == 60
    for cls in ("plot histogram", "plot bars", "plot stacked", "plot timeline"):
        assert f'class="{cls}"' in text, cls
    assert text.count('class="plot histogram"') == 2  # unit latency and launch gaps
    assert 'class="curve"' in text  # the fitted density over the latency histogram
    assert text.count('class="bar"') > 5
    assert text.count('class="span"') > 20
    assert 'class="ref"' in text  # the link line of the transfer plot
    # the 5 us and 20 us launch-gap thresholds
    assert "5 us normal" in text and "20 us P99 threshold" in text
    for sid in ("verdict", "latency", "gaps", "transfers", "attribution", "timelines", "jitter",
                "findings", "captured"):
        assert f'id="{sid}"' in text, sid


def test_timelines_slowest_first_then_median(evil):
    d, tls, _ = evil
    assert len(tls) == 4
    assert [t.rank for t in tls] == [1, 2, 3, 0]
    durs = [t.duration_ns for t in tls]
    assert durs[0] >= durs[1] >= durs[2] > durs[3]
    assert abs(durs[3] - d.tail.p50_ns) <= 0.05 * d.tail.p50_ns
    for t in tls:
        assert {c.category for c in t.cpu} >= {"launch", "memcpy", "sync"}
        assert {g.kind for g in t.gpu} == {"kernel", "memcpy"}
        assert all(t.start_ns < g.end_ns and g.start_ns < t.end_ns for g in t.gpu)
        assert t.tid == 4242 and t.pid == 4242


# ----------------------------------------------------------------------------- escaping


class _Header(HTMLParser):
    """The trace path of the page header: its title attribute, then its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.trace: list[str] = []
        self._inside = False

    def handle_starttag(self, tag, attrs):
        if ("class", "trace") in attrs:
            self.trace.append(dict(attrs)["title"])
            self._inside = True

    def handle_data(self, data):
        if self._inside:
            self.trace.append(data)
            self._inside = False


def test_trace_strings_are_escaped_everywhere(evil):
    d, _, text = evil
    assert "<script>alert(1)" not in text
    assert "<img src=x" not in text
    assert "<svg onload" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;request" in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    # the file name in the page header, escaped by the templates' autoescaping (MarkupSafe
    # writes " as &#34;): the page title, the header's title attribute and its text
    assert text.count("x&lt;svg onload=alert(1)&gt;&amp;&#34;.sqlite") == 3
    header = _Header()
    header.feed(text)
    assert header.trace == [d.path, d.path]
    # inside SVG tooltips too
    assert "<title>&lt;img src=x onerror=alert(1)&gt;" in text
    assert "fix &lt;img src=x onerror=alert(1)&gt;" in text


# ----------------------------------------------------------------------------- degraded


def test_sections_missing_are_explained(builder, tmp_path):
    b = builder("current")
    b.launch(1000, 2000, 3000, 4000, name="k")
    b.launch(5000, 6000, 60_000, 70_000, name="k")
    path = b.write(tmp_path / "tiny.sqlite")
    d = diagnose(path)
    text = render_html(d)
    assert "Timelines need the open report" in text
    assert 'id="transfers"' in text and "No transfers" in text
    assert "No unit latencies" in text
    bare = dataclasses.replace(d, analyses={}, durations_ns=None, classifier=None)
    text = render_html(bare, timelines=[])
    assert "did not run" in text or "not_captured" in text or "empty" in text
    parser = _Tags()
    parser.feed(text)
    assert "script" not in parser.tags


def test_attribution_shares_of_each_side_growth(builder, tmp_path):
    """99 steps of 10 us and one of 12 us whose kernel runs 5 us longer while the GPU idles
    3 us less (tests/test_ranges.py, test_tail_attribution_with_shrinking, works the figures
    out): the kernel's growth is 250% of the unit's, 100% of the GPU side's."""
    b = builder("current")
    for k in range(100):
        s, slow = (k + 1) * 100_000, k == 99
        b.nvtx(s, s + (12000 if slow else 10000), "step")
        b.launch(s + 1000, s + (2500 if slow else 2000), s + 2000, s + (11000 if slow else 6000))
        b.api(s + 5000, s + (11500 if slow else 7000), "cudaStreamSynchronize_v3020")
    d = diagnose(b.write(tmp_path / "shrink.sqlite"), cache=False)
    (tail,) = [f for f in d.findings if f.check == "A/B"]
    assert ("slowest 1 units vs median: gpu own kernel 4 us -> 9 us (+5 us, 100% of the GPU "
            "side's growth)") in tail.evidence
    note = ("GPU side: gpu_idle shrank by 3 us, so gpu_own_kernel's growth (5 us) exceeds the "
            "units' (2 us); shares are of the side's growth (5 us), which the shrinking offsets "
            "by 3 us")
    assert note in tail.evidence
    text = unescape(render_html(d))
    assert "share of the side's growth" in text and note in text
    assert "250%" not in text
    shares = d.to_dict()["evidence"]["ranges"]["summary"]["attribution"]
    assert max(v["share_of_growth"] for v in shares.values()) == 1.0


def test_collect_timelines_without_unit(builder, tmp_path):
    b = builder("current")
    b.launch(1000, 2000, 3000, 4000, name="k")
    path = b.write(tmp_path / "nounit.sqlite")
    with nsysdiag.open(path) as rep:
        d = diagnose(rep)
        assert collect_timelines(rep, d) == []
    with pytest.raises(ValueError, match="n must be"):
        collect_timelines(None, d, n=-1)  # type: ignore[arg-type]


def test_collect_timelines_falls_back_to_nvtx(builder, tmp_path):
    """Without the ranges tables the windows come from the NVTX ranges of the unit."""
    from nsysdiag.analyses.base import AnalysisResult

    path = unit_trace(builder, tmp_path / "u.sqlite", n=30, tail_every=10)
    with nsysdiag.open(path) as rep:
        d = diagnose(rep)
        full = collect_timelines(rep, d, n=2)
        bare = dataclasses.replace(d, analyses={**d.analyses, "ranges": AnalysisResult(
            "ranges", "ok", "", d.analyses["ranges"].summary, {})})
        fallback = collect_timelines(rep, bare, n=2)
    assert [t.rank for t in fallback] == [1, 2, 0]
    assert [(t.start_ns, t.end_ns) for t in fallback] == [(t.start_ns, t.end_ns) for t in full]
    assert fallback[0].cpu and fallback[0].gpu and fallback[0].tid == 4242


# ----------------------------------------------------------------------------- templates


def test_templates_are_package_resources():
    """The page's templates are files of the package, found with importlib.resources."""
    folder = resources.files("nsysdiag.render").joinpath("templates")
    assert sorted(p.name for p in folder.iterdir() if p.is_file()) == sorted(TEMPLATES)
    for name in TEMPLATES:
        assert folder.joinpath(name).read_text(encoding="utf-8").strip()


def test_templates_ship_in_a_non_editable_install(tmp_path):
    """setuptools' build step (what a wheel or a plain ``pip install`` lays down) copies the
    templates as package data, and the built package finds and compiles every one."""
    pytest.importorskip("setuptools")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "nsysdiag", src / "nsysdiag",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    lib = tmp_path / "lib"
    build = subprocess.run(
        [sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py",
         "--build-lib", str(lib)],
        cwd=src, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    probe = (
        "import importlib.resources as r, pathlib, sys\n"
        "import nsysdiag.render.html as h\n"
        "assert pathlib.Path(h.__file__).is_relative_to(sys.argv[1]), h.__file__\n"
        "folder = r.files('nsysdiag.render').joinpath('templates')\n"
        "print(sorted(p.name for p in folder.iterdir()))\n"
        "for name in h.TEMPLATES: h.environment().get_template(name)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe, str(lib)], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(lib)},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == str(sorted(TEMPLATES))


def test_templates_escape_and_refuse_unknown_names():
    """Autoescaping is on in every template, and a name a template reads that its view
    lacks (a renamed field) is an error, not an empty string."""
    import jinja2

    env = report_html.environment()
    assert env.autoescape is True and env.undefined is jinja2.StrictUndefined
    macros = env.get_template("_macros.html.j2").module
    card = report_html.Card("<b>k</b>", "<i>v</i>", "s&")
    assert str(macros.cards([card])) == (
        '<div class="cards"><div class="card"><div class="k">&lt;b&gt;k&lt;/b&gt;</div>'
        '<div class="v">&lt;i&gt;v&lt;/i&gt;</div><div class="s">s&amp;</div></div></div>')
    long = "x" * 95
    table = report_html._table(["a<"], [[long], [None]], numeric=[True])
    assert str(macros.table(table)) == (
        '<div class="tablewrap"><table class=""><thead><tr><th class="num">a&lt;</th></tr>'
        f'</thead><tbody><tr><td class="num" title="{long}">{"x" * 89}…</td></tr>'
        '<tr><td class="num"></td></tr></tbody></table></div>')
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("jitter.html.j2").render(v=report_html.Card("a", "b"))


# ----------------------------------------------------------------------------- writing


def test_write_html_is_atomic(evil, tmp_path, monkeypatch):
    d, tls, _ = evil
    out = tmp_path / "report.html"
    assert write_html(d, out, timelines=tls) == out
    first = out.read_text(encoding="utf-8")
    assert first.startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report_html.os, "fsync", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        write_html(d, out, timelines=tls)
    assert out.read_text(encoding="utf-8") == first  # the old report is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # no temp file left


def test_write_html_collects_timelines_from_open_report(tmp_path, builder):
    path = unit_trace(builder, tmp_path / "u.sqlite", n=30)
    with nsysdiag.open(path) as rep:
        d = diagnose(rep)
        write_html(d, tmp_path / "r.html", report=rep)
    text = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'class="plot timeline"' in text and "#1 slowest request" in text


def test_cli_diagnose_html(tmp_path, builder, capsys):
    from nsysdiag.cli.main import main

    path = unit_trace(builder, tmp_path / "u.sqlite", n=30)
    out = tmp_path / "cli.html"
    assert main(["-q", "diagnose", str(path), "--html", str(out)]) == 0
    capsys.readouterr()
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


# ----------------------------------------------------------------------------- browser

CHROMIUM = (shutil.which("chromium") or shutil.which("chromium-browser")
            or shutil.which("google-chrome"))
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]


def _browser(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile{len(list(tmp_path.iterdir()))}"
    return subprocess.run([CHROMIUM, *BROWSER_FLAGS, f"--user-data-dir={profile}", *extra,
                           page.resolve().as_uri()], capture_output=True, text=True, timeout=180)


def _console_errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "Uncaught" in ln or "CONSOLE" in ln
            or "Refused to" in ln or "net::ERR" in ln]


def _png_pixels(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and the inflated scanlines (filter bytes included) of a PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind = png[pos + 4:pos + 8]
        data = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", data[:8])
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def _check_page(page: Path, tmp_path: Path, min_svgs: int) -> None:
    dom = _browser(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not _console_errors(dom.stderr), _console_errors(dom.stderr)
    text = dom.stdout
    assert text.count("<svg") >= min_svgs
    assert text.count('class="bar"') > 5 and 'class="curve"' in text
    assert "<script>alert" not in text
    shot = tmp_path / f"{page.stem}.png"
    res = _browser(page, tmp_path, "--window-size=1200,2400", f"--screenshot={shot}")
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    assert not _console_errors(res.stderr), _console_errors(res.stderr)
    width, height, raw = _png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 2400)
    # a blank page inflates to a handful of byte values; plots, text and colours to many
    assert len(set(raw)) > 100


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_browser_renders_report_without_errors(evil, tmp_path):
    _, _, text = evil
    page = tmp_path / "evil.html"
    page.write_text(text, encoding="utf-8")
    _check_page(page, tmp_path, min_svgs=8)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_browser_renders_bundled_example(tmp_path):
    if not EXAMPLE.exists():
        pytest.skip(f"{EXAMPLE} not available")
    with nsysdiag.open(EXAMPLE) as rep:
        d = diagnose(rep)
        if d.tail.unit is None:
            pytest.skip("the example has no unit of latency")
        page = write_html(d, tmp_path / "example.html", timelines=collect_timelines(rep, d))
    _check_page(page, tmp_path, min_svgs=8)
