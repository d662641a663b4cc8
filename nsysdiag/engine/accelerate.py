"""The choice between an analysis' SQL method and its accelerated pass.

Every analysis states its method in plain DuckDB SQL (``analyses/sql/<name>.sql``). Some
also have an accelerated pass (sorted passes in numpy and compiled loops) that computes
the same tables from the same views; the tests compare the two table for table. The SQL
method runs the window functions of one partition per GPU on one core, which at millions
of kernels costs seconds; the accelerated pass streams the rows once.

An analysis module with a pass has two functions of the same signature and results,
``method`` (the SQL) and ``accelerated`` (the pass); :func:`pick` chooses between them.

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
from typing import Any, TypeVar

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


def pick(method: F, accelerated: F, rows: int | None) -> F:
    """An analysis' ``method`` or its ``accelerated`` pass (same signature, same results)
    for an input of ``rows`` rows."""
    return accelerated if accelerate(rows) else method
