"""Command-line options of the analysis commands (``nsysdiag <analysis> PATH``).

The analyses know nothing of click: each ``run(report, **options)`` documents its keyword
arguments, and this table gives each analysis' options, whose parameter names are those
keyword arguments (``tests/test_cli_docs.py`` checks that every one is). Options not
listed here (``detail``, ``large_bytes``, ...) keep their library defaults on the command
line. A keyword whose library default is None takes its value from
:class:`nsysdiag.settings.Settings`; the option shows that value (:data:`FROM_SETTINGS`).
"""

from __future__ import annotations

from collections.abc import Callable

import click

from ..analyses.ranges import SCOPES
from ..settings import DEFAULTS

#: (analysis, keyword) -> (Settings field, factor): the option's default is the field's
#: value times the factor (thresholds are ns in Settings, us on the command line)
FROM_SETTINGS: dict[tuple[str, str], tuple[str, float]] = {
    ("launch_gaps", "normal_threshold_us"): ("gap_normal_ns", 1e-3),
    ("launch_gaps", "p99_threshold_us"): ("gap_p99_ns", 1e-3),
    ("jitter", "top"): ("jitter_top", 1),
    ("jitter", "slow"): ("slow_ratio", 1),
    ("ranges", "tail_pct"): ("tail_pct", 1),
    ("ranges", "min_instances"): ("range_min_instances", 1),
}


def setting(analysis: str, keyword: str) -> float:
    """The command-line default of ``keyword`` of ``analysis`` (see FROM_SETTINGS)."""
    field, factor = FROM_SETTINGS[analysis, keyword]
    value = getattr(DEFAULTS, field)
    return value * factor if factor != 1 else value

#: the unit of latency, for the analyses that compare the ranges analysis' slowest units
_UNIT_RANGE = click.option(
    "--range",
    "range_name",
    default=None,
    metavar="NAME",
    help="NVTX range that delimits one request/iteration (NAME, DOMAIN:NAME, or a numbered "
    "family such as token_#_processing: # for each number); default: chosen automatically.",
)

#: analysis name -> its click options, in the order the command's help lists them (an
#: analysis without options needs no entry)
ANALYSIS_OPTIONS: dict[str, list[Callable]] = {
    "capture": [
        click.option(
            "--baseline",
            type=click.Path(dir_okay=False),
            default=None,
            help="nvbandwidth -j JSON output measured on the traced machine (the GPUs' "
            "link figures).",
        ),
    ],
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
            default=setting("launch_gaps", "normal_threshold_us"),
            show_default=True,
            help="Gaps above this are not normal (us).",
        ),
        click.option(
            "--p99-threshold-us",
            type=click.FloatRange(min=0),
            default=setting("launch_gaps", "p99_threshold_us"),
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
            default=setting("jitter", "top"),
            show_default=True,
            help="Kernel names to examine, by total GPU time.",
        ),
        click.option(
            "--slow",
            type=float,
            default=setting("jitter", "slow"),
            show_default=True,
            help="A launch is slow above this multiple of its kernel's median.",
        ),
    ],
    "ranges": [
        _UNIT_RANGE,
        click.option(
            "--tail-pct",
            "tail_pct",
            type=float,
            default=setting("ranges", "tail_pct"),
            show_default=True,
            help="Percent of slowest instances compared with the median band.",
        ),
        click.option(
            "--min-instances",
            "min_instances",
            type=int,
            default=setting("ranges", "min_instances"),
            show_default=True,
            help="Instances a range name needs to be chosen automatically.",
        ),
        click.option(
            "--keep-warmup",
            "keep_warmup",
            is_flag=True,
            default=None,
            help="Keep warm-up units in the tail figures (default: reported and left out).",
        ),
        click.option(
            "--scope",
            type=click.Choice(SCOPES),
            default="auto",
            show_default=True,
            help="Whose CUDA calls count into a range: its thread or its whole process.",
        ),
    ],
    "gpu_idle": [_UNIT_RANGE],
    "interference": [_UNIT_RANGE],
    "workload": [_UNIT_RANGE],
}
