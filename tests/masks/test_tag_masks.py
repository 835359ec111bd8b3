"""Token masks of structural tags on a real tokenizer (llama3): equal to brute force, and free
text costs one cached mask per parse state, the same few states at every position."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tag_specs import sample_text, structural_tags
from test_masks import _assert_exact, _brute_force_text, _random_walk, _sub_vocab, _text_walk, _tokenizer

import structspec
from structspec import StructuralTag, Tag

ARGS = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"], "additionalProperties": False}
TOOLS = StructuralTag(
    [Tag('<tool_call>{"name": "weather", "arguments": ', ARGS, "}</tool_call>"),
     Tag('<tool_call>{"name": "web", "arguments": ', {"type": "object"}, "}</tool_call>")],
    triggers=["<tool_call>"],
)
CALL = '<tool_call>{"name": "weather", "arguments": {"city":"Paris","days":2}}</tool_call>'
PROSE = "The forecast said rain, so we stayed in <b>and</b> read; a <to-do> list waited. "


@given(structural_tags(), st.integers(0, 1000))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_masks_of_random_structural_tags_are_exact(spec: StructuralTag, seed: int) -> None:
    text = sample_text(spec, seed)
    tokenizer, _ = _tokenizer("llama3")
    vocab, renumber = _sub_vocab("llama3", (text,))
    compiled = structspec.compile(spec, vocab)
    ids = [renumber[i] for i in tokenizer.encode(text, add_special_tokens=False)]
    _text_walk(compiled, ids, 40, _brute_force_text)
    _random_walk(compiled, seed, 25, _brute_force_text)


@pytest.mark.parametrize(
    "prefix",
    ["", "Hi ", "Hi <", "Hi <tool_c", "Hi <tool_call>", '<tool_call>{"name": "w', CALL[:-8], CALL, CALL + " and"],
)
def test_full_vocabulary_masks_are_exact(prefix: str) -> None:
    """Every llama3 token at points where free text, a split trigger, a begin, content or end
    meet (tokens such as ``">{"`` span a trigger and what follows it)."""
    _, vocab = _tokenizer("llama3")
    matcher = structspec.compile(TOOLS, vocab).matcher()
    ids = vocab.encode_bytes(prefix.encode())
    assert matcher.accept_tokens(ids) == len(ids)
    _assert_exact(matcher, f"after {prefix!r}", _brute_force_text)


def test_free_text_reuses_one_mask_per_state() -> None:
    """Over a long text with segments, free text visits only the free-text rule's start and its
    loop (plus states inside partial triggers): each mask is computed once, then read."""
    tokenizer, vocab = _tokenizer("llama3")
    compiled = structspec.compile(TOOLS, vocab)
    matcher = compiled.matcher()
    text = (PROSE * 4 + CALL) * 3 + PROSE * 4
    free_states, computed = set(), 0
    parsed = TOOLS.parse(text)
    inside = [(s.start, s.stop) for s in parsed.segments]
    offset = 0
    for token in tokenizer.encode(text, add_special_tokens=False):
        if compiled.known_mask_words(matcher.state) is None:
            computed += 1
        matcher.mask_words()
        if not any(a <= offset <= b for a, b in inside) and not _ends_in_partial_trigger(text[:offset]):
            free_states.add(matcher.state)
        assert matcher.accept_token(token)
        offset += len(tokenizer.decode([token]))
    assert len(free_states) <= 2, free_states
    # the masks computed are those of distinct states: the free text's few, the begins', the
    # contents' (keys, values) and the ends' -- a few dozen for 3 calls, not one per token
    assert computed < 80, computed


def _ends_in_partial_trigger(text: str) -> bool:
    return any(text.endswith("<tool_call>"[:k]) for k in range(1, 11))
