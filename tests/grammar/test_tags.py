"""Structural tags: the grammar they compile to, reading texts back, streaming, bad specs."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from tag_specs import sample_text, structural_tags

from structspec import Grammar, GrammarError, SchemaError, StructuralTag, Tag
from structspec.grammar.tag_reading import BeginEvent, ContentEvent, EndEvent, IncompleteText, TagReader, TextEvent
from structspec.grammar.tags import TagError

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
           "required": ["city", "days"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"], "additionalProperties": False}
CALL = '<tool_call>{{"name": "{}", "arguments": '
TOOLS = StructuralTag(
    [Tag(CALL.format("weather"), WEATHER, "}</tool_call>"), Tag(CALL.format("search"), SEARCH, "}</tool_call>")],
    triggers=["<tool_call>"],
)


def call(name: str, arguments: dict) -> str:
    return CALL.format(name) + json.dumps(arguments, separators=(",", ":")) + "}</tool_call>"


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("", True),
        ("just text, <b>tags</b> and a < sign", True),
        ("ends inside a trigger <tool_ca", True),
        ("<<tool <tool_cal> <tool_callx", True),
        (call("weather", {"city": "Paris", "days": 2}), True),
        ("a " + call("search", {"q": "<tool_call>"}) + " b " + call("weather", {"city": "x", "days": 0}), True),
        ("<tool_call>", False),  # a trigger must go on into a segment
        ("text <tool_call> more", False),
        (CALL.format("nothing") + "{}}</tool_call>", False),
        (CALL.format("search") + '{"q":1}}</tool_call>', False),  # the content follows its schema
        (CALL.format("search") + '{"q":"x"}', False),  # and the end must come
    ],
)
def test_free_text_and_segments(text: str, ok: bool) -> None:
    assert TOOLS.grammar.matches(text) == ok


def test_segment_counts() -> None:
    one = call("search", {"q": "a"})
    at_least = StructuralTag(TOOLS.tags, triggers=["<tool_call>"], min_segments=1, max_segments=2)
    assert not at_least.grammar.matches("no call")
    assert at_least.grammar.matches(f"x {one} y {one} z")
    assert not at_least.grammar.matches(f"{one}{one}{one}")
    # past the last segment allowed, the trigger is not text either
    assert not at_least.grammar.matches(f"{one}{one} <tool_call>")


def test_segments_only_with_a_separator() -> None:
    one, two = call("search", {"q": "a"}), call("weather", {"city": "b", "days": 1})
    spec = StructuralTag(TOOLS.tags, min_segments=1, free_text=False, separator="\n")
    assert spec.grammar.matches(f"{one}\n{two}")
    assert not spec.grammar.matches(f"{one}{two}")
    assert not spec.grammar.matches(f" {one}")
    assert not spec.grammar.matches("")
    assert [s.tag for s in spec.parse(f"{one}\n{two}").segments] == [1, 0]


def test_parse_reads_segments_and_values() -> None:
    text = "Let me look. " + call("weather", {"city": "Oslo", "days": 3}) + " Done."
    parsed = TOOLS.parse(text)
    assert parsed.free_text == "Let me look.  Done."
    (segment,) = parsed.segments
    assert segment.tag == 0 and segment.value == {"city": "Oslo", "days": 3}
    assert text[segment.start : segment.stop] == segment.begin + segment.content + segment.end
    with pytest.raises(ValueError, match="does not follow"):
        TOOLS.parse("x <tool_call> y")


def test_pydantic_content_reads_as_the_model() -> None:
    class Point(BaseModel):
        x: int
        y: int

    spec = StructuralTag([Tag("<p>", Point, "</p>")])
    assert spec.grammar.matches('<p>{"x":1,"y":2}</p>')
    assert not spec.grammar.matches('<p>{"x":1,"y":2,"z":3}</p>')  # closed to undeclared keys
    assert spec.parse('at <p>{"x":1,"y":2}</p>').segments[0].value == Point(x=1, y=2)


def test_shortest_content_that_lets_the_rest_read() -> None:
    # "a*" then "a": the content's end is ambiguous; the reading must still cover the whole text
    spec = StructuralTag([Tag("<", Grammar.from_regex("a*"), "a")], min_segments=2, max_segments=2, free_text=False)
    parsed = spec.parse("<aaa<a")
    assert [s.content for s in parsed.segments] == ["aa", ""]


@given(structural_tags(), st.integers(0, 10_000))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_generated_texts_read_back(spec: StructuralTag, seed: int) -> None:
    text = sample_text(spec, seed)
    assert spec.grammar.matches(text)
    parsed = spec.parse(text)
    assert "".join(p if isinstance(p, str) else p.begin + p.content + p.end for p in parsed.parts) == text
    low, high = spec.min_segments, spec.max_segments
    assert low <= len(parsed.segments) <= (high if high is not None else len(parsed.segments))
    for segment in parsed.segments:
        tag = spec.tags[segment.tag]
        assert tag.content_grammar.matches(segment.content)
        if isinstance(tag.content, dict):
            jsonschema.validate(segment.value, tag.content)
    if spec.free_text:
        for part in parsed.parts:
            if isinstance(part, str):
                assert not any(t in part for t in spec.triggers)
    _assert_streams_alike(spec, text, parsed, random.Random(seed))


def _assert_streams_alike(spec: StructuralTag, text: str, parsed, rng: random.Random) -> None:
    """The reader fed random pieces gives the parse's parts, where the content is JSON (whose end
    is never ambiguous)."""
    if not all(isinstance(tag.content, dict) for tag in spec.tags):
        return
    reader = TagReader(spec)
    events = []
    i = 0
    while i < len(text):
        step = rng.randint(1, 6)
        events += reader.feed(text[i : i + step])
        i += step
    events += reader.close()
    assert _replayed(events) == [p if isinstance(p, str) else (p.tag, p.content) for p in parsed.parts]


def _replayed(events) -> list:
    out: list = []
    for event in events:
        if isinstance(event, TextEvent):
            if out and isinstance(out[-1], str):
                out[-1] += event.text
            else:
                out.append(event.text)
        elif isinstance(event, BeginEvent):
            out.append((event.tag, ""))
        elif isinstance(event, ContentEvent):
            tag, content = out[-1]
            out[-1] = (tag, content + event.text)
        else:
            assert isinstance(event, EndEvent) and out[-1] == (event.tag, event.content)
    return out


def test_reader_holds_back_split_triggers() -> None:
    reader = TagReader(TOOLS)
    assert reader.feed("Hi <to") == [TextEvent("Hi ")]
    assert reader.feed("ol") == []
    assert reader.feed("box") == [TextEvent("<toolbox")]
    assert reader.feed(" <tool_call>{") == [TextEvent(" ")]
    assert reader.feed('"name": "search", "arguments": {"q"') == [BeginEvent(1), ContentEvent('{"q"')]
    assert reader.feed(':"a"}}</tool') == [ContentEvent(':"a"}')]
    assert reader.feed("_call>") == [EndEvent(1, '{"q":"a"}')]
    assert reader.close() == []
    unfinished = TagReader(TOOLS)
    assert unfinished.feed("Hi " + CALL.format("search") + '{"q":') == [TextEvent("Hi "), BeginEvent(1),
                                                                       ContentEvent('{"q":')]
    with pytest.raises(IncompleteText, match=r"inside a segment of tags\[1\]") as caught:
        unfinished.close()
    assert caught.value.events == []
    # text held back as a possible trigger is free text after all when the text ends there
    assert TagReader(TOOLS).feed("x <tool_c") == [TextEvent("x ")]
    cut = TagReader(TOOLS)
    cut.feed("x <tool_c")
    assert cut.close() == [TextEvent("<tool_c")]


def test_from_dict() -> None:
    spec = StructuralTag.from_dict({
        "tags": [{"begin": "<n>", "regex": "[0-9]+", "end": "</n>"},
                 {"begin": "<j>", "schema": SEARCH, "end": "</j>"},
                 {"begin": "<g>", "gbnf": 'root ::= "yes" | "no"', "end": "</g>"}],
        "max_segments": 2,
    })
    assert spec.grammar.matches('a <n>12</n> b <j>{"q":"x"}</j>')
    assert not spec.grammar.matches("<g>yes</g><g>no</g><n>1</n>")
    assert spec.triggers == ("<n>", "<j>", "<g>")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: StructuralTag([]), "at least one tag"),
        (lambda: StructuralTag([Tag("<a>", SEARCH, "")], triggers=["<b>"]), r"tags\[0\].begin '<a>' starts with no"),
        (lambda: StructuralTag([Tag("<a>", SEARCH, "")], triggers=["<a>", "<c>"]), r"triggers\[1\] '<c>' starts no"),
        (lambda: StructuralTag([Tag("<ab>", SEARCH, "")], triggers=["<a", "<ab>"]), "may not contain another"),
        (lambda: StructuralTag([Tag("<a>", SEARCH, ""), Tag("<a>", WEATHER, "")]), r"tags\[1\].begin"),
        (lambda: StructuralTag([Tag("<a>", SEARCH, "")], min_segments=2, max_segments=1), "max_segments"),
        (lambda: StructuralTag([Tag("<a>", SEARCH, "")], min_segments=-1), "min_segments"),
        (lambda: StructuralTag([Tag("<a>", SEARCH, "")], free_text=False, triggers=["<a>"]), "triggers"),
        (lambda: StructuralTag([Tag("<a>", SEARCH, "")], separator=","), "separator"),
        (lambda: StructuralTag.from_dict({"tags": [{"begin": "<a>", "end": ""}]}), r"tags\[0\]: give exactly one"),
        (lambda: StructuralTag.from_dict({"tags": [], "extra": 1}), "unknown field 'extra'"),
        (lambda: StructuralTag.from_dict({"tags": [{"begin": "<a>", "regex": "x", "end": ""}], "triggers": "<a>"}),
         "triggers: a list is required"),
    ],
)
def test_bad_specs_name_the_field(build, message: str) -> None:
    with pytest.raises(TagError, match=message):
        build()


def test_bad_content_names_the_tag() -> None:
    with pytest.raises(SchemaError, match=r"tags\[1\].content") as caught:
        StructuralTag([Tag("<a>", SEARCH, ""), Tag("<b>", {"type": "array", "uniqueItems": True}, "")])
    assert caught.value.pointer == "/uniqueItems"
    with pytest.raises(GrammarError, match=r"1:10: E101 tags\[0\].content: undefined rule"):
        StructuralTag([Tag("<a>", "root ::= nothing", "")])
    with pytest.raises(TagError, match=r"tags\[0\].regex: .*position 1"):
        StructuralTag.from_dict({"tags": [{"begin": "<a>", "regex": "a(", "end": ""}]})
    with pytest.raises(TypeError, match=r"tags\[0\].content"):
        StructuralTag([Tag("<a>", 42, "")])
