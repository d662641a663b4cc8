"""Command-line options of the analysis commands (``nsysdiag <analysis> PATH``).

The analyses know nothing of click: each ``run(report, **options)`` documents its keyword
arguments, and this table gives each analysis' options, whose parameter names are those
keyword arguments (``tests/test_cli_docs.py`` checks that every one is). Options not
listed here (``detail``, ``large_bytes``, ...) keep their library defaults on the command
line.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from ..analyses.ranges import MIN_INSTANCES, SCOPES

#: analysis name -> its click options, in the order the command's help lists them (an
#: analysis without options needs no entry)
ANALYSIS_OPTIONS: dict[str, list[Callable]] = {
    "kernel_summary": [
        click.option(
            "--top",
            type=click.IntRange(min=1),
            default=None,
            help="Show only the N kernel names with the most GPU time [default: all].",
        ),
    ],
    "launch_gaps": [
        click.option(
            "--normal-threshold-us",
            type=click.FloatRange(min=0),
            default=5.0,
            show_default=True,
            help="Gaps above this are not normal (us).",
        ),
        click.option(
            "--p99-threshold-us",
            type=click.FloatRange(min=0),
            default=20.0,
            show_default=True,
            help="A P99 gap above this signals a CPU-side bottleneck (us).",
        ),
    ],
    "launch_latency": [
        click.option(
            "--top",
            type=click.IntRange(min=1),
            default=None,
            help="per_name: only the N kernel names launched most often [default: all].",
        ),
    ],
    "transfers": [
        click.option(
            "--baseline",
            type=click.Path(dir_okay=False),
            default=None,
            help="nvbandwidth -j JSON output measured on the traced machine "
            "(host_to_device_memcpy_ce / device_to_host_memcpy_ce).",
        ),
    ],
    "graphs": [
        click.option(
            "--top",
            type=int,
            default=10,
            show_default=True,
            help="Graphs to list, by total GPU time.",
        ),
    ],
    "jitter": [
        click.option(
            "--top",
            type=int,
            default=10,
            show_default=True,
            help="Kernel names to examine, by total GPU time.",
        ),
        click.option(
            "--slow",
            type=float,
            default=1.5,
            show_default=True,
            help="A launch is slow above this multiple of its kernel's median.",
        ),
    ],
    "ranges": [
        click.option(
            "--range",
            "range_name",
            default=None,
            metavar="NAME",
            help="NVTX range that delimits one request/iteration (NAME or DOMAIN:NAME); "
            "default: chosen automatically.",
        ),
        click.option(
            "--tail-pct",
            "tail_pct",
            type=float,
            default=1.0,
            show_default=True,
            help="Percent of slowest instances compared with the median band.",
        ),
        click.option(
            "--min-instances",
            "min_instances",
            type=int,
            default=MIN_INSTANCES,
            show_default=True,
            help="Instances a range name needs to be chosen automatically.",
        ),
        click.option(
            "--scope",
            type=click.Choice(SCOPES),
            default="auto",
            show_default=True,
            help="Whose CUDA calls count into a range: its thread or its whole process.",
        ),
    ],
}
