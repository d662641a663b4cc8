"""Rules that analyses declare (``def rule`` in an analysis module): the diagnosis finds
them by itself, runs their analyses and adds their findings (diagnosis/rules.py)."""

from __future__ import annotations

import inspect

import nsysdiag
from nsysdiag.analyses import ANALYSES, module
from nsysdiag.diagnosis import rules

US = 1_000


def test_the_declared_rules_are_the_analyses_that_define_one():
    """Found from the source (a line ``def rule(``) without importing: the same as the
    modules that have a ``rule`` once imported, each taking (result, settings)."""
    defined = tuple(name for name in ANALYSES if hasattr(module(name), "rule"))
    assert rules.declared() == defined
    assert "os_blocking" in defined  # check C2
    for name in defined:
        assert list(inspect.signature(module(name).rule).parameters) == ["result", "settings"]


def test_a_diagnosis_runs_every_declared_analysis_and_its_rule(builder, tmp_path):
    """No line of the diagnosis names them: each declared analysis is in its results, and
    os_blocking's rule (check C2) is among its findings, with the same evidence."""
    b = builder("current")
    for i in range(40):
        t = i * 1_000 * US
        b.nvtx(t, t + 500 * US, "step")
        b.launch(t + 10 * US, t + 20 * US, t + 30 * US, t + 400 * US)
    b.osrt(0, 5_000 * US, "poll")
    b.osrt(6_000 * US, 7_000 * US, "poll", tid=9)
    d = nsysdiag.diagnose(b.write(tmp_path / "t.sqlite"), cache=False)
    assert set(rules.declared()) <= set(d.analyses)
    (c2,) = [f for f in d.findings if f.check == "C2"]
    assert c2.evidence == ("poll: 2 calls, 6 ms blocked, summed over 2 threads",)
    assert (c2.layer, c2.severity, c2.title) == ("cpu", "info", "Where CPU threads blocked "
                                                 "(OS runtime trace)")


def test_a_declared_analysis_already_planned_is_not_planned_twice():
    from nsysdiag.settings import Settings

    names = [t.name for t in rules.tasks(Settings(), range_name="step")]
    assert names == list(rules.declared())
    assert "os_blocking" not in [t.name for t in rules.tasks(Settings(), {"os_blocking"})]
