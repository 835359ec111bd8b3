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
    assert matcher.accept_tokens(tokens) == 4
    with MaskPrefetch() as prefetch:
        prefetch.start([(matcher, len(tokens))])
        prefetch.wait()
    walk = compiled.matcher()
    assert compiled.known_mask_words(walk.state) is not None
    for token in tokens:
        assert walk.accept_token(token)
        assert compiled.known_mask_words(walk.state) is not None
    assert matcher.num_tokens == 4  # the prefetch only read the matcher


def test_prefetch_stops_at_a_finished_text_and_goes_on_with_the_next_walk() -> None:
    compiled = _compiled()
    pair = structspec.compile(Grammar.from_gbnf('root ::= "a" "b"'), compiled.vocabulary)
    done, other = pair.matcher(), compiled.matcher()
    assert done.accept_tokens([0, 1]) == 2 and done.is_finished()
    assert other.accept_token(3)
    with MaskPrefetch() as prefetch:  # a batch: one walk per row
        prefetch.start([(done, 2), (other, 1)])
    assert pair.known_mask_words(pair.matcher().state) is not None
    assert pair.known_mask_words(done.state) is None  # a finished text: nothing may follow
    assert compiled.known_mask_words(other.state) is not None


def test_only_masks_not_cached_yet_are_handed_to_the_worker() -> None:
    compiled = _compiled()
    pair = structspec.compile(Grammar.from_gbnf('root ::= "a" "b" "a"'), compiled.vocabulary)
    walk = pair.matcher()
    walk.accept_token(0)
    with MaskPrefetch() as prefetch:
        prefetch.start([(walk, 1)])
        prefetch.wait()
        prefetch.start([(walk, 1)])  # "" and "a": cached
        assert prefetch._pending is None
        walk.accept_token(1)
        prefetch.start([(walk, 2)])  # "ab" is new
        assert prefetch._pending is not None
        prefetch.wait()
    assert pair.known_mask_words(walk.state) is not None


def _uncached_by_matcher(matcher, tokens):
    """The states a copy of ``matcher`` steps through along ``tokens``, from the first without
    a cached mask (the oracle of ``_uncached``)."""
    walker = matcher.copy()
    compiled = walker.compiled
    for at in range(len(tokens) + 1):
        if walker.is_finished():
            return None
        if compiled.known_mask_words(walker.state) is None:
            rest = [walker.state]
            for token in tokens[at:]:
                walker.accept_token(token)
                rest.append(walker.state)
            return rest
        if at < len(tokens):
            walker.accept_token(tokens[at])
    return None


@given(st.lists(st.integers(0, 5), max_size=3), st.lists(st.integers(0, 5), max_size=8),
       st.lists(st.integers(0, 5), max_size=8))
def test_the_walk_along_the_matchers_states_stops_where_a_matcher_would(start, cached, walk) -> None:
    """Along the states a matcher went through: from the first state whose mask no matcher
    computed yet, or nothing where every mask was or a finished text comes first."""
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
    before = matcher.copy()
    n = matcher.accept_tokens(walk)
    expected = _uncached_by_matcher(before, walk[:n])
    found = _uncached(matcher, n)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert found[0] is compiled
        assert found[1] == expected
