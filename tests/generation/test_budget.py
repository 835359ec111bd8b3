"""The budget guard costs a bounded number of checks per step, whatever the vocabulary: a
replacement is one of a few checked draws, else a token that starts a shortest completion."""

from __future__ import annotations

import functools
import itertools
import string

import pytest
import torch
from tiny_models import one_thread, tiny_llama, tokenizer  # noqa: F401  (one_thread: autouse fixture)

import structspec
from structspec import Grammar, Vocabulary
from structspec.generation import Generator, budget
from structspec.generation.sampling import Sampling

LETTERS = ["".join(pair) for pair in itertools.product(string.ascii_lowercase, repeat=2)]
VOCAB = Vocabulary.from_token_bytes([bytes([b]) for b in range(256)] + [w.encode() for w in LETTERS] + [None],
                                    eos_ids=[256 + len(LETTERS)])
DOT = ord(".")


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of ``budget.fits`` (each one advance of the parse state)."""
    calls: list[int] = []
    real = budget.fits

    def counted(matcher, token, left):
        calls.append(token)
        return real(matcher, token, left)

    monkeypatch.setattr(budget, "fits", counted)
    return calls


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_replacement_needs_few_checks_when_almost_no_token_fits(checks: list[int], temperature: float) -> None:
    """700 letter tokens are allowed and only "." closes the text in the one token left; the
    letters score higher. Trying tokens until one fits would check hundreds of them."""
    matcher = structspec.compile(Grammar.from_gbnf('root ::= [a-z]+ "."'), VOCAB).matcher()
    assert matcher.accept_tokens(VOCAB.encode_bytes(b"ab")) >= 1
    logits = torch.zeros(VOCAB.size)
    for i in range(len(LETTERS)):
        logits[256 + i] = 2.0
    matcher.apply_mask(logits)
    rejected = 256 + LETTERS.index("zz")
    rng = torch.Generator().manual_seed(0)
    token = budget.replacement(logits, rejected, matcher, 0, Sampling(temperature), rng)
    assert token == DOT
    assert len(checks) <= budget.TRIES + 1


def test_the_finishing_choice_follows_the_model_among_finishing_tokens() -> None:
    """Closing ``"`` then ``}`` or ``"}`` at once: the model's preferred way is taken."""
    vocab = Vocabulary.from_token_bytes([bytes([b]) for b in range(256)] + [b'"}', None], eos_ids=[257])
    matcher = structspec.compile(Grammar.from_gbnf('root ::= "{\\"a\\":\\"" [a-z]* "\\"}"'), vocab).matcher()
    assert matcher.accept_tokens(vocab.encode_bytes(b'{"a":"xy')) > 0
    assert matcher.finishing_tokens() == [ord('"'), 256]
    logits = torch.zeros(vocab.size)
    logits[256] = 5.0
    logits[ord("q")] = 9.0
    matcher.apply_mask(logits)
    token = budget.replacement(logits, ord("q"), matcher, 1, Sampling(0.0), torch.Generator())
    assert token == 256


@functools.cache
def _generator() -> Generator:
    tok = tokenizer("gpt2")
    return Generator(tiny_llama(len(tok), 11), tok)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generation_under_a_tight_budget_checks_few_tokens_per_cut(checks: list[int], temperature: float) -> None:
    """Random weights over GPT-2's 50k ids rarely close a word list with "."; every cut of
    the guard stays within its few checks, and the text is complete on the last token."""
    grammar = Grammar.from_gbnf('root ::= ([a-z]+ " "){2,} "."')
    result = _generator().generate("Words: ", grammar, max_new_tokens=12, temperature=temperature, seed=3)
    assert result.stats.budget_cuts > 0
    assert len(checks) <= (budget.TRIES + 1) * result.stats.budget_cuts
    assert result.stats.tokens <= 12 and grammar.matches(result.text)
