"""``structspec.hf.GrammarLogitsProcessor`` with transformers' own ``model.generate``: plain
greedy and sampled decoding, assisted generation (a draft model calling the processor for its
drafts, the target for every position) and prompt lookup, batches, and reuse across calls.
Output must always follow the grammar; greedy output must equal structspec's own decoder."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from tiny_models import one_thread, tiny_llama, tokenizer
from transformers import LogitsProcessorList

import structspec
from structspec import Grammar, Vocabulary
from structspec.generation import Generator
from structspec.hf import GrammarLogitsProcessor

__all__ = ["one_thread"]

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"},
                   "tag": {"enum": ["alpha", "beta"]}},
    "required": ["id", "ok", "tag"],
    "additionalProperties": False,
}
PROMPT = 'Record: {"id":12,"ok":true,"tag":"beta"}. Again:'


def _setup(name: str = "llama2"):
    tok = tokenizer(name)
    model = tiny_llama(len(tok), 3)
    vocabulary = Vocabulary.from_tokenizer(tok, vocab_size=model.config.vocab_size)
    grammar = Grammar.from_json_schema(SCHEMA)
    return tok, model, structspec.compile(grammar, vocabulary), vocabulary


def _text(vocabulary: Vocabulary, ids: list[int]) -> str:
    out = []
    for token_id in ids:
        if token_id in vocabulary.eos_ids:
            break
        out.append(vocabulary.token_bytes[token_id])
    return b"".join(out).decode("utf-8")


def _generate(model, tok, compiled, **kwargs) -> list[int]:
    inputs = tok(PROMPT, return_tensors="pt")
    processor = GrammarLogitsProcessor(compiled)
    out = model.generate(**inputs, logits_processor=LogitsProcessorList([processor]), max_new_tokens=40,
                         pad_token_id=0, **kwargs)
    return out[0, inputs["input_ids"].shape[1]:].tolist()


@pytest.mark.parametrize("mode", ["greedy", "sample", "assisted", "assisted-sample", "prompt-lookup"])
def test_generate_with_processor_follows_the_grammar(mode: str) -> None:
    tok, model, compiled, vocabulary = _setup()
    extra: dict = {}
    if mode.startswith("assisted"):
        extra["assistant_model"] = tiny_llama(len(tok), 4)
    if mode == "prompt-lookup":
        extra["prompt_lookup_num_tokens"] = 4
    if mode.endswith("sample"):
        torch.manual_seed(0)
        extra.update(do_sample=True, temperature=1.0)
    ids = _generate(model, tok, compiled, **extra)
    matcher = compiled.matcher()
    assert matcher.accept_tokens(ids) == len(ids)  # every token allowed, EOS only where complete
    text = _text(vocabulary, ids)
    if matcher.is_accepting():
        jsonschema.validate(json.loads(text), SCHEMA)
    if mode in ("greedy", "assisted", "prompt-lookup"):
        ours = Generator(model, tok).generate(PROMPT, SCHEMA, max_new_tokens=40)
        assert ids[: len(ours.token_ids)] == list(ours.token_ids)


def test_processor_is_rollback_safe_and_order_free() -> None:
    """Calls in any order (growing, shrinking, branching prefixes) mask exactly as a fresh
    matcher advanced along each prefix would."""
    tok, _, compiled, _ = _setup()
    prompt = torch.tensor([tok(PROMPT)["input_ids"]])
    walk, matcher = [], compiled.matcher()
    for _ in range(12):
        allowed = torch.nonzero(matcher.allowed_mask()).flatten().tolist()
        token = allowed[(len(walk) * 7919) % len(allowed)]
        matcher.accept_token(token)
        walk.append(token)
    processor = GrammarLogitsProcessor(compiled)
    order = [0, 3, 1, 12, 5, 2, 2, 11, 6, 0, 9]
    for n in order:
        ids = torch.cat([prompt, torch.tensor([walk[:n]], dtype=torch.long)], dim=1)
        got = processor(ids, torch.zeros(1, compiled.vocabulary.size))
        fresh = compiled.matcher()
        fresh.accept_tokens(walk[:n])
        assert torch.equal(torch.isfinite(got[0]), fresh.allowed_mask()), n


def test_processor_starts_over_for_a_new_prompt_and_handles_batches() -> None:
    tok, _, compiled, _ = _setup()
    processor = GrammarLogitsProcessor(compiled)
    first = torch.tensor([tok("one")["input_ids"], tok("two")["input_ids"]])
    opening = compiled.matcher().forced_tokens()[0]
    rows = torch.cat([first, torch.tensor([[opening], [opening]])], dim=1)
    processor(first, torch.zeros(2, compiled.vocabulary.size))
    after = processor(rows, torch.zeros(2, compiled.vocabulary.size))
    step = compiled.matcher()
    step.accept_token(opening)
    assert torch.equal(torch.isfinite(after[1]), step.allowed_mask())
    other = torch.tensor([tok("three")["input_ids"]])
    fresh = processor(other, torch.zeros(1, compiled.vocabulary.size))  # a new generate call
    assert torch.equal(torch.isfinite(fresh[0]), compiled.matcher().allowed_mask())


def test_processor_rejects_what_is_not_compiled() -> None:
    with pytest.raises(TypeError, match="CompiledGrammar"):
        GrammarLogitsProcessor(Grammar.from_gbnf('root ::= "x"'))


def test_processor_masks_a_mixed_batch_in_one_bitmask() -> None:
    """One call masks a batch whose rows are inside the grammar and out of it (left alone),
    with logits padded past the vocabulary (padding masked)."""
    _, _, compiled, vocabulary = _setup()
    opening = compiled.matcher().forced_tokens()[0]
    inside = compiled.matcher()
    inside.accept_token(opening)
    outside = next(i for i in range(vocabulary.size) if vocabulary.token_bytes[i] and not inside.allows(i))
    processor = GrammarLogitsProcessor(compiled, prompt_length=1)
    rows = torch.tensor([[1, opening], [1, outside]])
    scores = torch.randn(2, vocabulary.size + 7)
    before = scores.clone()
    processor(rows, scores)
    expected = before[0].clone()
    inside.apply_mask(expected)
    assert torch.equal(scores[0], expected)
    assert torch.isinf(scores[0, vocabulary.size:]).all()
    assert torch.equal(scores[1], before[1])


def test_processor_computes_the_guessed_next_mask_in_the_background() -> None:
    """After a call, the state after each row's masked argmax has its mask computed by the
    worker before the next call needs it."""
    _, _, compiled, vocabulary = _setup()
    processor = GrammarLogitsProcessor(compiled, prompt_length=1)
    scores = torch.randn(1, vocabulary.size)
    processor(torch.tensor([[1]]), scores)
    guess = int(scores[0].argmax())
    processor._pending.result()
    following = compiled.matcher()
    assert following.accept_token(guess)
    assert compiled.known_mask_words(following.state) is not None


def test_processor_with_a_structural_tag() -> None:
    from structspec import StructuralTag, Tag

    tok = tokenizer("llama2")
    model = tiny_llama(len(tok), 3)
    vocabulary = Vocabulary.from_tokenizer(tok, vocab_size=model.config.vocab_size)
    tags = StructuralTag([Tag("<rec>", SCHEMA, "</rec>")], min_segments=1, max_segments=1, free_text=False)
    compiled = structspec.compile(tags, vocabulary)
    ids = _generate(model, tok, compiled)
    matcher = compiled.matcher()
    assert matcher.accept_tokens(ids) == len(ids)
    assert matcher.is_accepting()
    (segment,) = tags.parse(_text(vocabulary, ids)).segments
    jsonschema.validate(segment.value, SCHEMA)
