"""Generation under a structural tag: free text around tool-call-like segments, plain and
speculative, with the segments' fixed parts drafted as forced tokens."""

from __future__ import annotations

import jsonschema
import pytest
from tiny_models import one_thread, tiny_llama, tokenizer

from structspec import StructuralTag, Tag, TaggedText
from structspec.generation import Generator, SpecConfig

__all__ = ["one_thread"]

ARGS = {"type": "object", "properties": {"city": {"enum": ["Oslo", "Rome"]}, "days": {"type": "integer",
        "minimum": 1, "maximum": 9}}, "required": ["city", "days"], "additionalProperties": False}
TAGS = StructuralTag(
    [Tag('<tool_call>{"name": "weather", "arguments": ', ARGS, "}</tool_call>")],
    triggers=["<tool_call>"], min_segments=1, max_segments=2,
)


@pytest.mark.parametrize("name", ["llama2", "gpt2"])
def test_generated_text_holds_valid_segments(name: str) -> None:
    tok = tokenizer(name)
    gen = Generator(tiny_llama(len(tok), 7), tok)
    plain = gen.generate("Weather? ", TAGS, max_new_tokens=200)
    spec = gen.generate("Weather? ", TAGS, max_new_tokens=200, speculative=SpecConfig())
    assert spec.text == plain.text  # greedy: speculative decoding changes nothing
    assert isinstance(plain.value, TaggedText) and TAGS.grammar.matches(plain.text)
    assert 1 <= len(plain.value.segments) <= 2
    for segment in plain.value.segments:
        jsonschema.validate(segment.value, ARGS)
    # the begin's rest, the keys and the end were drafted as forced tokens and accepted
    forced = spec.stats.sources["forced"]
    assert forced.accepted >= 10 and spec.stats.target_forwards < plain.stats.target_forwards
