"""Building a grammar pauses the cyclic collector and leaves it as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from structspec import Grammar
from structspec.gcpause import paused_collection
from structspec.jsonschema import convert_schema

BIG = "root ::= " + " | ".join(f'"key{i}" [a-z]{{0,{i % 7 + 1}}} ("," [0-9]+)*' for i in range(400))
SCHEMA = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": i + 1} for i in range(60)}}


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations of the collections that run while the test does."""
    seen: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.collect()
    gc.callbacks.append(record)
    old = gc.get_threshold()
    gc.set_threshold(100, 2, 2)  # collections come often, so that a pause is what keeps them out
    try:
        yield seen
    finally:
        gc.set_threshold(*old)
        gc.callbacks.remove(record)


def test_compiling_rules_runs_no_collection(collections: list[int]) -> None:
    Grammar.from_gbnf(BIG)
    assert len(collections) <= 1  # at most one, before or after the pause
    assert gc.isenabled()


def test_converting_a_schema_runs_no_collection(collections: list[int]) -> None:
    convert_schema(SCHEMA)
    assert len(collections) <= 1


def test_collection_resumes_only_if_it_was_on() -> None:
    assert gc.isenabled()
    with paused_collection():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_collection():
            pass
        Grammar.from_gbnf('root ::= "a"')
        assert not gc.isenabled()
    finally:
        gc.enable()


ARRAYS = {
    "type": "object",
    "properties": {
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
        "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 5},
        "n": {"type": "number", "multipleOf": 0.01, "minimum": 0},
    },
}


def test_building_leaves_no_cycles_for_the_collector() -> None:
    """Conversion and compilation free what they build by reference counting: a cycle (a
    recursive closure, a converter and its expander) would keep the syntax trees alive until
    the next collection, which then walks them all."""
    Grammar.from_json_schema(ARRAYS)  # first use: validator classes and caches
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.disable()
        Grammar.from_gbnf(convert_schema(ARRAYS).text)
        Grammar.from_gbnf(BIG)
        gc.collect()
        left = list(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    assert left == []
