"""Start-up: the command line's --version and --help load no module that reads traces,
and loading the modules a command runs with leaves numba to the loops that use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: modules that cost a large part of a second to import
HEAVY = ("numba", "llvmlite", "numpy", "pyarrow", "duckdb", "scipy", "pandas")


def loaded_after(code: str) -> list[str]:
    """The HEAVY modules loaded in a fresh interpreter after running ``code``."""
    probe = (f"import sys\n{code}\nimport json\n"
             f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"]])
def test_version_and_help_load_nothing_heavy(args):
    code = ("import contextlib, io\nfrom nsysdiag.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({args!r}) == 0")
    assert loaded_after(code) == []


def test_importing_the_library_loads_nothing_heavy():
    assert loaded_after("import nsysdiag") == []


def test_a_commands_modules_leave_numba_to_its_loops():
    """Every module a command imports before it runs (cli.cli imports the analyses) loads
    no numba: it is imported by the first compiled loop that runs."""
    code = ("from nsysdiag import analyses\n"
            "for name in analyses.ANALYSES:\n    analyses.module(name)\n"
            "import nsysdiag.report, nsysdiag.diagnosis.engine, nsysdiag.render.terminal\n"
            "import nsysdiag.render.html, nsysdiag.batch.run, nsysdiag.diff")
    loaded = loaded_after(code)
    assert "numba" not in loaded and "llvmlite" not in loaded


def test_the_diagnosis_modules_leave_scipy_stats_to_workload():
    """The diagnosis imports workload (its result class and rules) but scipy.stats and
    scipy.optimize only when workload measures sizes: a healthy tail never pays them."""
    code = ("import nsysdiag.diagnosis.engine, nsysdiag.analyses.workload\n"
            "assert 'scipy.stats' not in sys.modules, 'scipy.stats'\n"
            "assert 'scipy.optimize' not in sys.modules, 'scipy.optimize'")
    loaded_after(code)


def test_workloads_size_relation_imports_no_scipy_stats_or_optimize():
    """gpu-jitter's diagnosis measures workload's size relation (a rank correlation and a
    monotone fit per measure): computed in numpy (compute/fits.py), not by scipy.stats and
    scipy.optimize, whose imports cost a large part of a cold run."""
    example = ROOT / "examples" / "gpu-jitter.sqlite"
    code = ("import nsysdiag\n"
            f"d = nsysdiag.diagnose({str(example)!r}, cache=False)\n"
            "assert d.analyses['workload'].table('size_relation').num_rows > 0\n"
            "assert 'scipy.stats' not in sys.modules, 'scipy.stats'\n"
            "assert 'scipy.optimize' not in sys.modules, 'scipy.optimize'")
    loaded_after(code)


def test_a_compiled_loop_compiles_on_first_call_with_the_loops_it_calls():
    """find_keys calls _before: both become numba dispatchers on the first call."""
    code = ("from nsysdiag.views import _compiled as c\nimport numba, numpy as np\n"
            "D = numba.core.dispatcher.Dispatcher\n"
            "assert not isinstance(c.find_keys, D) and not isinstance(c._before, D)\n"
            "a = lambda *v: np.array(v, np.int64)\nout = a(0, 0)\n"
            "c.find_keys(a(1, 2), a(5, 6), a(2, 1), a(6, 9), np.array([True, True]), out)\n"
            "assert out.tolist() == [1, -1], out\n"
            "assert isinstance(c.find_keys, D) and isinstance(c._before, D)")
    loaded_after(code)


def test_help_lists_each_analysis_with_its_docstring():
    from nsysdiag import analyses

    for name in analyses.ANALYSES:
        doc = analyses.module(name).__doc__.strip().splitlines()[0]
        assert analyses.summary(name) == doc
