"""nsysdiag: offline post-mortem diagnosis of NVIDIA Nsight Systems traces.

>>> import nsysdiag
>>> rep = nsysdiag.open("trace.sqlite")            # doctest: +SKIP
>>> rep.sql("SELECT count(*) FROM kernels")       # doctest: +SKIP
"""

__version__ = "0.1.0"

from .errors import InputError, MissingDataError, NsysdiagError, UsageError  # noqa: E402
from .report import Report, ReportInfo, open  # noqa: E402

__all__ = [
    "InputError",
    "MissingDataError",
    "NsysdiagError",
    "Report",
    "ReportInfo",
    "UsageError",
    "__version__",
    "open",
]
