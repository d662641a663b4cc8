"""nsysdiag: offline post-mortem diagnosis of NVIDIA Nsight Systems traces.

>>> import nsysdiag
>>> rep = nsysdiag.open("trace.sqlite")            # doctest: +SKIP
>>> rep.sql("SELECT count(*) FROM kernels")       # doctest: +SKIP
"""

__version__ = "0.1.0"

from .errors import InputError, MissingDataError, NsysdiagError, UsageError  # noqa: E402
from .report import Report, ReportInfo, open  # noqa: E402


def diagnose(target, **kwargs):  # noqa: ANN001, ANN201 - documented in diagnosis.engine
    """Diagnose a trace (path or open Report); see :func:`nsysdiag.diagnosis.engine.diagnose`."""
    from .diagnosis.engine import diagnose as _diagnose

    return _diagnose(target, **kwargs)


__all__ = [
    "diagnose",
    "InputError",
    "MissingDataError",
    "NsysdiagError",
    "Report",
    "ReportInfo",
    "UsageError",
    "__version__",
    "open",
]
