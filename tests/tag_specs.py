"""Random structural tags and texts their grammars generate, for the tag tests (grammar, masks).

``structural_tags()`` draws a :class:`StructuralTag` from pools of triggers, begins, contents
and ends chosen so that every combination is valid; ``sample_text`` walks a grammar byte by byte
(mostly ASCII, now and then a whole tag ``begin``), then finishes along a shortest completion.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
from hypothesis import strategies as st

from structspec import Grammar, StructuralTag, Tag
from structspec.grammar.completion import completion_cost, rule_completion_costs

TRIGGERS = ("<tool_call>", "<f=", "[[", "@@")
SUFFIXES = ("a>", "bc>", 'name="x">')  # none is a prefix of another
ENDS = ("</tool_call>", "}", "]]", "\n", "</x>")
SCHEMAS: tuple[dict[str, Any], ...] = (
    {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6}, "days": {"type": "integer",
     "minimum": 0, "maximum": 30}}, "required": ["city", "days"], "additionalProperties": False},
    {"enum": ["red", "green", 3, None]},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    {"type": "object", "properties": {"q": {"type": "string", "pattern": "^[a-z]{1,4}$"}}, "required": ["q"],
     "additionalProperties": False},
    {"type": "integer", "minimum": -5, "maximum": 500},
)
GRAMMARS = ('root ::= "ok" | "no" [0-9]{1,2}', "[a-z]{1,5}( [a-z]{1,5})?")  # GBNF, then a regex


def content(index: int) -> Any:
    """Pool entry ``index``: a JSON Schema, or a grammar (GBNF text, then a regex)."""
    if index < len(SCHEMAS):
        return SCHEMAS[index]
    source = GRAMMARS[index - len(SCHEMAS)]
    return source if source.startswith("root") else Grammar.from_regex(source)


@st.composite
def structural_tags(draw: st.DrawFn) -> StructuralTag:
    """A valid structural tag: 1-2 triggers, 1-2 tags each, counts and free-text options."""
    free_text = draw(st.booleans())
    triggers = draw(st.lists(st.sampled_from(TRIGGERS), min_size=1, max_size=2, unique=True))
    tags = []
    for trigger in triggers:
        suffixes = draw(st.lists(st.sampled_from(SUFFIXES), min_size=1, max_size=2, unique=True))
        for suffix in suffixes:
            index = draw(st.integers(0, len(SCHEMAS) + len(GRAMMARS) - 1))
            tags.append(Tag(trigger + suffix, content(index), draw(st.sampled_from(ENDS))))
    low = draw(st.integers(0, 2))
    high = draw(st.one_of(st.none(), st.integers(max(low, 1), low + 2)))
    if free_text:
        return StructuralTag(tags, triggers=triggers, min_segments=low, max_segments=high)
    separator = draw(st.sampled_from(["", "\n", ", "]))
    return StructuralTag(tags, min_segments=low, max_segments=high, free_text=False, separator=separator)


def sample_text(spec: StructuralTag, seed: int, steps: int = 80) -> str:
    """A text of ``spec``'s grammar: a seeded walk, then a shortest completion."""
    rng = random.Random(seed)
    grammar = spec.grammar
    costs = rule_completion_costs(grammar.ruleset, np.ones(256, dtype=bool))
    state = grammar.initial_state()
    out = bytearray()
    for _ in range(steps):
        if state.is_accepting() and rng.random() < 0.03:
            break
        if rng.random() < 0.08:
            begin = rng.choice(spec.tags).begin.encode()
            after = state.advance(begin)
            if after is not None:
                state = after
                out += begin
                continue
        allowed = sorted(state.allowed_bytes())
        if not allowed:
            break
        ascii_bytes = [b for b in allowed if 0x20 <= b < 0x7F]
        b = rng.choice(ascii_bytes if ascii_bytes and rng.random() < 0.9 else allowed)
        state = state.advance_byte(b)
        out.append(b)
    while not state.is_accepting():
        b = min(sorted(state.allowed_bytes()), key=lambda b: completion_cost(state.advance_byte(b), costs))
        state = state.advance_byte(b)
        out.append(b)
    return out.decode("utf-8")
