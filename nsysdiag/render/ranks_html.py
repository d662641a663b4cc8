"""The HTML report of ``nsysdiag ranks``: the straggler, the waits per rank and a
timeline of the slowest collectives (templates/ranks.html.j2)."""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from markupsafe import Markup

from .._version import __version__
from ..diagnosis.ranks import RanksDiagnosis
from ..formatting import fmt_ns
from .html import environment, write_text_atomic
from .svg import Lane, Span, stacked_hbars, timeline

WAIT, TRANSFER, CAUSED = "#c3cad5", "#2f6fb3", "#c0392b"


@dataclass(frozen=True)
class _Timeline:
    title: str
    svg: Markup


def render_ranks_html(d: RanksDiagnosis) -> str:
    """The ranks report of ``d`` as one self-contained HTML document."""
    c = d.collectives
    waits = stacked_hbars(
        [(c.rank_label(r.rank), [("waits it caused", float(r.caused_wait_ns), CAUSED),
                                 ("its own waits", float(r.waited_ns), WAIT)])
         for r in c.per_rank],
        title="waits per rank", x_label="time") if c.ok else ""
    cause = action = ""
    s = d.straggler_diagnosis
    if s is not None:
        cause = f"The straggler's own diagnosis: {s.verdict.summary}"
        action = s.verdict.mechanism.action if s.verdict.mechanism is not None else ""
    clocks = (f"Clocks: {c.alignment.replace('_', ' ')}; the collectives' ends agree to "
              f"{fmt_ns(c.clock_residual_ns)}." if c.ok else "")
    page = environment().get_template("ranks.html.j2").render(
        title="nsysdiag ranks", paths=[Path(p).name for p in d.paths], version=__version__,
        stamp=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        headline=d.headline(), cause=cause, action=action, clocks=clocks,
        waits=Markup(waits), timelines=_timelines(d))
    return page + "\n"


def _timelines(d: RanksDiagnosis) -> list[_Timeline]:
    c = d.collectives
    if not c.ok:
        return []
    rows = c.table("slowest").to_pylist()
    out = []
    keys = list(dict.fromkeys((r["comm"], r["kind"], r["seq"]) for r in rows))
    for key in keys:
        inst = [r for r in rows if (r["comm"], r["kind"], r["seq"]) == key]
        last = max(r["start_ns"] for r in inst)
        t0, t1 = min(r["start_ns"] for r in inst), max(r["end_ns"] for r in inst)
        lanes = [Lane(c.rank_label(r["rank"]), [
            Span(r["start_ns"], last, WAIT, f"{c.rank_label(r['rank'])} waited "
                 f"{fmt_ns(last - r['start_ns'])}"),
            Span(last, r["end_ns"], TRANSFER, f"in the transfer {fmt_ns(r['end_ns'] - last)}"),
        ]) for r in inst]
        last_rank = inst[0]["last_rank"]
        title = (f"{key[1]} #{key[2]} (communicator {key[0]}): the others waited "
                 f"{fmt_ns(inst[0]['wait_ns'])} for "
                 + (c.rank_label(last_rank) if last_rank is not None
                    else "ranks arriving last together"))
        out.append(_Timeline(title, Markup(timeline(lanes, t0, t1, title=title,
                                                 x_label="time since the first arrival"))))
    return out


def write_ranks_html(d: RanksDiagnosis, path: str | os.PathLike[str]) -> Path:
    """Write the ranks report of ``d`` to ``path`` atomically."""
    return write_text_atomic(render_ranks_html(d), path)
