"""nsysdiag: offline post-mortem diagnosis of NVIDIA Nsight Systems traces.

>>> import nsysdiag
>>> rep = nsysdiag.open("trace.sqlite")            # doctest: +SKIP
>>> rep.sql("SELECT count(*) FROM kernels")       # doctest: +SKIP
"""

from typing import TYPE_CHECKING

from ._version import __version__
from .errors import InputError, MissingDataError, NsysdiagError, UsageError
from .settings import Settings

if TYPE_CHECKING:
    from .report import Report, ReportInfo, open

#: imported on first use: the command line (``cli/__init__.py``) sets memory options that
#: must come before numpy and DuckDB are imported
_FROM_REPORT = ("Report", "ReportInfo", "open")


def __getattr__(name: str):  # noqa: ANN202 - PEP 562
    if name in _FROM_REPORT:
        from . import report

        return getattr(report, name)
    raise AttributeError(f"module 'nsysdiag' has no attribute {name!r}")


def diagnose(target, **kwargs):  # noqa: ANN001, ANN201 - documented in diagnosis.engine
    """Diagnose a trace (path or open Report); see :func:`nsysdiag.diagnosis.engine.diagnose`."""
    from .diagnosis.engine import diagnose as _diagnose

    return _diagnose(target, **kwargs)


def diagnose_ranks(paths, **kwargs):  # noqa: ANN001, ANN201 - documented in diagnosis.ranks
    """Diagnose a distributed run from its exports: the straggler at the collectives, what
    it cost and its own cause; see :func:`nsysdiag.diagnosis.ranks.diagnose_ranks`."""
    from .diagnosis.ranks import diagnose_ranks as _diagnose_ranks

    return _diagnose_ranks(paths, **kwargs)


__all__ = [
    "diagnose",
    "diagnose_ranks",
    "InputError",
    "MissingDataError",
    "NsysdiagError",
    "Report",
    "ReportInfo",
    "Settings",
    "UsageError",
    "__version__",
    "open",
]
