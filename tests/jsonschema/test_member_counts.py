"""``maxProperties`` beside declared properties, ``dependencies`` and ``minProperties``: the
member count is written without a grammar state per count (``ir/counted.py``), and the
language is still the one ``jsonschema`` gives."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any
from unittest.mock import patch

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structspec.ir.counted as counted
from structspec.errors import SCHEMA_TOO_LARGE, SchemaError, SchemaRelaxedWarning
from structspec.grammar import Grammar
from structspec.jsonschema import schema_to_gbnf

NAMES = ["a", "b", "c"]
EXTRA_NAMES = ["x1", "x2", "x3", "k1", "k2", "k3"]
VALUES = [0, 7, "s", None]
VALUE_SCHEMAS = [{}, {"type": "integer"}, {"type": "string"}, {"enum": [0, None]}]


@st.composite
def object_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """Small object schemas mixing the keywords that decide which members may appear."""
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
    names.sort()  # schema order is alphabetical, so instances are easy to write in it
    schema: dict[str, Any] = {"type": "object", "properties": {n: draw(st.sampled_from(VALUE_SCHEMAS)) for n in names}}
    if names and draw(st.booleans()):
        schema["required"] = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    choice = draw(st.sampled_from(["absent", "false", "schema"]))
    if choice != "absent":
        schema["additionalProperties"] = False if choice == "false" else draw(st.sampled_from(VALUE_SCHEMAS))
    if draw(st.booleans()):
        schema["patternProperties"] = {"^x": draw(st.sampled_from(VALUE_SCHEMAS))}
    if len(names) >= 2 and draw(st.booleans()):
        schema["dependencies"] = {names[0]: [names[-1]]}
    if draw(st.booleans()):
        schema["minProperties"] = draw(st.integers(0, 3))
    schema["maxProperties"] = draw(st.integers(0, 6))
    return schema


def instances(schema: dict[str, Any], order: str, rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Objects with declared members in schema order (shuffled for ``order="any"``) and
    undeclared ones anywhere among them."""
    declared = [n for n in NAMES if n in schema["properties"]]
    out = []
    for _ in range(count):
        keys = [n for n in declared if rng.random() < 0.6]
        if order == "any":
            rng.shuffle(keys)
        for name in rng.sample(EXTRA_NAMES + [n for n in NAMES if n not in declared], rng.randint(0, 4)):
            keys.insert(rng.randint(0, len(keys)), name)
        out.append({key: rng.choice(VALUES) for key in keys})
    return out


def referee(schema: dict[str, Any], instance: dict[str, Any]) -> bool:
    """``jsonschema``'s verdict, with ``minProperties`` counting undeclared members as at most
    one (the documented limit of the grammar: it cannot tell that their names differ)."""
    declared = sum(key in schema["properties"] for key in instance)
    undeclared = len(instance) - declared
    counted_members = declared + min(undeclared, 1)
    return jsonschema.Draft7Validator(schema).is_valid(instance) and counted_members >= schema.get("minProperties", 0)


def uncountable_instance(schema: dict[str, Any]) -> dict[str, Any] | None:
    """An instance ``jsonschema`` accepts whose members the grammar cannot count apart: it has
    fewer than ``minProperties`` once its undeclared members count as one. None when there is
    none among the small objects ``instances`` draws from."""
    member_schema = {k: v for k, v in schema.items() if k not in ("minProperties", "maxProperties", "dependencies")}
    member_schema.pop("required", None)
    validator = jsonschema.Draft7Validator(member_schema)
    fitting = {}  # a value each key may carry, judged on its own
    for key in NAMES + EXTRA_NAMES:
        fitting.update((key, v) for v in VALUES if validator.is_valid({key: v}))
    declared = [k for k in NAMES if k in fitting and k in schema["properties"]]
    undeclared = [k for k in NAMES + EXTRA_NAMES if k in fitting and k not in schema["properties"]]
    for mask in range(2 ** len(declared)):
        present = [k for i, k in enumerate(declared) if mask >> i & 1]
        for size in range(len(undeclared) + 1):
            for extra in itertools.combinations(undeclared, size):
                instance = {k: fitting[k] for k in (*present, *extra)}
                if jsonschema.Draft7Validator(schema).is_valid(instance) and not referee(schema, instance):
                    return instance
    return None


def verdicts(schema: dict[str, Any], order: str, values: list[dict[str, Any]]) -> list[bool] | None:
    """The grammar's verdict on each value; None when strict mode refuses the member count."""
    try:
        text = schema_to_gbnf(schema, property_order=order)
    except SchemaError as exc:
        if "than a grammar can count apart here" in str(exc):
            return None
        assert "accepts no JSON value" in str(exc)
        return [False] * len(values)
    grammar = Grammar.from_gbnf(text)
    return [grammar.matches(json.dumps(v, separators=(",", ":"))) for v in values]


@settings(max_examples=200, deadline=None)
@given(schema=object_schemas(), order=st.sampled_from(["schema", "any"]), seed=st.integers(0, 2**32))
def test_counted_members_match_jsonschema(schema: dict[str, Any], order: str, seed: int) -> None:
    """Every form of the count (unrolled, doubled, long self-loop runs in blocks) accepts an
    instance exactly when ``jsonschema`` does; small limits force each form. Strict mode
    refuses a count only when some valid instance has more members than the grammar can count
    apart (in any branch of the schema), and then each form refuses it."""
    values = instances(schema, order, random.Random(seed), 30)
    expected = [referee(schema, v) for v in values]
    got = verdicts(schema, order, values)
    if got is None:
        assert uncountable_instance(schema) is not None
    else:
        assert got == expected
    with patch.object(counted, "UNROLL_LIMIT", 0), patch.object(counted, "MAX_REPEAT", 2):
        assert verdicts(schema, order, values) == (None if got is None else expected)


LARGE = [  # found by tools/fuzz.py: each built a graph state per count and compiled for a minute or more
    {"type": "object", "properties": {"a": {"type": "integer"}}, "maxProperties": 22_217},
    {"type": "object", "dependencies": {"a": ["b"]}, "maxProperties": 22_217},
    {"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 2, "maxProperties": 22_217},
    {"maxProperties": 48_175},
]


@pytest.mark.parametrize("schema", LARGE)
def test_a_large_max_properties_needs_no_rule_per_count(schema: dict[str, Any]) -> None:
    text = schema_to_gbnf(schema)
    assert text.count("::=") < 300
    Grammar.from_gbnf(text)


def members(count: int, declared: dict[str, int]) -> str:
    """An object of ``count`` members: the ``declared`` ones in the middle of undeclared ones."""
    extra = [f'"k{i}":{i}' for i in range(count - len(declared))]
    middle = len(extra) // 2
    listed = extra[:middle] + [f'"{k}":{v}' for k, v in declared.items()] + extra[middle:]
    return "{" + ",".join(listed) + "}"


def test_counts_at_a_large_max_properties_boundary() -> None:
    """1,500 members beside declared (and dependent) properties: the count is exact at the
    boundary, with the declared ones in the middle of the undeclared ones."""
    with_a = Grammar.from_gbnf(schema_to_gbnf({"type": "object", "properties": {"a": {"type": "integer"}},
                                               "maxProperties": 1_500}))
    assert with_a.matches(members(1_500, {"a": 1})) and with_a.matches(members(1_500, {}))
    assert not with_a.matches(members(1_501, {"a": 1})) and not with_a.matches(members(1_501, {}))
    dependent = Grammar.from_gbnf(schema_to_gbnf({"type": "object", "dependencies": {"a": ["b"]},
                                                  "maxProperties": 1_500}))
    assert dependent.matches(members(1_500, {"a": 1, "b": 2})) and dependent.matches(members(1_500, {"b": 2}))
    assert not dependent.matches(members(1_501, {"a": 1, "b": 2})) and not dependent.matches(members(1_500, {"a": 1}))


def test_a_count_that_would_need_too_much_is_refused_at_max_properties() -> None:
    """Four optional properties before up to 22,217 members: neither a state per count nor
    the doubled rules (too many parse stacks) fit, so the schema is refused as too large."""
    schema = {"type": "object", "properties": {"nested": {
        "type": "object", "properties": {k: {} for k in "abcd"}, "maxProperties": 22_217}}}
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(schema)
    assert caught.value.code == SCHEMA_TOO_LARGE and caught.value.pointer == "/properties/nested/maxProperties"


@pytest.mark.parametrize("schema, pointer", [
    ({"type": "object", "minProperties": 2}, "/minProperties"),
    ({"type": "object", "properties": {"a": {}}, "minProperties": 3}, "/minProperties"),
    ({"anyOf": [{"type": "string"}, {"type": "object", "minProperties": 1}, {"type": "object", "minProperties": 2}]},
     "/anyOf/2/minProperties"),
])
def test_more_members_than_can_be_counted_apart_is_refused_where_asked(schema: dict, pointer: str) -> None:
    with pytest.raises(SchemaError) as caught:
        Grammar.from_json_schema(schema)
    assert caught.value.pointer == pointer and "than a grammar can count apart here" in str(caught.value)
    with pytest.warns(SchemaRelaxedWarning, match="minProperties"):
        relaxed = Grammar.from_json_schema(schema, strict=False)
    assert relaxed.matches('{"a":1,"b":2,"c":3}') and not relaxed.matches("{}")


def test_an_object_that_cannot_exist_is_still_no_value() -> None:
    schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": False, "minProperties": 2}
    with pytest.raises(SchemaError, match="accepts no JSON value"):
        Grammar.from_json_schema(schema)


@pytest.mark.parametrize("keyword", ["minProperties", "maxProperties"])
def test_a_member_count_past_two_to_the_64_is_refused_where_it_is_written(keyword: str) -> None:
    schema = {"type": "object", "properties": {"o": {"type": "object", keyword: 1e30}}}
    with pytest.raises(SchemaError, match="past 2\\*\\*64") as caught:
        schema_to_gbnf(schema)
    assert caught.value.code == SCHEMA_TOO_LARGE and caught.value.pointer == f"/properties/o/{keyword}"
