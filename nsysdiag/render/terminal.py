"""The diagnosis for a terminal: the lines of ``Diagnosis.lines``, coloured with rich when
stdout is a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formatting import printable

if TYPE_CHECKING:
    from ..diagnosis.model import Diagnosis

_COLORS = {
    "healthy": "green",
    "cpu": "yellow",
    "gpu": "magenta",
    "pcie": "cyan",
    "workload": "bright_blue",
    "undetermined": "white",
    "insufficient": "white",
    "critical": "red",
    "warning": "yellow",
    "info": "blue",
    "graph": "cyan",
}


def _rich_style(text: str, key: str | None) -> str:
    """Rich markup for one piece of text: escaped, and bold in its colour when ``key``
    names a layer or severity."""
    from rich.markup import escape

    text = escape(printable(text))
    return text if key is None else f"[bold {_COLORS.get(key, 'white')}]{text}[/]"


def print_diagnosis(d: Diagnosis, *, color: bool | None = None) -> None:
    """Print with colours when stdout is a terminal."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True, force_terminal=color)
    if console.is_terminal:
        for line in d.lines(style=_rich_style):
            console.print(printable(line))  # text outside the styled pieces, too
    else:
        print(printable(str(d)))
