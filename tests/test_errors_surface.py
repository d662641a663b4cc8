"""Programming errors surface; input errors stay input errors.

A bug inside an analysis (an AttributeError, an ImportError) is neither dropped from the
diagnosis nor from ``diff``, and a command whose module fails to import does not vanish
from the command line: each reaches the user as the internal-error line, exit 70. Bad
input still gets its own one line, exit 3.
"""

from __future__ import annotations

import importlib

import pytest

import nsysdiag
from fixtures.make_fixtures import standard
from nsysdiag import analyses
from nsysdiag.cli.main import main

EXIT_INPUT, EXIT_INTERNAL = 3, 70


@pytest.fixture
def trace(tmp_path):
    return str(standard("current").write(tmp_path / "standard.sqlite"))


def run_cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().err


def assert_internal_error(rc: int, err: str, exc: type[BaseException]) -> None:
    lines = err.strip().splitlines()
    assert rc == EXIT_INTERNAL, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"nsysdiag: internal error: {exc.__name__}: "), err
    assert "Traceback" not in err


def broken(exc: type[BaseException]):
    def run(*args, **kwargs):
        raise exc("a bug planted by the test")

    return run


# launch_gaps and jitter run in a thread of their own, overlap and ranges in the main one
@pytest.mark.parametrize(
    "analysis,exc",
    [
        ("launch_gaps", AttributeError),
        ("overlap", ImportError),
        ("ranges", AttributeError),
        ("jitter", AttributeError),
    ],
)
def test_a_bug_in_an_analysis_stops_the_diagnosis(trace, capsys, monkeypatch, analysis, exc):
    monkeypatch.setattr(analyses.module(analysis), "run", broken(exc))
    with pytest.raises(exc, match="a bug planted by the test"):
        nsysdiag.diagnose(trace, cache=False)
    rc, err = run_cli(capsys, "--no-cache", "diagnose", trace)
    assert_internal_error(rc, err, exc)


def test_the_diagnosis_runs_without_the_bug(trace):
    """The same trace diagnoses cleanly: the failures above come from the planted bug."""
    d = nsysdiag.diagnose(trace, cache=False)
    assert {"launch_gaps", "overlap", "ranges", "jitter"} <= set(d.analyses)


def test_a_bug_in_the_kernel_summary_stops_diff(trace, capsys, monkeypatch):
    monkeypatch.setattr(analyses.module("kernel_summary"), "run", broken(AttributeError))
    rc, err = run_cli(capsys, "--no-cache", "diff", trace, trace)
    assert_internal_error(rc, err, AttributeError)


def test_an_analysis_that_cannot_be_imported_is_an_internal_error(trace, capsys, monkeypatch):
    monkeypatch.setattr(analyses, "ANALYSES", (*analyses.ANALYSES, "no_such_analysis"))
    rc, err = run_cli(capsys, "--no-cache", "info", trace)
    assert_internal_error(rc, err, ModuleNotFoundError)
    assert "no_such_analysis" in err
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("nsysdiag.analyses.no_such_analysis")


def test_bad_input_is_still_one_line_exit_3(tmp_path, capsys):
    bad = tmp_path / "not-an-export.sqlite"
    bad.write_bytes(b"this is not a database" * 10)
    rc, err = run_cli(capsys, "--no-cache", "diagnose", str(bad))
    lines = err.strip().splitlines()
    assert rc == EXIT_INPUT, err
    assert len(lines) == 1 and lines[0].startswith("nsysdiag: error: "), err


def test_a_bug_in_the_timelines_stops_the_html(trace, capsys, monkeypatch, tmp_path):
    """The page's timelines are an extra, but only unreadable data is left out quietly."""
    from nsysdiag.diagnosis import timelines

    monkeypatch.setattr(timelines, "unit_timelines", broken(AttributeError))
    rc, err = run_cli(capsys, "--no-cache", "diagnose", trace, "--html", str(tmp_path / "r.html"))
    assert_internal_error(rc, err, AttributeError)


def test_unreadable_timelines_leave_a_note(trace, monkeypatch):
    import duckdb

    from nsysdiag.diagnosis import timelines

    monkeypatch.setattr(timelines, "unit_timelines", broken(duckdb.ConversionException))
    with nsysdiag.open(trace, cache=False) as rep:
        d = nsysdiag.diagnose(rep)
        (only,) = timelines.collect_timelines(rep, d)
    assert "could not collect timelines: ConversionException" in only.note
