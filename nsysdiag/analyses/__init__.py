"""SQL analyses over the normalized views; each module is one analysis.

An analysis is a module of this package that names its result class (a line
``RESULT = ...``, the shape ``base`` describes); ``ANALYSES`` names them, found in the
package, in alphabetical order. The package's other modules are the framework the
analyses share (``base``, ``results``) and measurements that are no analysis of one report
of their own (``host_stall``, ``timelines``, the cross-report ``collectives``). An
analysis' typed facade is two lines of ``nsysdiag/facade.py``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.resources
import re
from types import ModuleType

#: the line that makes a module of this package an analysis: its result class
_RESULT_LINE = re.compile(r"^RESULT = ", re.M)


def _found() -> tuple[str, ...]:
    """The analysis modules of this package by name, read from their source (not
    imported: an analysis is imported when it runs)."""
    return tuple(sorted(
        path.name.removesuffix(".py") for path in importlib.resources.files(__name__).iterdir()
        if path.name.endswith(".py") and _RESULT_LINE.search(path.read_text())))


ANALYSES = _found()


def module(name: str) -> ModuleType:
    """The analysis module ``name`` (imported on first use)."""
    if name not in ANALYSES:
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}")


def summary(name: str) -> str:
    """The first line of analysis ``name``'s docstring, read from its source file without
    importing it (the command line's --help lists the analyses this way)."""
    if name not in ANALYSES:
        raise KeyError(name)
    text = importlib.resources.files(__name__).joinpath(f"{name}.py").read_text()
    doc = ast.get_docstring(ast.parse(text[:text.find('"""', text.find('"""') + 3) + 3])) or name
    return doc.strip().splitlines()[0]
