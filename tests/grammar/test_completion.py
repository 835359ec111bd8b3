"""Shortest completions (``Matcher.tokens_to_finish``): on a byte vocabulary the bound equals
the length of the shortest byte string that completes the state, found by breadth-first search
over parse states -- along seeded random walks through the grammar library and schema
grammars; bytes the vocabulary cannot spell alone are not used; token references cost one."""

from __future__ import annotations

import math
import random
from collections import deque

import pytest
from conftest import REPO

import structspec
from structspec import Grammar, Vocabulary
from structspec.grammar.parse_state import ParseState

BYTES = Vocabulary.from_token_bytes([bytes([b]) for b in range(256)] + [None], eos_ids=[256])
SEARCH_LIMIT = 2_000  # parse states a breadth-first search may visit before the sample is dropped

SCHEMAS = {  # closed objects: free-form values would make the searches explode
    "nested": {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 100},
            "tags": {"type": "array", "items": {"type": "string", "minLength": 2}, "minItems": 2},
            "owner": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
                      "additionalProperties": False},
        },
        "required": ["id", "tags", "owner"],
        "additionalProperties": False,
    },
    "recursive": {
        "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                  "minItems": 1}, "leaf": {"const": "x"}}, "anyOf": [{"required": ["kids"]}, {"required": ["leaf"]}],
                  "additionalProperties": False}},
        "$ref": "#/$defs/node",
    },
}


def _library() -> list[tuple[str, Grammar]]:
    grammars = [(path.stem, Grammar.from_gbnf(path.read_text(encoding="utf-8")))
                for path in sorted((REPO / "grammars").glob("*.gbnf"))]
    grammars += [(name, Grammar.from_json_schema(schema)) for name, schema in SCHEMAS.items()]
    return grammars


def _shortest(state: ParseState) -> int | None:
    """Bytes in the shortest completion of ``state``, or None when the search grows too large."""
    depth = {state: 0}
    queue = deque([state])
    while queue:
        current = queue.popleft()
        if current.accepting:
            return depth[current]
        for b in current.allowed_bytes():
            following = current.advance_byte(b)
            if following is not None and following not in depth:
                depth[following] = depth[current] + 1
                queue.append(following)
        if len(depth) > SEARCH_LIMIT:
            return None
    raise AssertionError("a reachable state with no completion")


@pytest.mark.parametrize(("name", "grammar"), _library(), ids=[name for name, _ in _library()])
def test_bound_is_the_shortest_completion_on_a_byte_vocabulary(name: str, grammar: Grammar) -> None:
    compiled = structspec.compile(grammar, BYTES)
    checked = 0
    for seed in range(4):
        rng = random.Random(seed)
        matcher = compiled.matcher()
        for step in range(60):
            if step % 6 == 0:
                expected = _shortest(matcher.state)
                if expected is not None:
                    assert matcher.tokens_to_finish() == expected, (name, seed, step)
                    checked += 1
            allowed = sorted(matcher.state.allowed_bytes())
            if not allowed:
                break
            assert matcher.accept_token(rng.choice(allowed))
    assert checked >= 8, f"only {checked} states of {name} were small enough to search"


def test_bytes_the_vocabulary_cannot_spell_alone_are_not_used() -> None:
    grammar = Grammar.from_gbnf('root ::= "ab" | "c" "d"{5}')
    no_lone_b = Vocabulary.from_token_bytes([b"a", b"ab", b"c", b"d", None], eos_ids=[4])
    matcher = structspec.compile(grammar, no_lone_b).matcher()
    assert matcher.tokens_to_finish() == 6  # "cddddd": "ab" needs a lone "b" after a lone "a"
    assert matcher.accept_token(0)  # "a"
    assert matcher.tokens_to_finish() == math.inf
    only_ab = Vocabulary.from_token_bytes([b"ab", None], eos_ids=[1])
    assert structspec.compile(grammar, only_ab).matcher().tokens_to_finish() == math.inf


def test_token_references_cost_one_token_and_finished_costs_nothing() -> None:
    vocab = Vocabulary.from_token_bytes([b"a", b"b", None, None], eos_ids=[3], special_tokens={"<tool>": 2})
    matcher = structspec.compile(Grammar.from_gbnf('root ::= <tool> "ab" | "a"{4}'), vocab).matcher()
    assert matcher.tokens_to_finish() == 3
    assert matcher.accept_token(2)
    assert matcher.tokens_to_finish() == 2
    assert matcher.accept_tokens([0, 1]) == 2 and matcher.tokens_to_finish() == 0
    assert matcher.is_finished()
