"""The rules analyses declare, found and run by the diagnosis.

An analysis declares a rule by defining ``rule(result, settings) -> list[Finding]`` in its
module (``nsysdiag/findings.py`` describes the form). The diagnosis needs no line of its
own for it: :func:`declared` finds the analyses that define one, read from their source
as ``analyses.ANALYSES`` finds the analyses (a line ``def rule(``); :func:`tasks` puts
each in the diagnosis' plan with the diagnosis' options its ``run`` takes (``settings``,
``range_name``, ``baseline``); :func:`findings` calls each rule on its analysis' result
when that measured (status ok), in the order of ``ANALYSES``. Adding an analysis with a
rule thus touches its SQL, its module, its test and its doc page, and the two lines of
``facade.py`` that every analysis has.
"""

from __future__ import annotations

import functools
import importlib.resources
import inspect
import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from .. import analyses
from ..analyses import ANALYSES, module
from ..analyses import results as results_of
from ..findings import Finding

if TYPE_CHECKING:
    from ..engine.runner import Task
    from ..settings import Settings
    from .model import Analyses

#: the line that declares a rule in an analysis module
_RULE_LINE = re.compile(r"^def rule\(", re.M)


@functools.cache
def declared() -> tuple[str, ...]:
    """The analyses that declare a rule, by name, in the order of ``ANALYSES`` (read from
    their source; an analysis is imported when it runs)."""
    package = importlib.resources.files(analyses)
    return tuple(name for name in ANALYSES
                 if _RULE_LINE.search(package.joinpath(f"{name}.py").read_text()))


def tasks(settings: Settings, planned: Collection[str] = (), **options: Any) -> list[Task]:
    """The plan's tasks of the analyses that declare a rule, less those ``planned``
    already: each with ``settings`` and those of the diagnosis' ``options``
    (``range_name``, ``baseline``) its ``run`` takes."""
    out = []
    for name in declared():
        if name in planned:
            continue
        takes = inspect.signature(module(name).run).parameters
        out.append(results_of.task(name, settings=settings,
                                   **{k: v for k, v in options.items() if k in takes}))
    return out


def findings(results: Analyses, settings: Settings) -> list[Finding]:
    """What the declared rules find: each rule on its analysis' result, when that
    measured."""
    out: list[Finding] = []
    for name in declared():
        mod = module(name)
        result = results.measured(mod.RESULT)
        if result is not None:
            out.extend(mod.rule(result, settings))
    return out
