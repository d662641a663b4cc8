"""The choice between an analysis' SQL method and its accelerated pass.

Every analysis states its method in plain DuckDB SQL (``analyses/sql/<name>.sql``). Some
also have an accelerated pass (sorted passes in numpy and compiled loops) that computes
the same tables from the same views; the tests compare the two table for table. The SQL
method runs the window functions of one partition per GPU on one core, which at millions
of kernels costs seconds; the accelerated pass streams the rows once.

An analysis module with a pass has two functions of the same signature and results,
``method`` (the SQL) and ``accelerated`` (the pass), and registers them for the output they
compute (:func:`register`: the analysis, the output, and the input rows that decide); the
engine chooses between them at each call (:class:`Accelerator`). The equality tests
(``tests/test_accelerated.py``) run every analysis with a registered pass both ways, so a
pass registered here is tested equal to its method without a test naming it.

``$NSYSDIAG_ACCELERATE``:

``auto`` (default)
    the accelerated pass from :data:`THRESHOLD_ROWS` input rows on (the rows of the view
    that the analysis' passes stream), the SQL method below;
``always``
    the accelerated pass whatever the size;
``never``
    the SQL method whatever the size.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..errors import UsageError

ACCELERATE_ENV = "NSYSDIAG_ACCELERATE"
MODES = ("auto", "always", "never")
#: input rows from which ``auto`` takes the accelerated pass (docs/performance.md has the
#: measurements behind it)
THRESHOLD_ROWS = 100_000

F = TypeVar("F", bound=Callable[..., Any])


def mode() -> str:
    """``$NSYSDIAG_ACCELERATE`` (default ``auto``), checked."""
    value = (os.environ.get(ACCELERATE_ENV) or "auto").strip().lower()
    if value not in MODES:
        raise UsageError(
            f"bad ${ACCELERATE_ENV}: {value!r}; one of {', '.join(MODES)}")
    return value


def accelerate(rows: int | None) -> bool:
    """Whether an analysis over ``rows`` input rows (None: unknown) takes its accelerated
    pass."""
    chosen = mode()
    if chosen != "auto":
        return chosen == "always"
    return rows is None or rows >= THRESHOLD_ROWS


@dataclass(frozen=True)
class Accelerator(Generic[F]):
    """An accelerated pass registered for one output of an analysis (:func:`register`):
    calling it runs the pass or the SQL method, as :func:`accelerate` decides for the
    input rows of the report it is called on.

    Attributes
    ----------
    analysis, output
        The analysis and what the two compute (a step or table of its method).
    method, accelerated
        The SQL method and the pass: the same signature (the report first), the same
        results.
    rows
        The input rows that decide, from the report (None: unknown).
    """

    analysis: str
    output: str
    method: F
    accelerated: F
    rows: Callable[[Any], int | None]

    def takes(self, report: Any) -> bool:
        """Whether a call on ``report`` runs the accelerated pass."""
        return accelerate(self.rows(report))

    def chosen(self, report: Any) -> F:
        """The method or the pass, as the engine chooses for ``report``."""
        return self.accelerated if self.takes(report) else self.method

    def __call__(self, report: Any, *args: Any, **kw: Any) -> Any:
        return self.chosen(report)(report, *args, **kw)


_REGISTERED: dict[tuple[str, str], Accelerator] = {}


def register(analysis: str, output: str, *, method: F, accelerated: F,
             rows: Callable[[Any], int | None]) -> Accelerator[F]:
    """Register ``accelerated`` as the pass that computes ``output`` of ``analysis`` as its
    SQL ``method`` does, taken for ``rows(report)`` input rows (:func:`accelerate`).

    Raises ValueError for an output registered twice."""
    key = (analysis, output)
    if key in _REGISTERED:
        raise ValueError(f"an accelerated pass for {analysis} {output} is registered already")
    _REGISTERED[key] = entry = Accelerator(analysis, output, method, accelerated, rows)
    return entry


def registered() -> tuple[Accelerator, ...]:
    """Every accelerated pass registered (by the analysis modules imported so far)."""
    return tuple(_REGISTERED.values())


def rows_of(*views: str) -> Callable[[Any], int | None]:
    """The input rows of a report's ``views`` as the probe counts them in the export: one
    view's count as it is (None: unknown, which takes the pass), several views' summed
    (an unknown count as 0)."""
    def rows(report: Any) -> int | None:
        probe = report.probe
        if len(views) == 1:
            return probe[views[0]].source_rows
        return sum(probe[v].source_rows or 0 for v in views)
    rows.__qualname__ = f"rows_of({', '.join(views)})"
    return rows
