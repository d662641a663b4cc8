"""The typed errors nsysdiag raises, and the exit code each maps to on the command line.

Every error a user can cause with their input is one of these; anything else escaping the
library is a bug (exit code 70).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_INPUT = 3
EXIT_MISSING_DATA = 4
#: ``batch`` wrote its results but at least one report failed (see the results' status)
EXIT_REPORTS_FAILED = 5
EXIT_INTERNAL = 70
#: the environment, not the input, stopped the run: disk full, file size limit, memory
#: limit, the cache removed or unwritable mid-run (sysexits' EX_TEMPFAIL: fix, then rerun)
EXIT_RESOURCE = 75
#: stopped by Ctrl-C (SIGINT), as shells report it: 128 + 2
EXIT_INTERRUPTED = 130


class NsysdiagError(Exception):
    """Base class of every error nsysdiag raises on purpose."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, *, path: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = path
        self.hint = hint

    def one_line(self) -> str:
        """The error as one line: file, problem and, where known, the fix."""
        parts = []
        if self.path:
            parts.append(f"{self.path}:")
        parts.append(" ".join(self.message.split()))
        if self.hint:
            parts.append(f"({' '.join(self.hint.split())})")
        return " ".join(parts)


class InputError(NsysdiagError):
    """The input cannot be read or is not a usable Nsight Systems export."""

    exit_code = EXIT_INPUT


class NsysNotFoundError(InputError):
    """A raw .nsys-rep/.qdrep needs the nsys CLI to export it, and none was found."""


class MissingDataError(NsysdiagError):
    """The export lacks the data a command needs (for example no CUDA trace)."""

    exit_code = EXIT_MISSING_DATA


class ResourceError(NsysdiagError):
    """The environment stopped the run, not the input: no space left, a file size limit,
    the memory limit, the cache directory removed or unwritable while in use."""

    exit_code = EXIT_RESOURCE


class UsageError(NsysdiagError):
    """A bad argument value (range name not found, bad baseline file, ...)."""

    exit_code = EXIT_USAGE


class FitError(NsysdiagError):
    """A statistical fit could not be computed."""

    exit_code = EXIT_INTERNAL


class StageTimeout(NsysdiagError):
    """A thread or process that another one waits for made no progress within the stage
    bound (``NSYSDIAG_STAGE_TIMEOUT``, see ``nsysdiag.engine.threads``): a bug or a stuck
    library, never a property of the input, so it exits like an internal error."""

    exit_code = EXIT_INTERNAL

    def __init__(self, stage: str, waited_s: float, what: str = "a worker"):
        super().__init__(
            f"stage '{stage}' stopped: {what} made no progress for {waited_s:g} s",
            hint="a bug or a stuck library; NSYSDIAG_STAGE_TIMEOUT sets this bound",
        )
        self.stage = stage
        self.waited_s = waited_s
