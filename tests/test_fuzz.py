"""Property-based mutation fuzzing of small exports (hypothesis).

Each example takes a small, valid export written with TraceBuilder (``fixtures/fuzz.py``:
the standard fixture in three layouts, 60 NVTX steps, CUDA graph launches), mutates it
(values to huge / negative / NULL / text / invalid UTF-8, tables and columns dropped,
columns nulled, rows duplicated or deleted, strings corrupted, start and end swapped) and
runs the library on it in-process. The property: only nsysdiag's own errors
(``NsysdiagError``) escape, and results are finite and consistent (durations and launch
gaps >= 0, percentiles ordered, shares in [0, 100], strict JSON, text rendering works).

Cases, 500 in all by default (``NSYSDIAG_FUZZ_SCALE`` multiplies them, e.g. 0.2 for a
quick run, 10 for a long one; ``bench/fuzz_long.py`` runs thousands without stopping at
the first failure):

* ``test_fuzz_full`` (120): open + info + diagnose, which runs launch_gaps, launch_latency,
  transfers, overlap, graphs and ranges (each result checked) and the tail classifier -
  the costly kind, about 0.8 s each on the 2-core machine;
* ``test_fuzz_views`` (330): open + info + every view (durations >= 0) + kernel_summary +
  jitter - about 0.3 s each;
* ``test_fuzz_parquet`` (50): as ``test_fuzz_views``, on the mutated export converted to a
  Parquet directory.

Bugs found in analyses and diagnosis code and reported to their owners are listed in
``fixtures.fuzz.KNOWN_BUGS``; they pass as "known bug" events (``--hypothesis-show-statistics``
counts them) so that these tests keep guarding the rest.

Examples are derandomized (the same every run) and not stored in a database.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from fixtures.fuzz import (
    BASE_BUILDERS,
    I64_MAX,
    I64_MIN,
    OPS,
    VALUES,
    Mutation,
    base_schema,
    exercise,
    known_bug,
    write_case,
)
from fixtures.parquetdir import sqlite_to_parquet_dir

SCALE = float(os.environ.get("NSYSDIAG_FUZZ_SCALE", "1"))


def _examples(n: int) -> int:
    return max(1, round(n * SCALE))


FUZZ = dict(deadline=None, derandomize=True, database=None, print_blob=False,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                   HealthCheck.function_scoped_fixture])

_SCHEMA_DIR = None


def _schema(base: str) -> dict[str, list[str]]:
    import tempfile
    from pathlib import Path

    global _SCHEMA_DIR
    if _SCHEMA_DIR is None:
        _SCHEMA_DIR = Path(tempfile.mkdtemp(prefix="nsysdiag-fuzz-schema-"))
    return base_schema(base, _SCHEMA_DIR)


VALUE = st.one_of(
    st.sampled_from(VALUES),
    st.integers(I64_MIN, I64_MAX),
    st.integers(-(10**6), 10**6),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.floats(allow_nan=False),
)


ALL_BASES = tuple(sorted(BASE_BUILDERS))


@st.composite
def cases(draw, bases=ALL_BASES):
    base = draw(st.sampled_from(bases))
    schema = _schema(base)
    tables = sorted(schema)
    muts = []
    for _ in range(draw(st.integers(1, 4))):
        table = draw(st.sampled_from(tables))
        muts.append(Mutation(
            op=draw(st.sampled_from(OPS)),
            table=table,
            column=draw(st.sampled_from(schema[table])),
            value=draw(VALUE),
            fraction=draw(st.sampled_from((0.0, 0.1, 0.5, 1.0))),
        ))
    return base, muts


def _run(case, tmp_path, *, full: bool, parquet: bool = False) -> None:
    base, muts = case
    note(f"base {base!r}; mutations: " + "; ".join(map(str, muts)))
    path = write_case(base, muts, tmp_path / "case.sqlite")
    if parquet:
        import shutil

        out = tmp_path / "case_pq"
        shutil.rmtree(out, ignore_errors=True)
        path = sqlite_to_parquet_dir(path, out)
    for outcome in exercise(path, full=full, tolerate=known_bug) or ["ok"]:
        event(outcome)


@settings(max_examples=_examples(120), **FUZZ)
@given(case=cases())
def test_fuzz_full(case, tmp_path):
    _run(case, tmp_path, full=True)


@settings(max_examples=_examples(330), **FUZZ)
@given(case=cases())
def test_fuzz_views(case, tmp_path):
    _run(case, tmp_path, full=False)


@settings(max_examples=_examples(50), **FUZZ)
@given(case=cases(bases=("standard", "steps")))
def test_fuzz_parquet(case, tmp_path):
    _run(case, tmp_path, full=False, parquet=True)


def test_fuzz_budget():
    """The suite runs at least 500 fuzz cases at the default scale."""
    if SCALE == 1:
        assert _examples(120) + _examples(330) + _examples(50) >= 500
    else:
        pytest.skip("NSYSDIAG_FUZZ_SCALE is set")
