"""Bounded conversion: nesting (S101), size (S102) and time (S103) limits, and work that stays
linear in the size of an ``enum``, a ``oneOf`` or a list of properties."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structspec.jsonschema.builder as builder_module
from structspec.budget import MAX_NESTING
from structspec.errors import SCHEMA_TIMEOUT, SCHEMA_TOO_DEEP, SCHEMA_TOO_LARGE, SchemaError, SchemaRelaxedWarning
from structspec.grammar import Grammar
from structspec.jsonschema import schema_to_gbnf
from structspec.jsonschema.expand import Expander
from structspec.jsonschema.limits import schema_depth
from structspec.jsonschema.values import enum_keys, fast_validator_class, value_key


def objects(levels: int, leaf: Any = None) -> dict[str, Any]:
    schema: Any = leaf if leaf is not None else {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def wrapped(levels: int, wrap: Callable[[Any], Any]) -> Any:
    schema: Any = {"type": "integer"}
    for _ in range(levels):
        schema = wrap(schema)
    return schema


def ref_chain(hops: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}], "minimum": 0} for i in range(hops)}
    defs[f"d{hops}"] = {"type": "integer"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def deep_value(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


DEEP = {
    "objects": objects(300),
    "arrays": wrapped(300, lambda s: {"type": "array", "items": s}),
    "allOf": wrapped(300, lambda s: {"allOf": [s]}),
    "anyOf": wrapped(300, lambda s: {"anyOf": [s, {"type": "null"}]}),
    "not": wrapped(300, lambda s: {"not": s}),
    "prefixItems": wrapped(300, lambda s: {"type": "array", "prefixItems": [s]}),
    "$ref chain": ref_chain(300),
    "enum value": {"enum": [deep_value(300)]},
    "const value": {"const": {"a": deep_value(300)}},
    "unknown keyword": {"x-note": deep_value(5000)},
}


@pytest.mark.parametrize("name", list(DEEP))
def test_deep_schemas_are_refused_with_a_pointer(name: str) -> None:
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(DEEP[name])
    assert caught.value.code == SCHEMA_TOO_DEEP
    assert f"deeper than {MAX_NESTING} levels" in caught.value.message
    node = DEEP[name]  # the pointer leads into the schema, down to where the limit was passed
    for token in caught.value.pointer.split("/")[1:]:
        node = node[int(token) if isinstance(node, list) else token]
    if name != "$ref chain":
        assert caught.value.pointer.count("/") >= MAX_NESTING // 2


def test_deep_json_text_is_refused() -> None:
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf('{"enum": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    assert caught.value.code == SCHEMA_TOO_DEEP


def test_nesting_up_to_the_limit_converts() -> None:
    # objects(n) is n + 1 levels: the root object and the integer at the bottom
    grammar = Grammar.from_json_schema(objects(MAX_NESTING - 1))
    document = "1"
    for _ in range(MAX_NESTING - 1):
        document = '{"a":' + document + "}"
    assert grammar.matches(document)
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(objects(MAX_NESTING))
    assert caught.value.code == SCHEMA_TOO_DEEP
    assert caught.value.pointer == "/properties/a" * MAX_NESTING


def test_each_ref_followed_is_a_level() -> None:
    schema_to_gbnf(ref_chain(MAX_NESTING // 2 - 2))  # each hop: the $ref and the allOf below it
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(ref_chain(MAX_NESTING))
    assert caught.value.code == SCHEMA_TOO_DEEP and caught.value.keyword == ""
    recursive = {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"}
    assert Grammar.from_json_schema(recursive).matches("[" * 200 + "]" * 200)  # recursion is not nesting


def test_schema_depth_counts_each_subschema_once() -> None:
    assert schema_depth(objects(5)) == (6, "/properties/a" * 5)
    assert schema_depth({"allOf": [{"anyOf": [True]}]}) == (3, "/allOf/0/anyOf/0")
    assert schema_depth({"enum": [[["x"]]]}) == (3, "/enum/0/0")  # values count by their own nesting
    assert schema_depth({"enum": ["x"], "required": ["a"]}) == (1, "")
    assert schema_depth({"type": "string"}) == (1, "")
    assert schema_depth(objects(200), limit=10) == (11, "/properties/a" * 10)


def test_non_json_values_are_refused() -> None:
    with pytest.raises(SchemaError, match="not a JSON value: a set") as caught:
        schema_to_gbnf({"enum": [{1, 2}]})
    assert caught.value.pointer == "/enum/0"


def test_time_budget() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 3} for i in range(50)}}
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(schema, time_limit=0)
    assert caught.value.code == SCHEMA_TIMEOUT and "time budget of 0 s" in caught.value.message
    assert schema_to_gbnf(schema, time_limit=None) == schema_to_gbnf(schema)


def test_size_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 3} for i in range(50)}}
    monkeypatch.setattr(builder_module, "MAX_RULES", 20)
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(schema)
    assert caught.value.code == SCHEMA_TOO_LARGE and "more than 20 rules" in caught.value.message
    monkeypatch.setattr(builder_module, "MAX_RULES", 50_000)
    monkeypatch.setattr(builder_module, "MAX_GRAMMAR_BYTES", 1000)
    with pytest.raises(SchemaError) as caught:
        schema_to_gbnf(schema)
    assert caught.value.code == SCHEMA_TOO_LARGE


@pytest.mark.parametrize("command", ["convert", "extract"])
def test_cli_reports_the_code(command: str, tmp_path: Any) -> None:
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(wrapped(300, lambda s: {"type": "array", "items": s})))
    (tmp_path / "text.txt").write_text("some text")
    args = [str(path)] if command == "convert" else ["--schema", str(path), "--text", str(tmp_path / "text.txt")]
    done = subprocess.run([sys.executable, "-m", "structspec.cli", command, *args], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 2  # a RecursionError traceback and exit status 1 before
    assert "S101" in done.stderr and "Traceback" not in done.stderr


# -- linear work --------------------------------------------------------------------------------


@pytest.fixture
def equal_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts ``jsonschema``'s pairwise value comparisons (what made large enums quadratic)."""
    calls = [0]
    original = jsonschema._utils.equal

    def counting(one: Any, two: Any) -> bool:
        calls[0] += 1
        return original(one, two)

    monkeypatch.setattr(jsonschema._utils, "equal", counting)
    monkeypatch.setattr(jsonschema._keywords, "equal", counting)
    return calls


@pytest.mark.parametrize(
    ("schema", "last"),
    [
        ({"enum": [f"v{i}" for i in range(3000)]}, "v2999"),
        ({"type": "string", "minLength": 2, "allOf": [{"enum": [f"v{i}" for i in range(3000)]}]}, "v2999"),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "enum": [i if i % 2 else str(i) for i in range(3000)]},
         2999),
        ({"allOf": [{"enum": list(range(3000))}, {"enum": list(range(0, 3000, 2))}]}, 2998),
    ],
)
def test_enum_conversion_compares_values_linearly(schema: dict[str, Any], last: Any, equal_calls: list[int]) -> None:
    grammar = Grammar.from_gbnf(schema_to_gbnf(schema))
    assert equal_calls[0] < 3000  # each value against each other one: 4.5 million before
    assert grammar.matches(json.dumps(last)) and not grammar.matches(json.dumps(3001))


def test_one_of_constants_needs_no_pairwise_proofs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]
    original = Expander.disjoint

    def counting(self: Expander, left: Any, right: Any) -> bool:
        calls[0] += 1
        return original(self, left, right)

    monkeypatch.setattr(Expander, "disjoint", counting)
    grammar = Grammar.from_json_schema({"oneOf": [{"const": i} for i in range(250)]})
    assert calls[0] == 0 and grammar.matches("249") and not grammar.matches("250")


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"oneOf": [{"const": 1}, {"const": 1}, {"const": 2}]}, ["2"], ["1", "3"]),
        ({"oneOf": [{"const": "a"}, {"type": "string", "maxLength": 1}]}, ['"b"', '""'], ['"a"', '"bb"', "1"]),
        ({"oneOf": [{"enum": [1, "x"]}, {"enum": [1.0, "y"]}]}, ['"x"', '"y"'], ["1", "1.0"]),
        ({"oneOf": [{"enum": [1, 2]}, {"enum": [2, 3]}, {"type": "integer", "minimum": 3}]}, ["1", "4"], ["2", "3"]),
    ],
)
def test_one_of_with_listed_values_stays_exact(schema: dict[str, Any], good: list[str], bad: list[str]) -> None:
    grammar = Grammar.from_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for text in good:
        assert grammar.matches(text) and validator.is_valid(json.loads(text)), text
    for text in bad:
        assert not grammar.matches(text) and not validator.is_valid(json.loads(text)), text


def test_rendering_checks_each_rule_a_bounded_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = [0]
    original = builder_module.productive

    def counting(expr: Any, alive: set[str]) -> bool:
        calls[0] += 1
        return original(expr, alive)

    monkeypatch.setattr(builder_module, "productive", counting)
    count = 600
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(count)}}
    grammar = Grammar.from_json_schema(schema)
    assert grammar.matches('{"p3":1,"p599":2}')
    assert calls[0] < 20 * count  # rules times chain length (hundreds of thousands) before


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, -1.0, 2.5]) | st.sampled_from("ab"),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xy"), inner, max_size=2),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(JSON, JSON)
def test_value_key_is_jsonschema_equality(one: Any, two: Any) -> None:
    assert (value_key(one) == value_key(two)) == jsonschema._utils.equal(one, two)


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON, max_size=6), JSON)
def test_fast_enum_agrees_with_jsonschema(enum: list[Any], instance: Any) -> None:
    schema = {"enum": enum}
    fast = fast_validator_class(jsonschema.Draft202012Validator)(schema)
    expected = jsonschema.Draft202012Validator(schema).is_valid(instance)
    assert fast.is_valid(instance) == expected  # outside a conversion: jsonschema's own check
    with enum_keys() as keys:
        assert fast.is_valid(instance) == expected  # inside: the set lookup
        assert id(enum) in keys._sets  # the set lookup was used


def test_contains_counts_too_large_are_approximated_without_building_them() -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}, "minContains": 2,
              "maxItems": 2**31}  # (counts) x (lengths) states: two billion, built one by one before
    with pytest.raises(SchemaError, match="contains counts too large"):
        schema_to_gbnf(schema)
    with pytest.warns(SchemaRelaxedWarning, match="contains counts too large"):
        grammar = Grammar.from_gbnf(schema_to_gbnf(schema, strict=False, time_limit=5))
    assert grammar.matches("[1,1]") and grammar.matches("[7]")  # approximated: contains dropped


# -- found by tools/fuzz.py -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "integer", "minimum": 10**308}, [str(10**308), str(10**308 + 1)], [str(10**308 - 1), "0"]),
        ({"type": "integer", "minimum": -(10**300), "maximum": 10**300 - 7},
         [str(-(10**300)), "0", str(10**300 - 7)], [str(-(10**300) - 1), str(10**300 - 6)]),
    ],
)
def test_integer_bounds_with_hundreds_of_digits(schema: dict[str, Any], good: list[str], bad: list[str]) -> None:
    grammar = Grammar.from_json_schema(schema)  # a RecursionError before: one nesting level per digit
    assert all(grammar.matches(text) for text in good)
    assert not any(grammar.matches(text) for text in bad)


def test_bound_past_the_largest_double() -> None:
    schema = {"type": "number", "exclusiveMinimum": 1.7976931348623157e308}
    with pytest.raises(SchemaError, match="beyond the range of doubles"):  # was OverflowError
        schema_to_gbnf(schema)


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"type": "object", "properties": {"a": {}}, "patternProperties": {"(" * 3000 + "a" + ")" * 3000: {}}},
         "/patternProperties"),
        ({"type": "string", "not": {"pattern": "?a"}}, "/not/pattern"),
    ],
)
def test_unusable_patterns_are_schema_errors(schema: dict[str, Any], pointer: str) -> None:
    with pytest.raises(SchemaError) as caught:  # RecursionError from re, RegexError before
        schema_to_gbnf(schema)
    assert caught.value.pointer.startswith(pointer)
    with pytest.warns(SchemaRelaxedWarning):
        schema_to_gbnf(schema, strict=False)


def test_values_checked_against_a_pattern_python_cannot_compile() -> None:
    """An enum's values are checked with ``jsonschema`` against the sibling ``pattern``, whose
    repetition count Python's ``re`` cannot hold (an OverflowError traceback before)."""
    count = "1" * 40
    schema = {"type": "array", "items": {"allOf": [{"pattern": f"a{{0{count},00}}b"}, {"enum": ["ab", 1]}]}}
    for strict in (True, False):
        with pytest.raises(SchemaError, match="cannot check values") as caught:
            schema_to_gbnf(schema, strict=strict)
        assert caught.value.pointer.startswith("/items")


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_not_json(number: float) -> None:
    schema = {"type": "array", "items": {"not": {"type": "integer", "minimum": number}}}
    with pytest.raises(SchemaError, match="not a JSON value") as caught:  # OverflowError, ValueError before
        schema_to_gbnf(schema)
    assert caught.value.pointer == "/items/not/minimum"
    with pytest.raises(SchemaError, match="not a JSON value"):
        schema_to_gbnf('{"minimum": NaN}')  # Python's json reads it


def test_a_huge_length_bound_beside_a_pattern_is_refused_not_expanded() -> None:
    """``minLength`` of a billion beside an (unanchored) pattern needs one automaton state per
    length: refused at the pattern's pointer in strict mode (it used to build the states, a
    hang found by tools/fuzz.py), approximated by the plain length bound otherwise."""
    schema = {"type": "string", "minLength": 1_018_598_202, "pattern": "ab|cd"}
    with pytest.raises(SchemaError, match="needs more than") as caught:
        schema_to_gbnf(schema)
    assert caught.value.pointer == "/pattern"
    with pytest.warns(SchemaRelaxedWarning):
        assert "{1018598202,}" in schema_to_gbnf(schema, strict=False)


def test_length_bounds_no_pattern_string_meets_make_no_string() -> None:
    """An anchored pattern whose strings are all shorter than ``minLength`` (or longer than
    ``maxLength``) allows no string, whatever the bound's size."""
    for bounds in ({"minLength": 10**9}, {"minLength": 5}, {"maxLength": 1}):
        schema = {"type": ["string", "integer"], "pattern": "^ab$", **bounds}
        grammar = Grammar.from_gbnf(schema_to_gbnf(schema))
        assert grammar.matches("12") and not grammar.matches('"ab"')


@settings(max_examples=40, deadline=None)
@given(low=st.integers(0, 1), high=st.integers(1, 5), size=st.integers(0, 7))
def test_undeclared_members_up_to_max_properties_match_jsonschema(low: int, high: int, size: int) -> None:
    """An object of undeclared members only, between ``minProperties`` (0 or 1) and
    ``maxProperties``: the grammar accepts an object of distinct keys exactly when jsonschema
    does."""
    schema = {"type": "object", "minProperties": low, "maxProperties": high}
    grammar = Grammar.from_gbnf(schema_to_gbnf(schema))
    instance = {f"k{i}": i for i in range(size)}
    assert grammar.matches(json.dumps(instance, separators=(",", ":"))) == jsonschema.Draft202012Validator(
        schema).is_valid(instance)


def test_a_huge_max_properties_compiles_as_a_counted_repetition() -> None:
    """``maxProperties`` of 48,175 (found by tools/fuzz.py, which gave up on it after a minute):
    the members are counted repetitions of blocks (``ir/counted.py``), not a chain of 48,175
    optional links."""
    text = schema_to_gbnf({"maxProperties": 48_175})
    assert text.count("::=") < 30 and len(text) < 2_000
    grammar = Grammar.from_gbnf(text)
    members = ",".join(f'"k{i}":{i}' for i in range(300))
    assert grammar.matches("{" + members + "}") and grammar.matches("{}") and grammar.matches("7")


@pytest.mark.parametrize("keyword, kind", [("minLength", "string"), ("maxLength", "string"),
                                           ("minItems", "array"), ("maxItems", "array")])
@pytest.mark.parametrize("strict", [True, False])
def test_a_count_past_two_to_the_64_is_refused_where_it_stands(keyword: str, kind: str, strict: bool) -> None:
    schema = {"type": "object", "properties": {"v": {"type": kind, keyword: 2**64 + 1}}}
    with pytest.raises(SchemaError) as caught:
        Grammar.from_json_schema(schema, strict=strict)
    assert caught.value.pointer == f"/properties/v/{keyword}" and caught.value.code == SCHEMA_TOO_LARGE
    with pytest.raises(SchemaError):  # a 300-digit count: no float overflow, no recursion through its digits
        Grammar.from_json_schema({"type": kind, keyword: int("9" * 300)}, strict=strict)


@pytest.mark.parametrize("keyword, kind", [("maxLength", "string"), ("maxItems", "array")])
def test_a_count_of_two_to_the_64_still_compiles_exactly(keyword: str, kind: str) -> None:
    grammar = Grammar.from_json_schema({"type": kind, keyword: 2**64})
    text = '"abc"' if kind == "string" else "[1,2]"
    assert grammar.matches(text) and not grammar.matches(text[:-1])
