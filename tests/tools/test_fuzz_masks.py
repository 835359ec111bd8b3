"""A fixed sample of ``tools/fuzz_masks.py``: random grammars and vocabularies walked with
brute-force masks, random ids and bytes, and greedy verification of random draft trees in the
state table checked against brute force (with tables small enough to start epochs mid-walk)."""

from __future__ import annotations

import random
import sys

import pytest
from conftest import REPO

import structspec
from structspec import Grammar, GrammarError

sys.path.insert(0, str(REPO / "tools"))

import fuzz_masks


@pytest.mark.parametrize("seed", range(0, 400, 8))
def test_a_fixed_sample_of_the_mask_fuzzer_finds_no_difference(seed: int) -> None:
    rng = random.Random(seed)
    fuzz_masks.fuzz_builders(rng)
    fuzz_masks.fuzz_ngram(rng)
    try:
        grammar = Grammar.from_gbnf(fuzz_masks.random_grammar(rng))
    except GrammarError:
        return
    try:
        fuzz_masks.check(structspec.compile(grammar, fuzz_masks.random_vocabulary(rng)), rng, 10)
    except GrammarError as exc:
        assert exc.code in ("E108", "E110"), exc


def test_the_greedy_walk_check_catches_a_wrong_choice() -> None:
    """The check is not vacuous: a walk that picks the last child instead of the first fails."""
    rng = random.Random(3)
    vocabulary = structspec.Vocabulary.from_token_bytes([b"a", b"b", b"ab", None], eos_ids=[3])
    matcher = structspec.compile(Grammar.from_gbnf('root ::= ("a" | "b")*'), vocabulary).matcher()
    real = type(matcher).greedy_path

    def wrong(self, rows, tokens, parents, line, left):
        path, token = real(self, rows, tokens, parents, line, left)
        return path[:-1] if path else path, token

    type(matcher).greedy_path = wrong
    try:
        with pytest.raises(AssertionError):
            for _ in range(200):
                fuzz_masks.check_greedy_path(matcher, rng)
    finally:
        type(matcher).greedy_path = real
