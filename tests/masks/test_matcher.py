"""The Matcher contract: advancing, refusing, rolling back, copying, end of sequence, and the
mask in every form the decoder uses (bool mask, packed bitmask rows, in-place logits masking).

Properties are checked along seeded random walks of allowed tokens, over a small hand-made
vocabulary and over the Llama-3 vocabulary (also padded to a wider logits width).
"""

from __future__ import annotations

import functools
import random
from typing import Any

import numpy as np
import pytest
import torch
from conftest import REPO, tokenizer_dir

import structspec
from structspec import CompiledGrammar, Grammar, Matcher, Vocabulary

JSON_GBNF = (REPO / "grammars" / "json.gbnf").read_text(encoding="utf-8") if (REPO / "grammars").is_dir() else ""
RECORD_GBNF = (
    'root ::= "{\\"name\\":\\"" [a-zé]+ "\\",\\"tags\\":[" ( tag ( "," tag )* )? "]}"\ntag ::= "\\"" [a-z]* "\\""'
)
PADDING = 77  # extra logits columns beyond the tokenizer's ids


@functools.cache
def _llama3() -> tuple[Any, Vocabulary, Vocabulary]:
    """The Llama-3 tokenizer, its vocabulary, and the vocabulary padded by ``PADDING`` ids."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir("llama3"))
    vocab = Vocabulary.from_tokenizer(tokenizer)
    return tokenizer, vocab, Vocabulary.from_tokenizer(tokenizer, vocab_size=vocab.size + PADDING)


@functools.cache
def _small_vocab() -> Vocabulary:
    """42 ids (not a multiple of 32): JSON-ish pieces, split UTF-8, a control token, two EOS."""
    pieces = b'{ } [ ] " , : a b e x ab "a "} ", 1 12 0 - . \\ n tru true e" {" "name :" a,'.split()
    pieces += [b"\xc3", b"\xa9", b"\xc3\xa9", b"a\xc3", b'\xa9"', b"\xe6\x97", b"\xa5", b"\xe6", b"\x97\xa5", b"\xff"]
    return Vocabulary.from_token_bytes(
        [*pieces, None, None, None], [len(pieces), len(pieces) + 2], {"<s>": len(pieces) + 1}
    )


def _compile(gbnf: str, vocab: Vocabulary) -> CompiledGrammar:
    return structspec.compile(Grammar.from_gbnf(gbnf), vocab)


def _walk(compiled: CompiledGrammar, seed: int, steps: int) -> list[tuple[Matcher, torch.Tensor]]:
    """Matchers (copies) and masks along a seeded walk of allowed non-EOS tokens."""
    rng = random.Random(seed)
    matcher = compiled.matcher()
    eos = compiled.vocabulary.eos_ids
    seen = []
    for _ in range(steps):
        mask = matcher.allowed_mask()
        seen.append((matcher.copy(), mask.clone()))
        choices = [i for i in torch.nonzero(mask).flatten().tolist() if i not in eos]
        if not choices:
            break
        assert matcher.accept_token(rng.choice(choices))
    return seen


def _small_json() -> CompiledGrammar:
    if not JSON_GBNF:
        pytest.skip("grammars/json.gbnf not found")
    return _compile(JSON_GBNF, _small_vocab())


# -- advancing and refusing ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_refused_token_leaves_the_matcher_unchanged(seed: int) -> None:
    compiled = _small_json()
    size = compiled.vocabulary.size
    for matcher, mask in _walk(compiled, seed, 12):
        state, count = matcher.state, matcher.num_tokens
        for token in [*torch.nonzero(~mask).flatten().tolist(), -1, size, size + 40]:
            assert not matcher.accept_token(token)
            assert matcher.state is state and matcher.num_tokens == count
        assert torch.equal(matcher.allowed_mask(), mask)


def test_accept_tokens_counts_the_accepted_prefix() -> None:
    vocab = _small_vocab()
    compiled = _small_json()
    ids = {spelled: i for i, spelled in enumerate(vocab.token_bytes) if spelled}
    good = [ids[b'{"'], ids[b"a"], ids[b'"'], ids[b":"], ids[b"12"]]
    matcher = compiled.matcher()
    assert matcher.accept_tokens([*good, ids[b":"], ids[b"}"]]) == len(good)
    reference = compiled.matcher()
    for token in good:
        assert reference.accept_token(token)
    assert matcher.state == reference.state and matcher.num_tokens == len(good)
    assert matcher.accept_tokens(np.array([ids[b"}"], ids[b"}"]])) == 1
    assert matcher.accept_tokens([]) == 0


# -- rollback and copies ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_rollback_restores_the_exact_mask(seed: int) -> None:
    walk = _walk(_small_json(), seed, 14)
    matcher = walk[-1][0]
    rng = random.Random(seed)
    while matcher.num_tokens:
        n = rng.randint(0, matcher.num_tokens)
        matcher.rollback(n)
        mask = walk[matcher.num_tokens][1]
        assert torch.equal(matcher.allowed_mask(), mask)
        assert matcher.state == walk[matcher.num_tokens][0].state
    with pytest.raises(ValueError, match="roll back 1"):
        matcher.rollback(1)
    with pytest.raises(ValueError):
        matcher.rollback(-1)


def test_rollback_undoes_end_of_sequence() -> None:
    vocab = _small_vocab()
    compiled = _compile('root ::= "ab"+', vocab)
    matcher = compiled.matcher()
    assert matcher.accept_token(vocab.token_bytes.index(b"ab"))
    before = matcher.allowed_mask()
    eos = min(vocab.eos_ids)
    assert matcher.accept_token(eos) and matcher.is_finished()
    matcher.rollback(1)
    assert not matcher.is_finished() and torch.equal(matcher.allowed_mask(), before)


@pytest.mark.parametrize("seed", range(3))
def test_copy_is_independent(seed: int) -> None:
    compiled = _small_json()
    rng = random.Random(seed)
    for matcher, mask in _walk(compiled, seed, 10):
        count = matcher.num_tokens
        fork = matcher.copy()
        assert torch.equal(fork.allowed_mask(), mask)
        for _ in range(3):
            choices = torch.nonzero(fork.allowed_mask()).flatten().tolist()
            fork.accept_token(rng.choice(choices))
        assert matcher.num_tokens == count and torch.equal(matcher.allowed_mask(), mask)
        choices = torch.nonzero(mask).flatten().tolist()
        matcher.accept_token(rng.choice(choices))
        fork.rollback(fork.num_tokens - count)
        assert torch.equal(fork.allowed_mask(), mask)


@pytest.mark.parametrize("seed", range(3))
def test_follow_takes_over_the_history_of_a_matcher_that_went_on(seed: int) -> None:
    """A copy advanced along tokens, then followed from the original token by token, leaves the
    original where accepting those tokens would (the same state, mask and token count); a matcher
    that did not go through the original's point, or not far enough, is refused without a change."""
    compiled = _small_json()
    rng = random.Random(seed)
    for matcher, _ in _walk(compiled, seed, 8):
        ahead = matcher.copy()
        taken = []
        for _ in range(4):
            choices = torch.nonzero(ahead.allowed_mask()).flatten().tolist()
            if not choices:
                break
            taken.append(rng.choice(choices))
            assert ahead.accept_token(taken[-1])
        stepped, followed = matcher.copy(), matcher.copy()
        assert not followed.follow(ahead, len(taken)) and followed.num_tokens == matcher.num_tokens
        for depth, token in enumerate(taken):
            assert stepped.accept_token(token)
            assert followed.follow(ahead, len(taken) - depth - 1)
            assert followed.state == stepped.state and followed.num_tokens == stepped.num_tokens
            assert followed.is_finished() == stepped.is_finished()
            assert torch.equal(followed.allowed_mask(), stepped.allowed_mask())
        assert not followed.follow(ahead, 0)  # nothing left beyond it
        if taken:
            elsewhere = compiled.matcher()  # its own history: ``ahead`` never went through its point
            assert not elsewhere.follow(ahead, len(taken) - 1) and elsewhere.num_tokens == 0


# -- end of sequence ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gbnf",
    [
        'root ::= ( "a" | "b" | "12" )+ ( "," "0"? )*',
        'root ::= "[" ( "1" | "ab" | "e" )* "]" ","?',
        'root ::= item ( "," item )*\nitem ::= "a" | "[" item? "]"',
    ],
    ids=["flat", "bracketed", "recursive"],
)
def test_end_of_sequence_is_allowed_exactly_when_accepting(gbnf: str) -> None:
    compiled = _compile(gbnf, _small_vocab())
    eos = sorted(compiled.vocabulary.eos_ids)
    accepting = set()
    for seed in range(4):
        for matcher, mask in _walk(compiled, seed, 10):
            accepting.add(matcher.is_accepting())
            assert mask[eos].tolist() == [matcher.is_accepting()] * len(eos)
            assert matcher.copy().accept_token(eos[-1]) == matcher.is_accepting()
    assert accepting == {False, True}


def test_shared_mask_words_are_read_only() -> None:
    """A state's mask words are shared by the caches and every matcher: writing into them
    raises instead of changing other matchers' masks."""
    compiled = _small_json()
    matcher = compiled.matcher()
    words = matcher.mask_words()
    before = words.copy()
    with pytest.raises(ValueError, match="read-only"):
        words[0] = 0
    assert compiled.matcher().mask_words() is words
    assert np.array_equal(words, before)


def test_finished_after_end_of_sequence() -> None:
    vocab = _small_vocab()
    matcher = _compile('root ::= "a"+', vocab).matcher()
    assert not matcher.is_finished()
    assert matcher.accept_token(vocab.token_bytes.index(b"a"))
    assert matcher.is_accepting() and not matcher.is_finished()
    assert matcher.accept_token(max(vocab.eos_ids))
    assert matcher.is_finished()
    assert not matcher.allowed_mask().any()
    words = matcher.mask_words()
    assert not words.any() and not words.flags.writeable
    assert matcher.mask_words() is words  # one array per width: caches keyed by identity keep one entry
    assert not any(matcher.accept_token(i) for i in range(vocab.size))
    assert matcher.forced_tokens() == []


def test_finished_when_nothing_may_follow() -> None:
    vocab = _small_vocab()
    matcher = _compile('root ::= "ab"', vocab).matcher()
    assert matcher.accept_token(vocab.token_bytes.index(b"ab"))
    assert matcher.is_finished()
    allowed = set(torch.nonzero(matcher.allowed_mask()).flatten().tolist())
    assert allowed == set(vocab.eos_ids)


# -- mask forms ---------------------------------------------------------------------------------


def _bits_of_row(row: torch.Tensor) -> torch.Tensor:
    """Every bit of a packed row as bools: bit j of word i is token 32 * i + j."""
    words = row.to(torch.int64) & 0xFFFFFFFF
    return ((words[:, None] >> torch.arange(32)) & 1).flatten().bool()


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("extra_words", [0, 2])
def test_fill_bitmask_matches_allowed_mask_on_a_batch_row(seed: int, extra_words: int) -> None:
    """Rows wider than the vocabulary (padded logits) get their extra words zeroed."""
    compiled = _small_json()
    size = compiled.vocabulary.size
    n_words = (size + 31) // 32
    for matcher, mask in _walk(compiled, seed, 10):
        bitmask = torch.full((3, n_words + extra_words), -7, dtype=torch.int32)
        matcher.fill_bitmask(bitmask, row=1)
        bits = _bits_of_row(bitmask[1])
        assert torch.equal(bits[:size], mask)
        assert not bits[size:].any(), "bits past the vocabulary must be 0"
        assert (bitmask[0] == -7).all() and (bitmask[2] == -7).all()


def test_fill_bitmask_on_a_full_vocabulary() -> None:
    tokenizer, vocab, padded = _llama3()
    for vocabulary in (vocab, padded):
        matcher = _compile(RECORD_GBNF, vocabulary).matcher()
        matcher.accept_tokens(tokenizer.encode('{"name":"ab', add_special_tokens=False))
        bitmask = torch.zeros((2, (vocabulary.size + 31) // 32), dtype=torch.int32)
        matcher.fill_bitmask(bitmask, row=1)
        bits = _bits_of_row(bitmask[1])
        assert torch.equal(bits[: vocabulary.size], matcher.allowed_mask()) and not bits[vocabulary.size :].any()
        assert not bitmask[0].any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("extra", [0, PADDING], ids=["exact", "padded"])
def test_apply_mask_in_place(dtype: torch.dtype, extra: int) -> None:
    tokenizer, vocab, _ = _llama3()
    matcher = _compile(RECORD_GBNF, vocab).matcher()
    matcher.accept_tokens(tokenizer.encode('{"name":"ab', add_special_tokens=False))
    mask = matcher.allowed_mask()
    generator = torch.Generator().manual_seed(0)
    for shape in [(vocab.size + extra,), (2, vocab.size + extra)]:
        logits = torch.randn(shape, generator=generator).to(dtype)
        original = logits.clone()
        assert matcher.apply_mask(logits) is logits
        rows = logits.reshape(-1, logits.shape[-1])
        for row, before in zip(rows, original.reshape(-1, logits.shape[-1]), strict=True):
            assert torch.equal(row[: vocab.size][mask], before[: vocab.size][mask])
            assert torch.isneginf(row[: vocab.size][~mask]).all()
            assert torch.isneginf(row[vocab.size :]).all()
        assert logits.dtype == dtype


@pytest.mark.parametrize("seed", range(6))
def test_allows_and_masked_argmax_agree_with_the_mask(seed: int) -> None:
    compiled = _small_json()
    size = compiled.vocabulary.size
    generator = torch.Generator().manual_seed(seed)
    for matcher, mask in _walk(compiled, seed, 25):
        assert [matcher.allows(t) for t in range(size)] == mask.tolist()
        assert not matcher.allows(-1) and not matcher.allows(size)
        for case in range(4):
            logits = torch.randn(size + 3, generator=generator)
            if case == 1:  # the unmasked argmax is forbidden
                forbidden = torch.nonzero(~mask).flatten()
                if len(forbidden):
                    logits[forbidden[0]] = 100.0
            if case == 2:  # ties among allowed tokens: the lowest id wins, as with argmax
                logits[torch.nonzero(mask).flatten()] = 5.0
            if case == 3:  # padding columns score highest but are never allowed
                logits[size:] = 100.0
            reference = matcher.apply_mask(logits.clone())
            expected = int(reference.argmax())
            assert matcher.masked_argmax(logits) == expected
            assert mask[expected]


# -- forced tokens ------------------------------------------------------------------------------


@pytest.mark.parametrize("tokenizer_name", ["llama3", "llama2"])
def test_forced_tokens_spell_the_forced_bytes(tokenizer_name: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(tokenizer_name))
    vocab = Vocabulary.from_tokenizer(tokenizer)
    matcher = _compile(RECORD_GBNF, vocab).matcher()
    forced_texts = []
    for text in ["ab", '"', '"x"', "]", ""]:
        forced = matcher.forced_tokens()
        spelled = b"".join(vocab.token_bytes[i] for i in forced)
        assert spelled == matcher.state.forced_bytes()
        if tokenizer_name == "llama3":  # byte-level BPE: the canonical tokenization is the tokenizer's
            assert forced == tokenizer.encode(spelled.decode(), add_special_tokens=False)
        assert matcher.accept_tokens(forced) == len(forced)
        forced_texts.append(spelled)
        ids = vocab.encode_bytes(text.encode())
        assert matcher.accept_tokens(ids) == len(ids)
    assert forced_texts == [b'{"name":"', b"", b',"tags":[', b"", b"}"]
    assert matcher.is_accepting()
    again = matcher.compiled.matcher()  # the same states: forced tokens come from the cache
    first = again.forced_tokens()
    first.append(0)  # the caller's copy, not the cache's
    assert again.forced_tokens() == vocab.encode_bytes(b'{"name":"')


def test_forced_after_tokenizes_a_text_with_the_bytes_forced_after_it() -> None:
    """Closing the name: the quote and the forced ``,"tags":[`` after it come as one
    tokenization (``",`` merges the quote with the comma); a text the grammar forbids gives None."""
    vocab = Vocabulary.from_token_bytes([*(bytes([b]) for b in range(256)), b'",', None], eos_ids=[257])
    compiled = _compile(RECORD_GBNF, vocab)
    matcher = compiled.matcher()
    opening = vocab.encode_bytes(b'{"name":"ab')
    assert matcher.accept_tokens(opening) == len(opening)
    closing = compiled.forced_after(matcher.state, b'"')
    assert closing == vocab.encode_bytes(b'","tags":[')
    assert vocab.token_bytes[closing[0]] == b'",'
    assert matcher.accept_tokens(closing) == len(closing)
    assert compiled.forced_after(matcher.state, b"x") == compiled.forced_after(matcher.state, b"}") is None
    assert compiled.forced_after(compiled.matcher().state, b'{"name":"') == vocab.encode_bytes(b'{"name":"')
    unspellable = Vocabulary.from_token_bytes([*(bytes([b]) for b in range(256) if b != ord("t")), None], [255])
    other = _compile(RECORD_GBNF, unspellable).matcher()
    assert other.accept_tokens(unspellable.encode_bytes(b'{"name":"ab')) == len(b'{"name":"ab')
    assert other.compiled.forced_after(other.state, b'"') is None  # "tags" needs a t
    assert other.accept_tokens(unspellable.encode_bytes(b'"')) == 1
    assert other.state.forced_bytes() == b',"tags":[' and other.forced_tokens() == []  # nothing to draft


# -- padded vocabularies ------------------------------------------------------------------------


def test_padded_vocabulary_never_allows_padding_ids() -> None:
    tokenizer, vocab, padded = _llama3()
    assert padded.size == vocab.size + PADDING
    on_padded = _compile(RECORD_GBNF, padded).matcher()
    on_plain = _compile(RECORD_GBNF, vocab).matcher()
    for token in [*tokenizer.encode('{"name":"éa","tags":["x",""]}', add_special_tokens=False), min(vocab.eos_ids)]:
        mask = on_padded.allowed_mask()
        assert mask.shape == (padded.size,)
        assert torch.equal(mask[: vocab.size], on_plain.allowed_mask())
        assert not mask[vocab.size :].any()
        assert not any(on_padded.copy().accept_token(i) for i in range(vocab.size, padded.size))
        assert on_padded.accept_token(token) and on_plain.accept_token(token)
    assert on_padded.is_finished()


def test_negated_token_reference_never_allows_padding_ids() -> None:
    tokenizer, vocab, padded = _llama3()
    (x,) = tokenizer.encode("x", add_special_tokens=False)
    matcher = _compile(f'root ::= "a" !<[{x}]> "."', padded).matcher()
    assert matcher.accept_tokens(tokenizer.encode("a", add_special_tokens=False)) == 1
    assert not matcher.allowed_mask()[vocab.size :].any()
