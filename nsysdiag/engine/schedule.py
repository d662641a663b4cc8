"""Where analyses run: forked cursors and a thread beside the main one (the order of a
plan of analyses is the runner's, ``engine.runner``).

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


@contextlib.contextmanager
def forked(report: Any, *views: str) -> Iterator[Any]:
    """``report`` on a connection of its own (a cursor of the same database), to run an
    analysis in another thread beside this one's queries. The ``views`` that either reads
    meanwhile are built (and the probe settled) first, here: a build sets options of the
    whole database (DuckDB's optimizer and order settings), and only this report builds
    views. It shares the views, probe, scratch directory, results and the workspace's
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
