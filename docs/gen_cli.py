"""Generate docs/cli.md from the commands' own help text.

usage: python docs/gen_cli.py > docs/cli.md   (tests/test_cli_docs.py checks it is current)
"""

from __future__ import annotations

import click

from nsysdiag.cli.main import cli


def _commands(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    out = []
    ctx = click.Context(group, info_name=prefix)
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        full = f"{prefix} {name}"
        out.append((full, cmd))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, full))
    return out


def reference() -> str:
    parts = ["# Command-line reference", "",
             "Generated from the commands' help by `python docs/gen_cli.py`; do not edit.", ""]
    for full, cmd in [("nsysdiag", cli), *_commands(cli, "nsysdiag")]:
        ctx = click.Context(cmd, info_name=full, terminal_width=100, max_content_width=100,
                            help_option_names=["-h", "--help"])
        parts += [f"## `{full}`", "", "```text", cmd.get_help(ctx), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    print(reference(), end="")
