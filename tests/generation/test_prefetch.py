"""Masks computed in a worker thread while the model runs: the cache holds every mask along
the prefetched tokens, and a grammar error there is left for the reader to raise."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import structspec
from structspec import Grammar, Vocabulary
from structspec.generation.prefetch import MaskPrefetch


def _compiled() -> structspec.CompiledGrammar:
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"ab", b"{", b"}", None], eos_ids=[5])
    return structspec.compile(Grammar.from_gbnf('root ::= "{" [ab]* "}"'), vocab)


def test_prefetch_fills_the_mask_cache_along_the_tokens() -> None:
    compiled = _compiled()
    matcher = compiled.matcher()
    tokens = [3, 0, 2, 1]
    with MaskPrefetch() as prefetch:
        prefetch.start([(matcher, tokens)])
        prefetch.wait()
    walk = compiled.matcher()
    assert compiled.known_mask_words(walk.state) is not None
    for token in tokens:
        assert walk.accept_token(token)
        assert compiled.known_mask_words(walk.state) is not None
    assert matcher.num_tokens == 0  # the prefetch walked a copy


def test_prefetch_stops_at_a_forbidden_token_and_goes_on_with_the_next_walk() -> None:
    compiled = _compiled()
    other = structspec.compile(Grammar.from_gbnf('root ::= "a" "b"'), compiled.vocabulary)
    with MaskPrefetch() as prefetch:  # a batch: one walk per row
        prefetch.start([(compiled.matcher(), [3, 3, 0]), (other.matcher(), [0])])  # the second "{" is forbidden
    walk = compiled.matcher()
    walk.accept_token(3)
    assert compiled.known_mask_words(walk.state) is not None
    assert not walk.accept_token(3)
    walk = other.matcher()
    assert walk.accept_token(0)
    assert other.known_mask_words(walk.state) is not None


def test_only_masks_not_cached_yet_are_handed_to_the_worker() -> None:
    compiled = _compiled()
    pair = structspec.compile(Grammar.from_gbnf('root ::= "a" "b" "a"'), compiled.vocabulary)
    with MaskPrefetch() as prefetch:
        prefetch.start([(pair.matcher(), [0])])
        prefetch.wait()
        prefetch.start([(pair.matcher(), [0])])  # "" and "a": cached
        assert prefetch._pending is None
        prefetch.start([(pair.matcher(), [0, 1])])  # "ab" is new
        assert prefetch._pending is not None
        prefetch.wait()
    walk = pair.matcher()
    assert walk.accept_tokens([0, 1]) == 2
    assert pair.known_mask_words(walk.state) is not None


def _uncached_by_matcher(matcher, tokens):
    """The walk a matcher copy makes, token by token (the oracle of ``_uncached``)."""
    walker = matcher.copy()
    compiled = walker.compiled
    for at in range(len(tokens) + 1):
        if walker.is_finished():
            return None
        if compiled.known_mask_words(walker.state) is None:
            return walker, list(tokens[at:])
        if at == len(tokens) or not walker.accept_token(tokens[at]):
            return None
    return None


@given(st.lists(st.integers(-1, 7), max_size=3), st.lists(st.integers(-1, 7), max_size=8),
       st.lists(st.integers(-1, 7), max_size=8))
def test_the_walk_along_parse_states_stops_where_a_matcher_would(start, cached, walk) -> None:
    """Through the step cache, as a matcher steps: the first state without a cached mask, or
    nothing at a forbidden or out-of-range token, an end-of-sequence token or a finished text."""
    from structspec.generation.prefetch import _uncached

    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"ab", b"{", b"}", None], eos_ids=[5])
    compiled = structspec.compile(Grammar.from_gbnf('root ::= "{" [ab]{0,3} "}"'), vocab)
    matcher = compiled.matcher()
    matcher.accept_tokens(start)
    filler = matcher.copy()  # masks cached along some tokens, not along others
    filler.mask_words()
    for token in cached:
        if not filler.accept_token(token):
            break
        filler.mask_words()
    expected = _uncached_by_matcher(matcher, walk)
    found = _uncached(matcher, walk)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        walker, rest = found
        assert (walker.state, walker.num_tokens, rest) == (expected[0].state, expected[0].num_tokens, expected[1])
