"""SQL analyses over the normalized views; each module is one analysis.

``ANALYSES`` lists the module names in the order the CLI shows them.
"""

from __future__ import annotations

import importlib
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
    "interference",
    "workload",
)


def module(name: str) -> ModuleType:
    """The analysis module ``name`` (imported on first use)."""
    if name not in ANALYSES:
        raise KeyError(name)
    return importlib.import_module(f"{__name__}.{name}")
