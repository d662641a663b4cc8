"""When and where analyses run: forked cursors, a thread beside the main one, and the order
of the diagnosis' analyses.

A DuckDB connection runs one statement at a time; a forked report (:func:`forked`) is the
same report on a cursor of its own, so an analysis can run in another thread beside the
queries of this one.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import duckdb

from ..errors import StageTimeout
from . import threads
from .workspace import GPU_BUSY


@contextlib.contextmanager
def forked(report: Any, *views: str) -> Iterator[Any]:
    """``report`` on a connection of its own (a cursor of the same database), to run an
    analysis in another thread beside this one's queries. The ``views`` that either reads
    meanwhile are built (and the probe settled) first, here: a build sets options of the
    whole database (DuckDB's optimizer and order settings), and only this report builds
    views. It shares the views, probe, scratch directory and results, not the workspace's
    hand-overs; its connection is closed at the end of the block."""
    report.ensure_views(*views)
    report.probe.settle()
    other = copy.copy(report)
    other.workspace = report.workspace.fork()
    other.con = report.con.cursor()
    try:
        yield other
    except StageTimeout:
        # a worker may still run a query on it: closing would fail ("busy"); it goes
        # with the process
        raise
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # the first error is the one to report
            other.con.close()
        raise
    other.con.close()


@contextlib.contextmanager
def beside(report: Any, fn: Callable[..., Any] | None, *args: Any, views: tuple[str, ...] = (),
           stage: str, **kw: Any) -> Iterator[threads.Call | None]:
    """``fn(forked report, *args, **kw)`` in a worker thread of its own while the block runs
    (its call; None without ``fn``), under the stage bound of ``threads.Workers`` (named
    ``stage``; a cancelled worker's query is interrupted). ``views``: as for
    :func:`forked`. The block's end waits for it."""
    with forked(report, *views) as other, \
            threads.Workers(1, stage=stage, on_cancel=other.con.interrupt) as pool:
        yield pool.submit(fn, other, *args, **kw) if fn is not None else None


#: the views the diagnosis' first analyses read, built before launch gaps runs beside them
#: (transfers reads um_page_faults: the SQL steps' ``-- @needs`` say so)
DIAGNOSIS_VIEWS = ("kernels", "cuda_graphs", "memcpys", "memsets", "devices", "processes",
                   "api_calls", "nvtx_ranges", "um_page_faults")


def diagnosis_analyses(
    report: Any, run: Callable[..., Any], aside: tuple[str, dict],
    beside_it: tuple[tuple[str, dict], ...], after: tuple[tuple[str, dict], ...],
) -> dict[str, Any]:
    """Run the diagnosis' analyses: ``aside`` (launch gaps) in a thread of its own, beside
    the analyses ``beside_it`` one after the other, then those ``after`` it (ranges, and
    what reads ranges' units); ``run(report, name, **options)`` runs one. Returns each
    one's result by name.

    Launch gaps' accelerated pass is mostly numpy on one core, while the analyses beside
    it are mostly DuckDB on every core; ranges runs after both, not beside launch gaps,
    since the two memory peaks together would be too high. Every view the analyses read
    is built first (:func:`forked`): a build sets options of the whole database. Overlap's
    pass makes each GPU's busy union, which ranges reads (``GPU_BUSY``, handed over in
    the workspace) instead of a sorted pass of its own.
    """
    done: dict[str, Any] = {}
    name, options = aside
    with beside(report, run, name, views=DIAGNOSIS_VIEWS, stage=name, **options) as future:
        with report.workspace.handover(GPU_BUSY):
            for other, kw in beside_it:
                done[other] = run(report, other, **kw)
            done[name] = future.result()  # type: ignore[union-attr]
            for other, kw in after:
                done[other] = run(report, other, **kw)
    return done
