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


# A vocabulary with single bytes and many multi-byte tokens, so that a shortest completion can be
# started by tokens of several lengths.
WORDS = Vocabulary.from_token_bytes(
    [bytes([b]) for b in range(256)]
    + [w.encode() for w in ('"}', '"]', "]}", "}]", '",', '":', "true", "null", "ab", "abc", ".\n", "aa", '""')]
    + [None],
    eos_ids=[269],
)


@pytest.mark.parametrize(("name", "grammar"), _library(), ids=[name for name, _ in _library()])
def test_finishing_tokens_start_a_shortest_completion(name: str, grammar: Grammar) -> None:
    """Along random walks: every finishing token is allowed and lowers the bound by at least
    one, there is one whenever the text is incomplete, and end-of-sequence when it is complete."""
    for vocab in (BYTES, WORDS):
        compiled = structspec.compile(grammar, vocab)
        for seed in range(3):
            rng = random.Random(seed)
            matcher = compiled.matcher()
            for _ in range(50):
                bound = matcher.tokens_to_finish()
                finishing = matcher.finishing_tokens()
                if matcher.is_accepting():
                    assert finishing == sorted(vocab.eos_ids)
                else:
                    assert finishing, (name, seed)
                for token in finishing:
                    after = matcher.copy()
                    assert after.accept_token(token), (name, token)
                    assert after.tokens_to_finish() <= bound - 1 or after.is_finished(), (name, token)
                allowed = sorted(b for b in matcher.state.allowed_bytes() if b < 256)
                if not allowed:
                    break
                assert matcher.accept_token(rng.choice(allowed))


def test_finishing_tokens_follow_a_token_reference() -> None:
    vocab = Vocabulary.from_token_bytes([b"a", b"b", None, None], eos_ids=[3], special_tokens={"<tool>": 2})
    matcher = structspec.compile(Grammar.from_gbnf('root ::= <tool> "ab" | "a"{4}'), vocab).matcher()
    assert matcher.finishing_tokens() == [2]
    negated = structspec.compile(Grammar.from_gbnf('root ::= "a" !<tool>'), vocab).matcher()
    assert negated.accept_token(0)
    assert negated.finishing_tokens() == [0, 1]  # any real token but <tool>, never end-of-sequence
