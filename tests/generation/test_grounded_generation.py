"""Generation grounded in a source text: every grounded value a model produces is a span of the
source (hypothesis: random texts with quotes, backslashes, control and multibyte characters;
greedy and sampled; plain and speculative; any budget that holds the shortest answer), greedy
speculative output equals plain, rows of a batch ground in their own sources, and the Pydantic
path grounds annotated fields."""

from __future__ import annotations

import functools
from typing import Annotated

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from tiny_models import one_thread, tiny_llama, tokenizer

import structspec
from structspec.generation import Generator, SpecConfig
from structspec.generation.sequence import Request

__all__ = ["one_thread"]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "code": {"type": "string", "x-grounded": True, "minLength": 1},
        "kind": {"enum": ["a", "b"]},
    },
    "required": ["name", "tags", "code", "kind"],
    "additionalProperties": False,
}
SOURCES = st.lists(st.sampled_from([*'abcXY "\\\n\t\x01é€😀中', "Zoë", "INV-7", " the "]),
                   min_size=1, max_size=20).map("".join)


@functools.cache
def _gen() -> Generator:
    tok = tokenizer("gpt2")
    return Generator(tiny_llama(len(tok), 5, scale=0.05), tok, draft_model=tiny_llama(len(tok), 6))


def _grounded_values(value: dict) -> list[str]:
    return [value["name"], value["code"], *value["tags"]]


@settings(max_examples=16, deadline=None)
@given(source=SOURCES, seed=st.integers(0, 2**31), temperature=st.sampled_from([0.0, 1.0, 2.0]),
       speculative=st.booleans(), slack=st.integers(0, 30))
def test_every_grounded_value_is_a_span_of_the_source(source, seed, temperature, speculative, slack) -> None:
    gen = _gen()
    _, compiled = gen.compile(SCHEMA, source=source, grounded=True)
    budget = int(compiled.matcher().tokens_to_finish()) + slack
    result = gen.generate("Text: " + source, SCHEMA, source=source, grounded=True, max_new_tokens=budget,
                          temperature=temperature, seed=seed, speculative=SpecConfig() if speculative else None)
    jsonschema.validate(result.value, SCHEMA)
    for value in _grounded_values(result.value):
        assert value in source, (value, source)


def test_greedy_speculative_output_equals_plain_when_grounded() -> None:
    gen = _gen()
    source = 'Invoice INV-7 for Zoë "Z" Müller.\nTotal: 12 €, paid.'
    plain = gen.generate("Text: " + source, SCHEMA, source=source, grounded=True, max_new_tokens=80)
    fast = gen.generate("Text: " + source, SCHEMA, source=source, grounded=True, max_new_tokens=80,
                        speculative=SpecConfig())
    assert fast.token_ids == plain.token_ids
    assert all(v in source for v in _grounded_values(plain.value))


def test_batched_rows_each_ground_in_their_own_source() -> None:
    gen = _gen()
    sources = ['Invoice INV-7 for Zoë "Z" Müller.', "abc XY\tINV-7 the end", "中文 the 😀 code X"]
    requests = [Request("Text: " + s, SCHEMA, max_new_tokens=80, source=s, grounded=True) for s in sources]
    rows = gen.generate_batch(requests, max_batch=2)
    for source, request, row in zip(sources, requests, rows, strict=True):
        alone = gen.generate(request.prompt, SCHEMA, source=source, grounded=True, max_new_tokens=80)
        assert row.token_ids == alone.token_ids
        assert all(v in source for v in _grounded_values(row.value))


def test_pydantic_fields_are_grounded_through_the_annotation() -> None:
    class Card(BaseModel):
        name: Annotated[str, structspec.Grounded()]
        city: str

    gen = _gen()
    source = "Card: Zoë Müller, Zürich"
    card = structspec.generate(gen.model, gen.tokenizer, Card, "Text: " + source, source=source, max_new_tokens=60)
    assert isinstance(card, Card) and card.name in source
    with pytest.raises(ValueError, match="source="):
        gen.generate("x", 'root ::= "a"', source=source)
    with pytest.raises(ValueError, match="source="):
        gen.generate("x", SCHEMA, grounded=True)
    with pytest.raises(structspec.SchemaError, match="accepts no JSON value"):  # no span of "" has a character
        gen.generate("x", SCHEMA, source="", grounded=True)
