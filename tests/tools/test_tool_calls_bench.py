"""``tools/bench_tool_calls.py`` on a fixed small sample: every call's arguments validate against
the function's schema (the full run, with the demo pair over 72 definitions, is in docs)."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, assets_dir
from tiny_models import one_thread, tiny_llama

sys.path.insert(0, str(REPO / "tools"))

import bench_tool_calls

__all__ = ["one_thread"]


@pytest.fixture(scope="module")
def generator():
    from transformers import AutoTokenizer

    from structspec.generation import Generator
    from structspec.models import DEFAULT_TARGET

    tok = AutoTokenizer.from_pretrained(DEFAULT_TARGET)
    return Generator(tiny_llama(len(tok), 5, scale=0.5), tok)


def test_every_sampled_call_validates(generator) -> None:
    from structspec.generation import SpecConfig

    assets_dir()  # the MaskBench part needs the shared assets
    fits = bench_tool_calls.fitting(generator, 400)
    functions = bench_tool_calls.handwritten()[::8] + bench_tool_calls.maskbench_functions(2, seed=3, fits=fits)
    assert len(functions) == 6
    outcomes = [bench_tool_calls.call(generator, f, 400, SpecConfig()) for f in functions]
    bad = [(o.name, o.arguments) for o in outcomes if not (o.complete and o.valid)]
    assert not bad
    summary = bench_tool_calls.summary(outcomes)
    assert summary["valid"] == summary["calls"] == 6
    assert 0 < summary["forced_share"] < 1 and summary["tokens_per_forward_median"] >= 1
