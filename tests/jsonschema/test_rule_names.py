"""A schema's definitions may bear the names of the converter's own rules (``escape``,
``string``, ``integer``...): each keeps its own meaning."""

from __future__ import annotations

import json

import jsonschema
import pytest

from structspec.grammar import Grammar
from structspec.jsonschema import schema_to_gbnf

# Properties that use every shared rule of the converter: free strings and values, integers,
# numbers, escapes in a constrained string, a format.
USERS = {
    "s": {"type": "string"},
    "n": {"type": "integer"},
    "x": {"type": "number"},
    "v": {},
    "p": {"type": "string", "pattern": "^[^x]*$"},
    "d": {"type": "string", "format": "date"},
}
INSTANCES = [
    {"a": 1}, {"a": "1"}, {"a": [1]}, {"a": {}},
    {"s": "a\\nb"}, {"s": 5}, {"n": 12}, {"n": "12"}, {"n": 1.5}, {"x": 1.5}, {"x": "x"},
    {"v": "t"}, {"v": [1, {"k": None}]}, {"p": "a\nb"}, {"p": "ax"}, {"p": 3},
    {"d": "2024-02-29"}, {"d": "2024-02-30x"}, {"d": 1},
]


@pytest.mark.parametrize("name", ["escape", "char", "string", "integer", "number", "value", "object",
                                  "array", "ws", "date-format", "root"])
@pytest.mark.parametrize("kind", ["integer", "string", "array", "object"])
def test_definitions_named_like_shared_rules_keep_their_meaning(name: str, kind: str) -> None:
    schema = {"$defs": {name: {"type": kind}}, "type": "object",
              "properties": {"a": {"$ref": f"#/$defs/{name}"}, **USERS}, "additionalProperties": False}
    grammar = Grammar.from_gbnf(schema_to_gbnf(schema))
    judge = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for instance in INSTANCES:
        text = json.dumps(instance, separators=(",", ":"))
        assert grammar.matches(text) == judge.is_valid(instance), text
