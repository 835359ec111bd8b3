"""The benchmark tools' own logic, on tiny inputs (the benchmarks themselves run on demand)."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))

import bench_ttfm

from structspec import SchemaError, Vocabulary


def _byte_vocabulary() -> Vocabulary:
    return Vocabulary.from_token_bytes([bytes([b]) for b in range(256)] + [None], [256])


def test_ttfm_steps_cover_the_whole_time() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}}, "required": ["a"]}
    *steps, total = bench_ttfm.time_schema(schema, _byte_vocabulary())
    assert len(steps) == len(bench_ttfm.STEPS) - 1
    assert all(step >= 0 for step in steps)
    assert sum(steps) == pytest.approx(total, abs=1e-3)


def test_ttfm_refused_schema_raises_the_schema_error() -> None:
    with pytest.raises(SchemaError):
        bench_ttfm.time_schema({"type": "strin"}, _byte_vocabulary())
