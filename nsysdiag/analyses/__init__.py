"""SQL analyses over the normalized views; each module is one analysis.

``ANALYSES`` lists the module names in the order the CLI shows them.
"""

from __future__ import annotations

import ast
import importlib
import importlib.resources
from types import ModuleType

ANALYSES = (
    "capture",
    "kernel_summary",
    "launch_gaps",
    "launch_latency",
    "transfers",
    "overlap",
    "graphs",
    "jitter",
    "ranges",
    "gpu_idle",
    "whole_run",
    "host_syncs",
    "os_blocking",
    "gpu_metrics",
    "interference",
    "workload",
)


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
