"""Property tests: values generated from a schema are accepted, and text the grammar
produces (random walks over its allowed bytes) or accepts after mutation always validates."""

from __future__ import annotations

import functools
import json
import random
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from structspec.grammar import Grammar
from structspec.jsonschema import schema_to_gbnf

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": -50, "maximum": 5000},
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "ratio": {"type": "number"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c d"]}, "maxItems": 4},
            "kind": {"enum": ["x", "y", None]},
        },
        "required": ["id", "name"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2,4}$"},
            "when": {"type": "string", "format": "date"},
            "flag": {"type": "boolean"},
        },
        "required": ["code"],
        "additionalProperties": {"type": "integer", "minimum": -(10**9), "maximum": 10**9},
    },
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "string", "maxLength": 3}],
        "additionalItems": {"type": ["null", "boolean"]},
        "minItems": 1,
        "maxItems": 5,
    },
    {"anyOf": [{"type": "integer", "multipleOf": 7}, {"type": "string", "pattern": "q"}]},
]


@functools.cache
def grammar(index: int) -> Grammar:
    return Grammar.from_gbnf(schema_to_gbnf(SCHEMAS[index]))


def referee(index: int) -> jsonschema.protocols.Validator:
    schema = SCHEMAS[index]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def in_schema_order(value: Any, schema: dict[str, Any]) -> Any:
    """Declared properties first, in schema order (the grammar's layout decision)."""
    if isinstance(value, dict) and "properties" in schema:
        order = list(schema["properties"])
        keys = sorted(value, key=lambda k: (0, order.index(k)) if k in order else (1, 0))
        return {k: value[k] for k in keys}
    return value


LONG_DIGITS = re.compile(r"[0-9]{21,}")


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_generated_instances_are_accepted(index: int) -> None:
    schema = SCHEMAS[index]

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(from_schema(schema))
    def check(value: Any) -> None:
        text = compact(in_schema_order(value, schema))
        assume(not LONG_DIGITS.search(text))  # beyond the documented digit caps
        assert grammar(index).matches(text), text

    check()


CLOSERS = frozenset(b'"}],:')


def random_walk(g: Grammar, rng: random.Random, limit: int = 300) -> bytes | None:
    """A text of ``g`` chosen byte by byte among the allowed bytes (half the time among the
    ones that close strings and containers, so walks end); ``None`` if too long."""
    state = g.initial_state()
    out = bytearray()
    while len(out) < limit:
        if state.is_accepting() and (rng.random() < 0.15 or not state.allowed_bytes()):
            return bytes(out)
        allowed = sorted(state.allowed_bytes())
        if not allowed:
            return None
        closing = [b for b in allowed if b in CLOSERS]
        byte = rng.choice(closing if closing and rng.random() < 0.5 else allowed)
        nxt = state.advance_byte(byte)
        assert nxt is not None
        out.append(byte)
        state = nxt
    return None


@pytest.mark.parametrize("index", [0, 2, 3])  # random walks rarely finish schema 1's objects
def test_texts_the_grammar_produces_validate(index: int) -> None:
    rng = random.Random(index)
    judge = referee(index)
    checked = 0
    for _ in range(300):
        data = random_walk(grammar(index), rng)
        if data is None:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pytest.fail(f"grammar produced invalid UTF-8: {data!r}")
        assert judge.is_valid(json.loads(text)), text
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_accepted_mutations_validate(index: int) -> None:
    schema = SCHEMAS[index]
    judge = referee(index)

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(from_schema(schema), st.data())
    def check(value: Any, data: st.DataObject) -> None:
        text = compact(in_schema_order(value, schema))
        pos = data.draw(st.integers(0, len(text)))
        edit = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        char = data.draw(st.sampled_from(list('"\\,:{}[]0-9eE.a \u00e9')))
        if edit == "insert":
            mutated = text[:pos] + char + text[pos:]
        elif edit == "delete":
            mutated = text[:pos] + text[pos + 1 :]
        else:
            mutated = text[:pos] + char + text[pos + 1 :]
        if grammar(index).matches(mutated):
            assert judge.is_valid(json.loads(mutated)), mutated

    check()
