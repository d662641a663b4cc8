"""The typed facade: each analysis as a method of :class:`~nsysdiag.report.Report` and as
a typed accessor of a diagnosis' results, declared by one line.

``rep.transfers(baseline=...)`` is ``rep.analysis("transfers", baseline=...)`` with the
analysis' own options (those of its module's ``run``, documented there) and its result
class as the return type: a caller reads figures as attributes
(``rep.transfers().htod.median_gbps``), checked by a type checker, instead of finding a
result by name. Results are computed once per report and options (``analyses.results``:
an option given its default counts as left out, so ``rep.ranges()`` and
``rep.analysis("ranges")`` share one result). The method returns the bare
:class:`AnalysisResult` when the analysis had nothing to measure (``not_captured``,
``empty``). On a diagnosis' results (``diagnosis.model.Analyses``), ``d.analyses.ranges``
is the ranges analysis' :class:`RangesResult` when it measured (status ok), else None.

Both come from one line per analysis in :class:`Declared`,
``transfers = Analysis(lambda: transfers)``: the module named in the lambda (imported for
the type checker only, in the ``TYPE_CHECKING`` block below) gives the type checker the
options of its ``run`` and its ``RESULT``; at run time the attribute's name is the
analysis', and its module is imported on first use. An analysis is a module of
``nsysdiag.analyses`` (``ANALYSES`` finds them); adding one adds two lines here, its
name to the import and its declaration. ``tests/test_facade.py`` checks that every
analysis has its line, naming its own module.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from .analyses import (
        allocations,
        api_summary,
        capture,
        gpu_idle,
        gpu_metrics,
        graphs,
        host_syncs,
        interference,
        jitter,
        kernel_summary,
        launch_gaps,
        launch_latency,
        os_blocking,
        overlap,
        ranges,
        transfers,
        whole_run,
        workload,
    )
    from .analyses.base import AnalysisResult

P = ParamSpec("P")
R = TypeVar("R", bound="AnalysisResult")
R_co = TypeVar("R_co", bound="AnalysisResult", covariant=True)


class AnalysisModule(Protocol[P, R_co]):
    """What the facade reads of an analysis module: its result class and its ``run``."""

    @property
    def RESULT(self) -> type[R_co]: ...  # noqa: N802 (the module constant's name)

    @property
    def run(self) -> Callable[Concatenate[Any, P], R_co | AnalysisResult]: ...


class Runner(Protocol):
    """What runs analyses by name (:class:`~nsysdiag.report.Report`)."""

    def analysis(self, name: str, **options: Any) -> AnalysisResult: ...


class Analysis(Generic[P, R]):
    """One analysis of the facade: on a report, a method with the options of its ``run``
    returning its result (``R``, or the bare :class:`AnalysisResult`); on a dict of
    results by name, its result when it measured, else None.

    ``declared`` returns the analysis' module; it is never called (the type checker reads
    it), so that declaring the facade imports no analysis."""

    def __init__(self, declared: Callable[[], AnalysisModule[P, R]]) -> None:
        self.declared = declared
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Analysis[P, R]: ...

    @overload
    def __get__(self, obj: dict[str, AnalysisResult], owner: type) -> R | None: ...

    @overload
    def __get__(self, obj: Runner, owner: type) -> Callable[P, R | AnalysisResult]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        if isinstance(obj, dict):
            result = obj.get(self.name)
            if result is None or not result.ok:
                return None
            return result if isinstance(result, _module(self.name).RESULT) else None
        return types.MethodType(_method(self.name), obj)


def _module(name: str) -> Any:
    from .analyses import module

    return module(name)


@functools.cache
def _method(name: str) -> Callable[..., AnalysisResult]:
    """Analysis ``name`` as a function of a runner and ``run``'s options: documented and
    signed as its ``run``, less the report."""
    run = _module(name).run
    signature = inspect.signature(run)

    def method(runner: Runner, /, *args: Any, **options: Any) -> AnalysisResult:
        given = signature.bind_partial(None, *args, **options).arguments
        given.pop(next(iter(signature.parameters)))
        return runner.analysis(name, **given)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"{(run.__doc__ or name).strip().splitlines()[0]} "
                      f"(:func:`nsysdiag.analyses.{name}.run`).")
    method.__signature__ = signature  # type: ignore[attr-defined]
    return method


class Declared:
    """The analyses, one line each (see the module)."""

    allocations = Analysis(lambda: allocations)
    api_summary = Analysis(lambda: api_summary)
    capture = Analysis(lambda: capture)
    gpu_idle = Analysis(lambda: gpu_idle)
    gpu_metrics = Analysis(lambda: gpu_metrics)
    graphs = Analysis(lambda: graphs)
    host_syncs = Analysis(lambda: host_syncs)
    interference = Analysis(lambda: interference)
    jitter = Analysis(lambda: jitter)
    kernel_summary = Analysis(lambda: kernel_summary)
    launch_gaps = Analysis(lambda: launch_gaps)
    launch_latency = Analysis(lambda: launch_latency)
    os_blocking = Analysis(lambda: os_blocking)
    overlap = Analysis(lambda: overlap)
    ranges = Analysis(lambda: ranges)
    transfers = Analysis(lambda: transfers)
    whole_run = Analysis(lambda: whole_run)
    workload = Analysis(lambda: workload)


class AnalysisMethods(Declared):
    """One method per analysis, each running it through :meth:`analysis` (which the class
    that takes these methods, :class:`~nsysdiag.report.Report`, defines)."""

    def analysis(self, name: str, **options: Any) -> AnalysisResult:
        """The result of analysis ``name`` with ``options`` (the class defines it)."""
        raise NotImplementedError
