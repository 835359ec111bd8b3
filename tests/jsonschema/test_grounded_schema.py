"""Grounded strings in JSON Schema: a string marked ``"x-grounded": true`` (or, with
``grounded=True``, every plain string) accepts exactly the spans of the source text that the
string's other keywords allow: ``minLength``/``maxLength``, ``pattern``, ``format``, ``enum`` and exclusions; one
rule per narrowing, one suffix automaton per text; what cannot be exact is refused by pointer."""

from __future__ import annotations

import json
import random
from typing import Annotated

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

import structspec
from structspec import Grammar, SchemaError
from structspec.jsonschema import Grounding, convert_schema
from structspec.jsonschema import grounding as grounding_module
from structspec.models.prompt import extraction_messages

TEXT = 'Invoice INV-2024-0417 from Zoë "Z" Müller <zoe@example.com>\nTotal: €1,250.00\t(paid) 😀'


def _doc(**values: object) -> str:
    return json.dumps(values, ensure_ascii=False, separators=(",", ":"))


def _object(**properties: dict) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _substrings(text: str) -> set[str]:
    return {text[i:j] for i in range(len(text) + 1) for j in range(i, len(text) + 1)}


def test_a_marked_string_accepts_exactly_the_spans() -> None:
    g = Grammar.from_json_schema(_object(name={"type": "string", "x-grounded": True}), source=TEXT)
    for value in ('Zoë "Z" Müller', "Total: €1,250.00\t(paid)", "", "😀", "\n", TEXT):
        assert g.matches(_doc(name=value)), value
    for value in ("Zoe Müller", "Total: €1,250.00 (paid)", "paid)!", "INV-2024-0418"):
        assert not g.matches(_doc(name=value)), value
    assert not g.matches('{"name":"Zo\\u00eb"}')  # canonical spellings only, as for every constrained string


def test_every_string_grounds_plain_strings_only() -> None:
    schema = _object(
        name={"type": "string"},
        email={"type": "string", "format": "email"},
        code={"type": "string", "pattern": "^INV-"},
        kind={"enum": ["invoice", "receipt"]},
        note={"type": ["string", "null"], "maxLength": 5},
    )
    g = Grammar.from_json_schema(schema, source=TEXT, grounded=True)
    base = {"name": "Zoë", "email": "zoe@example.com", "code": "INV-9", "kind": "receipt", "note": "paid)"}
    assert g.matches(_doc(**base))
    assert not g.matches(_doc(**{**base, "name": "Zoey"}))
    assert g.matches(_doc(**{**base, "email": "bob@example.org", "code": "INV-anything"}))  # format, pattern: free
    assert g.matches(_doc(**{**base, "note": None}))
    assert not g.matches(_doc(**{**base, "note": "(paid)"}))  # grounded and at most 5 characters
    plain = Grammar.from_json_schema(schema, source=TEXT)  # the text alone grounds nothing unmarked
    assert plain.matches(_doc(**{**base, "name": "Zoey"}))


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet='ab "\\\n\x01é😀-', max_size=20),
    low=st.integers(0, 3),
    high=st.none() | st.integers(0, 6),
    pattern=st.none() | st.sampled_from(["^a", "b", "^[ab-]*$", "é"]),
    seed=st.integers(0, 2**16),
)
def test_grounded_strings_with_bounds_and_patterns_are_exact(text, low, high, pattern, seed) -> None:
    node = {"type": "string", "x-grounded": True, "minLength": low}
    if high is not None:
        node["maxLength"] = high
    if pattern is not None:
        node["pattern"] = pattern
    schema = _object(v=node)
    try:
        g = Grammar.from_json_schema(schema, source=text)
    except SchemaError as exc:  # no span qualifies at all (required property): refused as accepting nothing
        assert "accepts no JSON value" in exc.message
        return
    free = Grammar.from_json_schema(_object(v={k: v for k, v in node.items() if k != "x-grounded"}))
    spans = _substrings(text)
    rng = random.Random(seed)
    candidates = list(spans) + ["".join(rng.choice('ab "\\\né-z') for _ in range(rng.randint(0, 5))) for _ in range(40)]
    for value in candidates:
        accepted = g.matches(_doc(v=value))
        assert accepted == (free.matches(_doc(v=value)) and value in spans), (text, value, node)
        assert not accepted or jsonschema.Draft202012Validator(schema).is_valid({"v": value})


def test_enum_values_must_be_spans_too() -> None:
    schema = _object(currency={"enum": ["EUR", "€", "USD"], "x-grounded": True})
    g = Grammar.from_json_schema(schema, source=TEXT)
    assert g.matches(_doc(currency="€")) and not g.matches(_doc(currency="USD"))
    assert not g.matches(_doc(currency="EUR"))


def test_fields_share_one_rule_and_one_suffix_automaton(monkeypatch) -> None:
    built = []
    real = grounding_module.SuffixAutomaton

    def counting(text: str):
        built.append(text)
        return real(text)

    monkeypatch.setattr(grounding_module, "SuffixAutomaton", counting)
    source = TEXT + " (a text of this test only)"
    schema = _object(a={"type": "string", "x-grounded": True}, b={"type": "string", "x-grounded": True},
                     c={"type": "string", "x-grounded": True, "maxLength": 8},
                     d={"type": "string", "x-grounded": True, "maxLength": 8})
    converted = convert_schema(schema, grounding=Grounding(source))
    assert sorted(converted.automata) == ["root-c-span", "source-span"]
    assert converted.text.count("source-span") == 2 and "root-d" in converted.text
    assert "# source-span ::= (given as a deterministic byte automaton of" in converted.gbnf()
    assert built == [source]  # both rules from one suffix automaton


def test_a_new_text_for_a_schema_seen_before_reuses_its_grammar_text_exactly() -> None:
    """The second text's conversion reuses the first one's GBNF (only the grounded rules'
    automata are new), yet accepts exactly what a conversion from scratch accepts; where the
    text changes more than the automata (no span fits a field, an enum narrowed to spans) it
    converts from scratch."""
    schema = _object(a={"type": "string", "x-grounded": True, "minLength": 4},
                     b={"type": "string", "maxLength": 3}, n={"type": "integer"})
    optional = {**schema, "required": ["b", "n"]}
    first, second = "Zoë Müller, INV-7", 'Ada "A" Lovelace'
    cases = [(first, schema), (first, optional), (second, schema), (second, optional),
             ("Ada", optional)]  # no span of 4 characters in "Ada": field a cannot be there
    for text, variant in cases:
        reused = Grammar.from_json_schema(variant, source=text, grounded=True)
        scratch = _uncached(variant, text)
        fresh = Grammar.from_gbnf(scratch.text, automata=scratch.automata)
        probes = [_doc(a=x, b=y, n=1) for x in _substrings(text) | {"Zoë", "Ada!"} for y in ("Ad", "Zoë", "xyz!")]
        probes += [_doc(b=y, n=2) for y in ("Ad", "e", "Q")]
        for probe in probes:
            assert reused.matches(probe) == fresh.matches(probe), (text, probe)
    with pytest.raises(SchemaError, match="accepts no JSON value"):
        Grammar.from_json_schema(schema, source="Ada", grounded=True)
    enum = _object(c={"enum": ["Ada", "Zoë", "Bob"], "x-grounded": True})
    assert Grammar.from_json_schema(enum, source=first).matches(_doc(c="Zoë"))
    g = Grammar.from_json_schema(enum, source=second)
    assert g.matches(_doc(c="Ada")) and not g.matches(_doc(c="Zoë"))


def _uncached(schema: dict, text: str):
    from structspec.jsonschema import convert as convert_module

    convert_module._TEMPLATES.clear()
    return convert_schema(schema, grounding=Grounding(text, every_string=True))


def test_what_cannot_be_grounded_is_refused_by_pointer() -> None:
    marked = _object(name={"type": "string", "x-grounded": True})
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(marked)
    assert (info.value.pointer, info.value.keyword) == ("/properties/name/x-grounded", "x-grounded")
    assert "source text" in info.value.message
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(_object(name={"type": "string", "x-grounded": "yes"}), source=TEXT)
    assert info.value.pointer == "/properties/name/x-grounded" and "true or false" in info.value.message
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(_object(name={"type": "string", "not": {"x-grounded": True}}), source=TEXT)
    assert info.value.keyword == "not" and "x-grounded" in info.value.message
    names = {"type": "object", "propertyNames": {"type": "string", "x-grounded": True}}
    with pytest.raises(SchemaError, match="not to property names"):
        Grammar.from_json_schema(names, source=TEXT)
    rng = random.Random(0)
    long_text = "".join(rng.choice("abcdefghij ") for _ in range(3000))
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(_object(v={"type": "string", "x-grounded": True, "maxLength": 400}), source=long_text)
    assert info.value.keyword == "x-grounded" and "maxLength 400" in info.value.message
    with pytest.raises(SchemaError, match="at most"):
        Grammar.from_json_schema(marked, source="x" * (grounding_module.MAX_SOURCE + 1))
    with pytest.raises(ValueError, match="source="):
        Grammar.from_json_schema(marked, grounded=True)


def test_pydantic_fields_are_grounded_by_annotation_or_field_extra() -> None:
    class Person(BaseModel):
        name: Annotated[str, structspec.Grounded()]
        email: Annotated[str, structspec.Grounded()] | None = None
        city: str = Field(json_schema_extra={"x-grounded": True})
        age: int

    g = Grammar.from_pydantic(Person, source="Zoë Müller, 41, lives in Zürich (zoe@example.com)")
    assert g.matches(_doc(name="Zoë Müller", email=None, city="Zürich", age=41))
    assert g.matches(_doc(name="Zoë", email="zoe@example.com", city="Zürich", age=3))
    assert not g.matches(_doc(name="Zoe Müller", email=None, city="Zürich", age=41))
    assert not g.matches(_doc(name="Zoë", email="zoe@example.org", city="Zürich", age=41))
    with pytest.raises(TypeError, match="str fields"):
        class Wrong(BaseModel):
            n: Annotated[int, structspec.Grounded()]

        Wrong.model_json_schema()


def test_the_extraction_prompt_shows_the_schema_without_the_keyword() -> None:
    schema = _object(name={"type": "string", "x-grounded": True}, x={"const": {"x-grounded": True}})
    content = extraction_messages("text", schema)[0]["content"]
    assert '"name":{"type":"string"}' in content and '"const":{"x-grounded":true}' in content
