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


ANY_ORDER_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 99},
            "b": {"type": "string", "maxLength": 3},
            "c": {"type": "boolean"},
            "d": {"enum": [None, "x"]},
        },
        "required": ["c", "a"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"}},
        "minProperties": 1,
        "maxProperties": 2,
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    {  # more declared properties than the set-of-seen automaton tracks: only required ones are
        "type": "object",
        "properties": {f"p{i}": {"type": "integer", "minimum": 0, "maximum": 9} for i in range(9)},
        "required": ["p7", "p2"],
        "additionalProperties": False,
    },
    {  # ... and with a maximum count, schema order is kept
        "type": "object",
        "properties": {f"p{i}": {"type": "boolean"} for i in range(9)},
        "maxProperties": 3,
        "additionalProperties": False,
    },
]


@functools.cache
def any_order_grammar(index: int) -> Grammar:
    return Grammar.from_json_schema(ANY_ORDER_SCHEMAS[index], property_order="any")


def any_order_referee(index: int) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(ANY_ORDER_SCHEMAS[index])


@pytest.mark.parametrize("index", range(len(ANY_ORDER_SCHEMAS)))
def test_any_property_order_accepts_shuffled_instances_and_stays_sound(index: int) -> None:
    schema = ANY_ORDER_SCHEMAS[index]
    keeps_schema_order = "maxProperties" in schema and len(schema["properties"]) > 6

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(from_schema(schema), st.data())
    def check(value: dict[str, Any], data: st.DataObject) -> None:
        keys = data.draw(st.permutations(list(value)))
        text = compact({k: value[k] for k in keys})
        if keeps_schema_order:
            assert any_order_grammar(index).matches(compact(in_schema_order(value, schema))), text
        else:
            assert any_order_grammar(index).matches(text), text

    check()
    rng = random.Random(index)
    judge = any_order_referee(index)
    checked = 0
    for _ in range(300):
        produced = random_walk(any_order_grammar(index), rng)
        if produced is not None:
            assert judge.is_valid(json.loads(produced)), produced
            checked += 1
    assert checked > 20


def test_any_property_order_keeps_declared_properties_unique_and_required_ones_present() -> None:
    small, counted, large = any_order_grammar(0), any_order_grammar(1), any_order_grammar(2)
    assert small.matches('{"c":true,"a":1}') and small.matches('{"d":"x","a":1,"b":"q","c":false}')
    assert not small.matches('{"a":1,"c":true,"a":2}') and not small.matches('{"a":1}')
    assert counted.matches('{"z":1,"b":true}') and not counted.matches('{"z":1,"b":true,"a":2}')
    assert large.matches('{"p8":1,"p7":2,"p0":3,"p2":4}')
    assert large.matches('{"p8":1,"p2":2,"p8":3,"p7":4}')  # optional ones may repeat: the last counts
    assert not large.matches('{"p8":1,"p7":2,"p7":3,"p2":4}') and not large.matches('{"p8":1,"p7":2}')


def test_any_property_order_keeps_a_repeated_witness_last() -> None:
    """A member that must fail the negated ``additionalProperties`` is not overridden by a
    later duplicate of its key (a parser keeps the last value)."""
    schema = {
        "type": "object",
        "properties": {f"p{i}": {} for i in range(9)},
        "not": {"additionalProperties": {"type": "integer"}},
    }
    grammar = Grammar.from_json_schema(schema, property_order="any")
    judge = jsonschema.Draft202012Validator(schema)
    for text in ['{"p0":1,"p0":"x"}', '{"z":1,"p0":"x"}', '{"p0":"x"}']:
        assert grammar.matches(text) and judge.is_valid(json.loads(text)), text
    for text in ['{"p0":"x","p0":1}', '{"p0":1}']:
        assert not grammar.matches(text) and not judge.is_valid(json.loads(text)), text
