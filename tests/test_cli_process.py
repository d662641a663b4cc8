"""The command line's process settings (nsysdiag/cli/__init__.py): set before numpy and
DuckDB load, never over a value the user set, and not by importing the library."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("NUMPY_MADVISE_HUGEPAGE", "DUCKDB_JE_MALLOC_CONF")}
    out = subprocess.run([sys.executable, "-c", code], env={**environ, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_importing_the_library_loads_neither_numpy_nor_duckdb():
    code = "import sys, nsysdiag; print('numpy' in sys.modules, 'duckdb' in sys.modules)"
    assert _run(code) == "False False"
    code = "import nsysdiag; print(nsysdiag.open.__module__, nsysdiag.Report.__name__)"
    assert _run(code) == "nsysdiag.report Report"


def test_the_command_line_sets_its_memory_options_first():
    code = ("import os, nsysdiag.cli.main, numpy; "
            "print(os.environ['NUMPY_MADVISE_HUGEPAGE'], os.environ['DUCKDB_JE_MALLOC_CONF'], "
            "(getattr(numpy, '_core', None) or numpy.core).multiarray._get_madvise_hugepage())")
    assert _run(code) == "0 dirty_decay_ms:-1,muzzy_decay_ms:-1 False"
    # a value already set is kept
    assert _run(code, NUMPY_MADVISE_HUGEPAGE="1").split()[0] == "1"
