"""The CLI reference in docs/ is generated from the help text and must be current."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "docs"))

from gen_cli import reference  # noqa: E402


def test_cli_reference_is_current():
    assert (ROOT / "docs" / "cli.md").read_text() == reference(), "run: python docs/gen_cli.py > docs/cli.md"


def test_every_command_has_help():
    from nsysdiag.cli.main import cli

    for name, cmd in cli.commands.items():
        assert (cmd.help or "").strip(), f"command {name} has no help"
