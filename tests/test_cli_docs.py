"""The CLI reference in docs/ is generated from the help text and must be current."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "docs"))

from gen_cli import reference  # noqa: E402


def test_cli_reference_is_current():
    assert (ROOT / "docs" / "cli.md").read_text() == reference(), "run: python docs/gen_cli.py > docs/cli.md"


def test_every_command_has_help():
    import click

    from nsysdiag.cli.main import cli

    ctx = click.Context(cli)
    names = cli.list_commands(ctx)
    assert {"diagnose", "kernel-summary", "ranges"} <= set(names)
    for name in names:
        cmd = cli.get_command(ctx, name)
        assert (cmd.help or "").strip(), f"command {name} has no help"


def test_analysis_options_are_run_keywords():
    """Each analysis command's option is a keyword argument of the analysis' ``run`` with
    the same default, so the command line and the library cannot drift apart."""
    import inspect

    from nsysdiag import analyses
    from nsysdiag.cli.main import cli
    from nsysdiag.cli.options import ANALYSIS_OPTIONS, FROM_SETTINGS, setting

    assert set(ANALYSIS_OPTIONS) <= set(analyses.ANALYSES)
    common = {"path", "fmt", "table", "max_rows"}
    checked = 0
    for name in analyses.ANALYSES:
        run = inspect.signature(analyses.module(name).run).parameters
        cmd = cli.get_command(None, name.replace("_", "-"))
        for param in cmd.params:
            if param.name in common:
                continue
            assert param.name in run, f"{name}: --{param.name} is not a keyword of run()"
            assert run[param.name].kind in (
                inspect.Parameter.KEYWORD_ONLY,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
            ), (name, param.name)
            default = run[param.name].default
            if default is None and (name, param.name) in FROM_SETTINGS:
                # run() falls back to Settings: the option shows that value
                default = setting(name, param.name)
            assert param.default == default, (
                f"{name}: --{param.name} defaults to {param.default!r}, run() to {default!r}"
            )
            checked += 1
    assert checked == sum(len(v) for v in ANALYSIS_OPTIONS.values())
