"""One runner for a report's analyses: their order, and what runs beside what, from what
each declares.

An analysis declares how it runs (:class:`Runs`, its module's ``RUNS``), as its SQL
steps declare what they read (``-- @needs``): the other analyses whose results it reads,
the intermediates it makes as a by-product of its pass or reads when another made them,
the views its Python reads, and its cost (mostly one core, a large memory peak). A caller
asks for a plan of :class:`Task` s; :func:`run` orders them (:func:`ordered`), groups them
into stages (:func:`stages`) and runs each stage:

* an analysis needed by another runs before it; otherwise the plan's order is kept;
* a task that runs mostly on one core (numpy, compiled loops) runs beside the later tasks
  that run mostly in DuckDB on every core, do not need it, and whose memory peak may meet
  its own (two large peaks never run at once), one side in a worker thread on a cursor of
  its own; the views that either reads are built first (a build sets options of the whole
  database);
* an intermediate that one task of the plan makes and another needs is kept between the
  two (``Workspace.handover``), and dropped when taken or at the plan's end.

Nothing here knows an analysis by name: the order of a diagnosis follows from the
declarations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .schedule import beside


@dataclass(frozen=True)
class Runs:
    """How an analysis runs, as its module declares it (``RUNS``).

    Attributes
    ----------
    needs
        The analyses whose results its run reads (through ``report.analysis``), and the
        intermediates of other analyses' passes it reads when they were made (it computes
        them itself otherwise).
    makes
        The intermediates its pass makes as a by-product and keeps for an analysis that
        needs them (``Workspace.hand``).
    views
        The normalized views its Python reads besides those its SQL steps declare.
    fallback_views
        Views that only a fallback path of its own reads (taken when a check of the main
        path fails): not built ahead, which would cost a build that most runs never read;
        the path builds them when it runs.
    one_core
        Mostly numpy or compiled loops on one core: it runs in a thread of its own beside
        the analyses that run mostly in DuckDB.
    large_peak
        Its memory peak is large: it never runs beside another such analysis.
    """

    needs: tuple[str, ...] = ()
    makes: tuple[str, ...] = ()
    views: tuple[str, ...] = ()
    fallback_views: tuple[str, ...] = ()
    one_core: bool = False
    large_peak: bool = False


@dataclass(frozen=True)
class Task:
    """One step of a plan: ``call(report)`` gives its result, kept under ``name``.

    ``views``: every view it reads (its own and those of the analyses it runs in turn),
    built before it runs beside another task; ``on_report``: whether it reads the report
    at all (a computation on figures already read, which stays on the caller's thread)."""

    name: str
    call: Callable[[Any], Any]
    runs: Runs = field(default_factory=Runs)
    views: tuple[str, ...] = ()
    on_report: bool = True


@dataclass(frozen=True)
class Stage:
    """Tasks run at once: ``aside`` (None: none), a one-core task, beside ``main``, run one
    after the other (:func:`run` says which side takes the worker thread)."""

    aside: Task | None
    main: tuple[Task, ...]


def _depends(task: Task, tasks: Sequence[Task]) -> set[str]:
    """The names of the tasks of ``tasks`` that ``task`` needs: those it names, and those
    that make an intermediate it names."""
    out = set()
    for other in tasks:
        if other is not task and (other.name in task.runs.needs
                                  or set(other.runs.makes) & set(task.runs.needs)):
            out.add(other.name)
    return out


def ordered(tasks: Sequence[Task]) -> list[Task]:
    """``tasks`` with each after the tasks it needs, otherwise in their order.

    Raises ValueError for two tasks of one name or tasks that need one another."""
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ValueError(f"a plan names a task twice: {names}")
    deps = {t.name: _depends(t, tasks) for t in tasks}
    pending, out, placed = list(tasks), [], set()
    while pending:
        ready = next((t for t in pending if deps[t.name] <= placed), None)
        if ready is None:
            raise ValueError("tasks need one another: " + ", ".join(t.name for t in pending))
        pending.remove(ready)
        out.append(ready)
        placed.add(ready.name)
    return out


def stages(tasks: Sequence[Task]) -> list[Stage]:
    """The stages that run ``tasks``: in order (:func:`ordered`), each one-core task in a
    thread of its own beside every later task that can run meanwhile (see the module)."""
    pending = ordered(tasks)
    deps = {t.name: _depends(t, tasks) for t in tasks}
    finished: set[str] = set()
    out = []
    while pending:
        head = pending.pop(0)
        if not head.runs.one_core:
            out.append(Stage(None, (head,)))
            finished.add(head.name)
            continue
        main: list[Task] = []
        for task in list(pending):
            if not task.runs.one_core \
                    and not (task.runs.large_peak and head.runs.large_peak) \
                    and deps[task.name] <= finished | {t.name for t in main}:
                main.append(task)
                pending.remove(task)
        out.append(Stage(head, tuple(main)))
        finished |= {head.name, *(t.name for t in main)}
    return out


def handed(tasks: Sequence[Task]) -> tuple[str, ...]:
    """The intermediates that one task of ``tasks`` makes and another needs."""
    made = {i for t in tasks for i in t.runs.makes}
    return tuple(dict.fromkeys(i for t in tasks for i in t.runs.needs if i in made))


def run(report: Any, tasks: Sequence[Task]) -> dict[str, Any]:
    """Run ``tasks`` on ``report`` in :func:`stages`; each one's result by name, in the
    order of ``tasks``.

    In a stage of two sides, the worker thread takes the side that reads the report, on a
    cursor of its own (``schedule.beside``: its views built first, its query interrupted
    when the other side fails, its wait bounded by the stage bound): the one-core task, or
    the tasks beside it when it reads no report (a computation on figures already read
    stays on this thread)."""
    done: dict[str, Any] = {}
    with report.workspace.handover(*handed(tasks)):
        for stage in stages(tasks):
            aside = stage.aside
            if aside is None or not stage.main:
                for task in (*((aside,) if aside is not None else ()), *stage.main):
                    done[task.name] = task.call(report)
                continue
            views = tuple(dict.fromkeys(v for t in (aside, *stage.main) for v in t.views))
            if aside.on_report:
                with beside(report, aside.call, views=views, stage=aside.name) as call:
                    done.update(_in_turn(report, stage.main))
                    done[aside.name] = call.result()  # type: ignore[union-attr]
            else:
                with beside(report, _in_turn, stage.main, views=views,
                            stage=", ".join(t.name for t in stage.main)) as call:
                    done[aside.name] = aside.call(None)
                    done.update(call.result())  # type: ignore[union-attr]
    return {t.name: done[t.name] for t in tasks}


def _in_turn(report: Any, tasks: Sequence[Task]) -> dict[str, Any]:
    """Run ``tasks`` on ``report`` one after the other; each one's result by name."""
    return {task.name: task.call(report) for task in tasks}
