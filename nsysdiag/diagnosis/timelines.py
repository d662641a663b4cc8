"""The timelines of a diagnosis' slowest units (and one median unit), gathered from the
open report for the HTML report (:mod:`nsysdiag.render.html`), which only draws them.

The queries are the analyses layer's (:mod:`nsysdiag.analyses.timelines`); this module
reads from the diagnosis which unit to follow and where its instances are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb

from ..analyses.timelines import MAX_TIMELINE_EVENTS, UnitTimeline, unit_timelines
from ..errors import InputError, MissingDataError

if TYPE_CHECKING:
    from ..report import Report
    from .model import Diagnosis


def collect_timelines(
    report: Report,
    diagnosis: Diagnosis,
    n: int = 3,
    *,
    median: bool = True,
    max_events: int = MAX_TIMELINE_EVENTS,
) -> list[UnitTimeline]:
    """CPU and GPU activity inside the windows of the slowest units (and one median unit).

    Call it while ``report`` is open (the diagnosis does not keep it); pass the result to
    :func:`nsysdiag.render.html.render_html` / :func:`~nsysdiag.render.html.write_html`.

    Parameters
    ----------
    report : Report
        The open report ``diagnosis`` was computed from.
    diagnosis : Diagnosis
        Gives the unit of latency and, through the ``ranges`` analysis, its instances.
    n : int, default 3
        How many of the slowest units.
    median : bool, default True
        Add the unit closest to the median latency, for contrast.
    max_events : int
        At most this many events of each kind (CPU calls, GPU work, NVTX) per unit.

    Returns
    -------
    list of UnitTimeline
        As :func:`nsysdiag.analyses.timelines.unit_timelines`; empty when the diagnosis
        has no unit of latency. When collecting fails, one
        :meth:`~nsysdiag.analyses.timelines.UnitTimeline.unavailable` entry whose ``note``
        says why (the timelines are an extra of the page: unreadable data never sinks the report;
        a programming error is raised).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    try:
        return unit_timelines(
            report,
            unit=diagnosis.tail.unit,
            p50_ns=diagnosis.tail.p50_ns,
            ranges=diagnosis.analyses.ranges,
            n=n,
            median=median,
            max_events=max_events,
        )
    except (InputError, MissingDataError, duckdb.Error) as exc:
        # the timelines are an extra of the page: data they cannot read never sinks the
        # report, while a programming error surfaces like anywhere else
        return [UnitTimeline.unavailable(
            f"could not collect timelines: {type(exc).__name__}: {exc}")]
