"""JSON Schema to GBNF: output shape, errors, and acceptance checked against ``jsonschema``."""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import subprocess
import sys
import warnings
from decimal import Decimal
from fractions import Fraction

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structspec.errors import SCHEMA_INVALID, SCHEMA_UNSUPPORTED, SchemaError, SchemaRelaxedWarning
from structspec.grammar import Grammar
from structspec.ir.expr import Ref
from structspec.ir.printer import format_rule
from structspec.jsonschema import schema_to_gbnf
from structspec.jsonschema.builder import GrammarBuilder, counted
from structspec.jsonschema.formats import FORMATS


def compile_schema(schema: object, **options: object) -> Grammar:
    return Grammar.from_gbnf(schema_to_gbnf(schema, **options))  # type: ignore[arg-type]


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def referee(schema: object) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def assert_agrees(schema: object, values: list[object]) -> None:
    """Grammar verdict on the compact text equals ``jsonschema``'s verdict."""
    grammar, judge = compile_schema(schema), referee(schema)
    for value in values:
        assert grammar.matches(compact(value)) == judge.is_valid(value), value


# -- shape ------------------------------------------------------------------------------------


def test_rule_names_follow_schema_paths() -> None:
    schema = {
        "type": "object",
        "properties": {
            "address": {
                "type": "object",
                "properties": {"street": {"type": "string", "maxLength": 40}},
                "required": ["street"],
                "additionalProperties": False,
            },
            "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
        },
        "required": ["address"],
        "additionalProperties": False,
        "$defs": {"Tag": {"type": "string", "pattern": "^[a-z]+$"}},
    }
    text = schema_to_gbnf(schema)
    names = re.findall(r"^([\w-]+) ::=", text, re.M)
    assert names[0] == "root"
    assert {"root-address", "root-address-street", "root-tags", "Tag"} <= set(names)
    grammar = Grammar.from_gbnf(text)
    assert grammar.matches('{"address":{"street":"Main"},"tags":["a","bc"]}')
    assert not grammar.matches('{"address":{"street":"Main"},"tags":["A"]}')


def test_recursion_of_any_depth_without_left_recursion() -> None:
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
                },
                "required": ["value", "next"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    }
    grammar = compile_schema(schema)
    deep: object = None
    for i in range(60):
        deep = {"value": i, "next": deep}
    assert grammar.matches(compact(deep))
    assert not grammar.matches(compact({"value": 1, "next": {"value": "x", "next": None}}))


def test_draft4_root_id_names_the_document() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "id": "http://example.com/tree.json#",
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "kids": {"type": "array", "items": {"$ref": "http://example.com/tree.json#"}},
        },
    }
    assert_agrees(schema, [{"n": 1, "kids": [{"n": 2, "kids": []}]}, {"kids": [{"n": "x"}]}, {"kids": [1]}])


def test_optional_properties_any_subset_in_schema_order() -> None:
    props = {name: {"type": "integer"} for name in "abcd"}
    schema = {"type": "object", "properties": props, "required": ["c"], "additionalProperties": False}
    grammar = compile_schema(schema)
    for mask in range(16):
        chosen = [n for i, n in enumerate("abcd") if mask >> i & 1]
        text = compact({n: 1 for n in chosen})
        assert grammar.matches(text) == ("c" in chosen), text
    assert not grammar.matches('{"c":1,}') and not grammar.matches('{,"c":1}')
    assert not grammar.matches('{"d":1,"c":1}')  # schema order


def test_required_properties_may_come_first_in_required_order() -> None:
    props = {name: {"type": "integer"} for name in "abcd"}
    schema = {"type": "object", "properties": props, "required": ["d", "b"], "additionalProperties": False}
    grammar, judge = compile_schema(schema), referee(schema)
    accepted = set()
    for size in range(5):
        for names in itertools.permutations("abcd", size):
            text = compact({n: 1 for n in names})
            if grammar.matches(text):
                assert judge.is_valid(json.loads(text)), text
                accepted.add(names)
    assert ("b", "d") in accepted and ("a", "b", "c", "d") in accepted  # schema order
    assert ("d", "b") in accepted and ("d", "b", "a", "c") in accepted  # required first
    assert ("b", "d", "a") not in accepted and ("d", "a", "b") not in accepted
    assert not grammar.matches('{"d":1,"b":1,"d":2}')


def test_flexible_whitespace_is_bounded() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    value = {"a": [1, 2, 3]}
    flexible = compile_schema(schema, whitespace="flexible")
    assert flexible.matches(json.dumps(value, indent=2)) and flexible.matches(json.dumps(value))
    assert not flexible.matches('{"a": [1,' + " " * 3 + "2]}")
    assert not compile_schema(schema).matches(json.dumps(value))


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "pointer", "keyword"),
    [
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "/uniqueItems", "uniqueItems"),
        ({"properties": {"a": {"$ref": "https://example.com/x.json"}}}, "/properties/a/$ref", "$ref"),
        (
            {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}, "$ref": "#/$defs/a"},
            "/$defs/a/anyOf/0",
            "$ref",
        ),
        ({"type": "string", "pattern": "(a)\\1"}, "/pattern", "pattern"),
        ({"type": "string", "format": "regex"}, "/format", "format"),
        ({"not": {"multipleOf": 3}}, "/not/multipleOf", "not"),
    ],
)
def test_strict_refuses_with_pointer_and_keyword(schema: dict, pointer: str, keyword: str) -> None:
    with pytest.raises(SchemaError) as info:
        schema_to_gbnf(schema)
    assert (info.value.pointer, info.value.keyword) == (pointer, keyword)


def test_non_strict_warns_once_listing_every_relaxation() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "ip": {"type": "string", "format": "regex"},
        },
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = schema_to_gbnf(schema, strict=False)
    relaxed = [w for w in caught if issubclass(w.category, SchemaRelaxedWarning)]
    assert len(relaxed) == 1
    message = str(relaxed[0].message)
    assert "#/properties/tags/uniqueItems (uniqueItems)" in message
    assert "#/properties/ip/format (format)" in message
    assert [(p, k) for p, k, _ in relaxed[0].message.relaxed] == [
        ("/properties/tags/uniqueItems", "uniqueItems"),
        ("/properties/ip/format", "format"),
    ]
    assert Grammar.from_gbnf(text).matches('{"tags":["a","a"]}')


def test_bad_input_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="not valid JSON"):
        schema_to_gbnf("{nope")
    with pytest.raises(SchemaError, match="accepts no JSON value"):
        schema_to_gbnf({"not": {}})
    with pytest.raises(ValueError, match="whitespace"):
        schema_to_gbnf({}, whitespace="loose")


# -- strings -----------------------------------------------------------------------------------


def test_string_escapes_surrogates_and_length_counting() -> None:
    grammar = compile_schema({"type": "string", "minLength": 2, "maxLength": 2})
    for text, ok in [
        ('"ab"', True),
        ('"a\\n"', True),
        ('"\\u00e9x"', True),
        ('"\\ud83d\\ude00a"', True),
        ('"\\ud83d\\ude00"', False),
        ('"\\ud83d"', False),
        ('"a"', False),
        ('"abc"', False),
        ('"a\nb"', False),
        ('"\\x41b"', False),
        ('"\\/\\/"', True),
    ]:
        assert grammar.matches(text) == ok, text
        if ok:
            assert jsonschema.validate(json.loads(text), {"minLength": 2, "maxLength": 2}) is None


def test_duplicate_keys_cannot_override_declared_values() -> None:
    grammar = compile_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert grammar.matches('{"a":1,"b":"x"}')
    assert not grammar.matches('{"a":1,"a":"x"}')
    assert not grammar.matches('{"b":"x","a":"x"}')
    assert grammar.matches('{"ab":"x"}') and grammar.matches('{"":"x"}')


def test_pattern_properties_partition_names() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "patternProperties": {"^x-": {"type": "string"}, "n$": {"type": "boolean"}},
        "additionalProperties": False,
    }
    assert_agrees(
        schema,
        [
            {"id": 1},
            {"x-a": "s"},
            {"x-a": 1},
            {"yn": True},
            {"x-n": True},
            {"x-n": "s"},
            {"other": 1},
            {"id": 1, "x-b": "t", "on": False},
        ],
    )


def test_pattern_lengths_and_exclusions_are_exact() -> None:
    schema = {
        "type": "string",
        "pattern": "^[a-z]+[0-9]*$",
        "maxLength": 4,
        "not": {"enum": ["abc"]},
        "allOf": [{"pattern": "b"}],
    }
    values = ["ab", "abc", "abcd", "ab12", "b", "abcde", "a1", "bb9", "zb"]
    assert_agrees(schema, values)


# -- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bounds",
    [
        {"minimum": -17, "maximum": 123},
        {"exclusiveMinimum": -1000, "exclusiveMaximum": 0},
        {"minimum": 2.5},
        {"maximum": -0.5, "multipleOf": 3},
        {"minimum": 10**25, "maximum": 10**25 + 7},
    ],
)
def test_integer_bounds_are_exact(bounds: dict) -> None:
    schema = {"type": "integer", **bounds}
    grammar, judge = compile_schema(schema), referee(schema)
    low = bounds.get("minimum", -2000) if bounds.get("minimum", 0) > 10**20 else -2000
    for value in list(range(-1100, 1100)) + [low + d for d in range(-3, 12)]:
        assert grammar.matches(str(value)) == judge.is_valid(value), value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.decimals(min_value=Decimal(-3), max_value=Decimal(3), places=6))
def test_number_bounds_are_sound_under_float_rounding(value: Decimal) -> None:
    schema = {"type": "number", "minimum": -1.5, "exclusiveMaximum": 0.1}
    grammar, judge = _number_grammar(), referee(schema)
    for text in (str(value), f"{value}0000000000001", f"{value}9999999999999"):
        if grammar.matches(text):
            assert judge.is_valid(json.loads(text)), text
    assert grammar.matches(str(value)) == judge.is_valid(float(value)) or "E" in str(value)


_NUMBER: list[Grammar] = []


def _number_grammar() -> Grammar:
    if not _NUMBER:
        _NUMBER.append(compile_schema({"type": "number", "minimum": -1.5, "exclusiveMaximum": 0.1}))
    return _NUMBER[0]


_DIVISORS = (0.01, 0.1, 0.05, 0.3, 2.5, 1.5, 1e-4, 1e-8)


@functools.cache
def _multiple_grammar(divisor: float) -> Grammar:
    return compile_schema({"type": "number", "multipleOf": divisor, "minimum": -(10**17)})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(_DIVISORS),
    st.one_of(st.integers(-(10**17), 10**17), st.integers(-3000, 3000), st.just(2**53), st.just(2**53 + 1)),
)
def test_unbounded_fractional_multiple_of_keeps_integer_multiples(divisor: float, value: int) -> None:
    schema = {"type": "number", "multipleOf": divisor, "minimum": -(10**17)}
    grammar = _multiple_grammar(divisor)
    if grammar.matches(str(value)):
        assert referee(schema).is_valid(value), value
    step = Fraction(Decimal(repr(divisor)))
    if value % step.numerator == 0 and (abs(value) <= 2**53 or step < 1):
        assert grammar.matches(str(value)), value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_DIVISORS), st.integers(-1000, 1000))
def test_unbounded_fractional_multiple_of_lists_the_multiples_nearest_zero(divisor: float, k: int) -> None:
    """Near zero every multiple ``jsonschema`` accepts is spelled (``4.5`` under ``1.5``,
    ``0.0075`` under ``0.0001``), in plain decimal notation."""
    schema = {"type": "number", "multipleOf": divisor, "minimum": -(10**17)}
    value = float(k * Fraction(Decimal(repr(divisor))))
    text = format(Decimal(repr(value)), "f")
    accepted = _multiple_grammar(divisor).matches(text)
    valid = referee(schema).is_valid(value)
    assert accepted <= valid and (accepted or not valid or value.is_integer()), text


def test_one_number_schema_under_many_properties_emits_its_rules_once() -> None:
    """The listed multiples of ``0.01`` become rules once per conversion, which every property
    holding the schema refers to; each property still accepts exactly what ``jsonschema`` does."""
    number = {"type": "number", "multipleOf": 0.01, "minimum": 0}
    schema = {"type": "object", "properties": {"a": number, "b": number}, "required": ["a", "b"]}
    text = schema_to_gbnf(schema)
    assert re.search(r"^root-a-frac-1 ::=", text, re.M) and not re.search(r"^root-b-frac", text, re.M)
    grammar = Grammar.from_gbnf(text)
    for a, b in itertools.product(["0.25", "3", "1.07", "0.001", "-1", "2.5"], repeat=2):
        document = f'{{"a":{a},"b":{b}}}'
        assert grammar.matches(document) == referee(schema).is_valid(json.loads(document)), document


def test_multiple_of_with_a_huge_modulus_is_refused_quickly() -> None:
    with pytest.raises(SchemaError) as info:
        schema_to_gbnf({"type": "integer", "multipleOf": 0.123456789})
    assert info.value.keyword == "multipleOf" and info.value.pointer == "/multipleOf"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(_DIVISORS),
    st.one_of(st.integers(-(10**14), 10**14), st.integers(-3000, 3000)),
    st.sampled_from(["0", "5", "25", "75", "125", "99", "07", "1", "50", "250000", "00000001"]),
)
def test_unbounded_fractional_multiple_of_spells_exact_doubles(divisor: float, whole: int, fraction: str) -> None:
    """Fraction spellings are sound, and every multiple of ``1 / 2**a`` in range is spelled
    when the divisor is ``1 / (2**a * 5**b)``: ``x.25`` under ``0.01``, ``x.5`` under ``0.1``."""
    schema = {"type": "number", "multipleOf": divisor, "minimum": -(10**17)}
    grammar = _multiple_grammar(divisor)
    text = f"{whole}.{fraction}"
    if grammar.matches(text):
        assert referee(schema).is_valid(json.loads(text)), text
    step = Fraction(Decimal(repr(divisor)))
    value = whole + Fraction(int(fraction), 10 ** len(fraction)) * (1 if whole >= 0 else -1)
    binary = value.denominator & (value.denominator - 1) == 0
    if step.numerator == 1 and binary and (value / step).denominator == 1 and abs(value / step) < 10**13:
        assert grammar.matches(text), text


def test_fractional_multiple_of_far_from_its_double_is_refused() -> None:
    with pytest.raises(SchemaError) as info:
        schema_to_gbnf({"type": "number", "multipleOf": 0.7})
    assert info.value.keyword == "multipleOf" and info.value.pointer == "/multipleOf"


def test_json_numbers_have_no_leading_zeros() -> None:
    grammar = compile_schema({"type": "number"})
    for text, ok in [
        ("0", True),
        ("-0.5", True),
        ("1e5", True),
        ("1.5E-3", True),
        ("01", False),
        ("1.", False),
        (".5", False),
        ("+1", False),
        ("--1", False),
        ("1e", False),
    ]:
        assert grammar.matches(text) == ok, text


# -- combinators -----------------------------------------------------------------------------------


def test_discriminated_one_of_and_if_then_else() -> None:
    schema = {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                "required": ["kind", "x"],
            },
            {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]},
        ],
        "if": {"properties": {"kind": {"const": "b"}}},
        "then": {"required": ["y"]},
    }
    assert_agrees(
        schema,
        [
            {"kind": "a", "x": 1},
            {"kind": "a"},
            {"kind": "b"},
            {"kind": "b", "y": "s"},
            {"kind": "c", "x": 1},
            {"kind": "a", "x": 1, "y": "s"},
        ],
    )


def test_overlapping_one_of_is_exact() -> None:
    schema = {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 10}]}
    assert_agrees(schema, list(range(-5, 16)))


def test_enum_and_const_of_any_value() -> None:
    schema = {"enum": [1, 'a"b', None, [1, {"k": False}], {"x": 2.5}], "not": {"const": None}}
    assert_agrees(schema, [1, 1.0, 'a"b', None, [1, {"k": False}], {"x": 2.5}, 2, "ab"])


def test_contains_with_counts() -> None:
    schema = {"type": "array", "contains": {"const": 1}, "minContains": 2, "maxContains": 3}
    assert_agrees(schema, [[], [1], [1, 1], [2, 1, 1, 2], [1, 1, 1, 1], [1, 2, 1, 2, 1]])


def test_unique_items_over_a_small_set() -> None:
    schema = {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True}
    assert_agrees(schema, [[], ["a"], ["a", "b"], ["b", "a", "c"], ["a", "a"], ["c", "b", "c"]])


# -- formats ----------------------------------------------------------------------------------------

CHECKED = ["date", "time", "date-time", "uuid", "email", "ipv4", "ipv6", "json-pointer", "relative-json-pointer"]


@pytest.mark.parametrize("name", CHECKED)
def test_format_languages_are_sound(name: str) -> None:
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(re.compile(FORMATS[name]), fullmatch=True))
    def check(text: str) -> None:
        assert checker.conforms(text, name), text

    check()


def test_formats_accept_typical_values() -> None:
    examples = {
        "date": ["2024-02-29", "1999-12-31"],
        "time": ["23:59:59Z", "08:30:00.5+02:00"],
        "date-time": ["2020-01-01T00:00:00Z"],
        "duration": ["P1Y2M", "PT5M", "P3W"],
        "uuid": ["123e4567-e89b-12d3-a456-426614174000"],
        "email": ["a.b@example.com"],
        "hostname": ["www.example.co.uk"],
        "ipv4": ["192.168.0.1"],
        "ipv6": ["::1", "fe80::1:2"],
        "uri": ["https://example.com/a?b=c#d"],
        "uri-reference": ["../a/b"],
    }
    for name, values in examples.items():
        grammar = compile_schema({"type": "string", "format": name})
        for value in values:
            assert grammar.matches(compact(value)), (name, value)
    assert not compile_schema({"format": "date"}).matches('"2023-02-29"')


# -- building blocks ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("low", "high"), [(0, 40), (3, 100), (50, 50), (20, None), (0, 300)])
def test_counted_repetition_keeps_exact_lengths(low: int, high: int | None) -> None:
    builder = GrammarBuilder()
    body = counted(builder, Ref("c"), low, high)
    assert body is not None
    rules = [format_rule("root", body), 'c ::= "a" | "bc"']
    rules += [format_rule(name, expr) for name, expr in builder.rules.items() if expr is not None]
    grammar = Grammar.from_gbnf("\n".join(rules))
    for n in range((high or 60) + 3):
        expected = n >= low and (high is None or n <= high)
        assert grammar.matches("a" * n) == expected, n
        assert grammar.matches("bc" * n) == expected, n


@pytest.mark.parametrize(
    ("schema", "pointer"),
    [
        ({"type": "strin"}, "/type"),
        ({"type": "object", "properties": {"a": {"type": "strin"}}}, "/properties/a/type"),
        ({"type": "string", "minLength": "x"}, "/minLength"),
        ({"properties": 5}, "/properties"),
        ({"properties": {"a/b": {"minimum": "3"}}}, "/properties/a~1b/minimum"),
        ({"$schema": "http://json-schema.org/draft-07/schema#", "required": "name"}, "/required"),
        ({"$schema": 1000, "type": "string"}, "/$schema"),  # found by tools/fuzz.py: an AttributeError in jsonschema
        ({"$schema": ["a"]}, "/$schema"),
    ],
)
@pytest.mark.parametrize("strict", [True, False])
def test_malformed_schemas_are_refused_with_their_pointer(schema: dict, pointer: str, strict: bool) -> None:
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema, strict=strict)
    assert info.value.pointer == pointer
    assert info.value.keyword == pointer.rsplit("/", 1)[-1]
    assert "not a valid schema" in str(info.value) and info.value.code == SCHEMA_INVALID


@pytest.mark.parametrize(
    ("schema", "pointer", "code"),
    [
        ('{"type": "string"', "", SCHEMA_INVALID),  # not JSON
        ({"type": "number", "maximum": float("nan")}, "/maximum", SCHEMA_INVALID),
        ({"properties": {"a": 5}}, "/properties/a", SCHEMA_INVALID),
        ({"$ref": "#/$defs/missing"}, "/$ref", SCHEMA_INVALID),
        ({"$ref": "#nowhere"}, "/$ref", SCHEMA_INVALID),
        ({"type": "string", "x-grounded": "yes"}, "/x-grounded", SCHEMA_INVALID),
        ({"type": "array", "uniqueItems": True}, "/uniqueItems", SCHEMA_UNSUPPORTED),  # valid, not enforceable
        ({"$ref": "https://example.com/elsewhere"}, "/$ref", SCHEMA_UNSUPPORTED),
    ],
)
def test_invalid_schemas_are_told_apart_from_unenforceable_ones(schema: object, pointer: str, code: str) -> None:
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema, source="some text")
    assert (info.value.pointer, info.value.code) == (pointer, code)


def test_an_invalid_pattern_met_while_checking_values_is_a_schema_error() -> None:
    # found by tools/fuzz.py --seed 6: re.error escaped from jsonschema while the converter checked a const
    schema = {"if": {"patternProperties": {"[a": {"const": {}}}}, "then": {"const": {"x": 1}},
              "else": {"type": "number"}}
    with pytest.raises(SchemaError, match="unterminated character set"):
        Grammar.from_json_schema(schema, strict=False)


@pytest.mark.parametrize("dialect", ["http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#",
                                     "https://json-schema.org/draft/2020-12/schema"])
def test_repeated_entries_are_harmless_at_any_depth(dialect: str) -> None:
    schema = {"$schema": dialect, "enum": ["a", "b", "a"]}
    grammar = Grammar.from_json_schema(schema)
    assert grammar.matches('"a"') and grammar.matches('"b"') and not grammar.matches('"c"')
    nested = {"$schema": dialect, "type": "object", "properties": {"x": {"enum": ["a", "b", "a"]}, "y": {
        "type": "object", "required": ["q", "q"], "properties": {"q": {"type": ["string", "string"]}}}}}
    grammar = Grammar.from_json_schema(nested)
    for text in ['{"x":"a"}', '{"x":"c"}', '{"y":{"q":"s"}}', '{"y":{}}', '{"y":{"q":1}}']:
        assert grammar.matches(text) == referee(nested).is_valid(json.loads(text)), text


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"additionalProperties": {"type": "integer"}}},
        {"type": "object", "properties": {"k": {}}, "not": {"additionalProperties": {"type": "integer"}}},
    ],
)
def test_negated_additional_properties_needs_a_last_failing_member(schema: dict) -> None:
    """Some undeclared member must fail the negated schema; a duplicate key after it would
    override its value in the parsed object, so it must be the last undeclared member."""
    grammar = compile_schema(schema)
    for text in ['{"b":1,"a":"x"}', '{"a":1,"a":"x"}']:
        assert grammar.matches(text) and referee(schema).is_valid(json.loads(text)), text
    for text in ["{}", '{"b":1}', '{"a":"x","a":1}']:
        assert not grammar.matches(text) and not referee(schema).is_valid(json.loads(text)), text


def test_conversion_output_does_not_depend_on_string_hashing() -> None:
    """The printed grammar is reproducible: excluded strings are not emitted in set order."""
    schema = {"type": "string", "not": {"enum": ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]}}
    script = f"from structspec.jsonschema import schema_to_gbnf; print(schema_to_gbnf({schema!r}))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True, text=True, check=True,
        ).stdout
        for seed in range(4)
    }
    assert len(outputs) == 1


_SCHEMA_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2), st.sampled_from(["", "a", "string", "#/x", "^a$"])
)
_KEYWORDS = st.sampled_from([
    "type", "properties", "items", "prefixItems", "required", "enum", "const", "minimum", "maxLength", "pattern",
    "anyOf", "allOf", "not", "$ref", "$defs", "additionalProperties", "dependentRequired", "format", "$anchor",
    "definitions", "dependencies", "contains", "minContains", "unevaluatedProperties", "title", "examples", "x-other",
    "$id", "multipleOf", "minItems", "propertyNames", "exclusiveMinimum", "$comment", "deprecated", "id",
])
_SCHEMAS = st.recursive(
    _SCHEMA_LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYWORDS, inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_SCHEMAS)
def test_merged_metaschema_reports_what_the_official_one_does(schema):
    """The one-document 2020-12 metaschema used for speed finds the official one's errors (each
    once: the official one repeats a type error once per vocabulary), repeated items aside: those
    are harmless and deliberately not checked (see ``metaschema_error``)."""
    from structspec.jsonschema.metaschema import _meta_validator

    validator = jsonschema.Draft202012Validator
    official = validator(validator.META_SCHEMA)

    def found(meta):
        errors = (e for e in meta.iter_errors(schema) if e.validator != "uniqueItems")
        return {(tuple(e.path), e.message, e.validator) for e in errors}

    assert found(_meta_validator(validator)) == found(official)


_COMPILED_DRAFTS = [
    jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator, jsonschema.Draft202012Validator,
]


@settings(max_examples=400, deadline=None)
@given(_SCHEMAS, st.sampled_from(_COMPILED_DRAFTS))
def test_compiled_metaschema_check_agrees_with_jsonschema(schema, validator):
    """The metaschema compiled to predicates accepts exactly the schemas ``jsonschema`` finds no
    error in (against the same metaschema), and ``metaschema_error`` reports ``jsonschema``'s."""
    from jsonschema.exceptions import best_match

    from structspec.jsonschema.metaschema import _fast_check, _meta_validator, metaschema_error

    expected = best_match(_meta_validator(validator).iter_errors(schema))
    assert _fast_check(validator)(schema) == (expected is None)
    error = metaschema_error(validator, schema)
    assert (error is None) == (expected is None)
    assert error is None or (error.path, error.message) == (expected.path, expected.message)


def test_compiled_metaschema_check_covers_the_common_drafts():
    from jsonschema.exceptions import best_match

    from structspec.jsonschema.metaschema import _fast_check, _meta_validator

    def metaschema_error(validator, schema):
        return best_match(_meta_validator(validator).iter_errors(schema))

    assert _fast_check(jsonschema.Draft3Validator) is None  # schemas among the types
    assert _fast_check(jsonschema.Draft201909Validator) is None  # references to other documents
    for validator in _COMPILED_DRAFTS:
        check = _fast_check(validator)
        assert check({"type": "object", "properties": {"a": {"minLength": 2}}})
        assert not check({"properties": {"a": {"minLength": -1}}})
        assert not check({"type": "strin"})
        for schema in ({"required": ["a", "a"]}, {"properties": {"a": {"required": ["b", "b"]}}},
                       {"properties": {"a": {"enum": ["b", "b"]}}}):  # repeated items, at any depth
            assert check(schema) and metaschema_error(validator, schema) is None


def _tagged_rule(tag: str, **members: object) -> dict:
    return {
        "type": "object",
        "properties": {"type": {"type": "string", "pattern": f"^{tag}$"}, **members},
        "required": ["type", *members],
    }


_RULE = {"$ref": "#/$defs/rule"}
_TAGGED_UNION = {  # the shape of a tree-sitter grammar: a oneOf of node kinds told apart by "type"
    "type": "object",
    "additionalProperties": _RULE,
    "$defs": {
        "rule": {"oneOf": [
            _tagged_rule("BLANK"),
            _tagged_rule("STRING", value={"type": "string"}),
            _tagged_rule("SEQ", members={"type": "array", "items": _RULE}),
            _tagged_rule("CHOICE", members={"type": "array", "items": _RULE}),
            _tagged_rule("REPEAT", content=_RULE),
            _tagged_rule("TOKEN", content=_RULE),
            _tagged_rule("FIELD", name={"type": "string"}, content=_RULE),
        ]},
    },
}


def test_conversion_work_does_not_depend_on_string_hashing() -> None:
    """Proving ``oneOf`` branches disjoint tries required members in schema order: the
    discriminator settles it, where a set order sometimes compared the recursive members first
    and multiplied the work about a hundredfold (seconds instead of milliseconds)."""
    script = (
        "import json, sys\n"
        "from structspec.jsonschema import expand, schema_to_gbnf\n"
        "calls = []\n"
        "original = expand.Expander.expand\n"
        "expand.Expander.expand = lambda self, *a, **k: calls.append(1) or original(self, *a, **k)\n"
        "schema_to_gbnf(json.loads(sys.argv[1]))\n"
        "print(len(calls))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script, json.dumps(_TAGGED_UNION)],
            env={**os.environ, "PYTHONHASHSEED": str(seed)}, capture_output=True, text=True, check=True,
        ).stdout
        for seed in range(4)
    }
    assert len(outputs) == 1, outputs
    grammar, judge = compile_schema(_TAGGED_UNION), referee(_TAGGED_UNION)
    for value in [
        {"a": {"type": "SEQ", "members": [{"type": "BLANK"}, {"type": "STRING", "value": "x"}]}},
        {"a": {"type": "FIELD", "name": "n", "content": {"type": "REPEAT", "content": {"type": "BLANK"}}}},
        {"a": {"type": "SEQ", "members": [{"type": "STRING"}]}},
        {"a": {"type": "REPEAT", "content": {"type": "LOOP"}}},
    ]:
        assert grammar.matches(json.dumps(value, separators=(",", ":"))) == judge.is_valid(value), value


def test_a_node_means_its_assertions_not_its_annotations() -> None:
    from structspec.jsonschema.convert import Converter
    from structspec.jsonschema.resolve import Loc

    nodes = [
        {"type": "number", "multipleOf": 0.01, "title": "A", "description": "first"},
        {"type": "number", "multipleOf": 0.01, "title": "B", "examples": [1.5]},
        {"type": "number", "multipleOf": 0.05},
        {"$ref": "#/$defs/x", "type": "number", "multipleOf": 0.01},
        {"$ref": "#/$defs/x", "type": "number", "multipleOf": 0.01},
    ]
    converter = Converter({"$defs": {"x": {}}})
    keys = [converter.meaning(Loc(node, f"/{i}", "")) for i, node in enumerate(nodes)]
    assert keys[0] == keys[1]  # titles, descriptions and examples aside, the same check
    assert keys[2] != keys[0]
    assert keys[3] != keys[4]  # a reference: each node stands for itself


CENTS = {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 5}
REPEATED_CENTS = {
    "type": "object",
    "properties": {key: {**CENTS, "title": key.upper()} for key in "abc"},
    "additionalProperties": False,
}


@functools.cache
def repeated_cents_grammar() -> Grammar:
    return compile_schema(REPEATED_CENTS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(-50, 700), st.sampled_from(["a", "b", "c"]))
def test_a_number_schema_repeated_under_many_properties_is_exact_under_each(cents: int, key: str) -> None:
    """The multiples listed once for the three properties (titles aside, one schema) are
    exact under every one of them: each value's shortest spelling is accepted exactly when
    ``jsonschema`` accepts the value, and a spelling off the grid never is."""
    value = cents / 100
    shortest = str(cents // 100) if cents % 100 == 0 else format(Decimal(repr(value)), "f")
    document = f'{{"{key}":{shortest}}}'
    assert repeated_cents_grammar().matches(document) == referee(REPEATED_CENTS).is_valid(json.loads(document))
    assert not repeated_cents_grammar().matches(f'{{"{key}":{value + 0.001:.3f}}}')
