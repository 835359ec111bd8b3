"""Batched decoding is exact: every row of a batch decodes as it would alone.

* Greedy: over random batches (prompts, constraints, token limits, draft sources, batch caps),
  each row's tokens are token for token what ``Generator.generate`` gives it alone, on a random
  tiny Llama over the gpt2 tokenizer and on the bundled demo pair (draft trees in every row).
* Plain sampling: a seeded row draws what it draws alone (each row has its own generator).
* The packed cache: every row's logits equal a fresh single-sequence cache's, draft trees,
  shared prompt prefixes and compaction included, for SDPA and eager attention.
* A row joining with a prompt that shares a long prefix with another joining row waits a step
  and shares it.
* Rows leave on cancel; a model that cannot take the batch's masks decodes row by row.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_models import one_thread, tiny_llama, tokenizer

from structspec.generation import Generator, SpecConfig
from structspec.generation.batch import WAIT_FOR_PREFIX
from structspec.generation.batch_cache import ALONE_GAIN, KEPT_ROWS, BatchCache
from structspec.generation.cache import CachedModel, common_prefix
from structspec.generation.sequence import Request

__all__ = ["one_thread"]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 2},
    },
    "required": ["name", "age", "colors"],
    "additionalProperties": False,
}
GBNF = 'root ::= "items: " item (", " item){0,3} "."\nitem ::= [a-z]{1,6} | [0-9]{1,3}'
PROMPTS = [
    'Alice is 31 and likes red and blue. {"name":"Alice","age":31,"colors":["red","blue"]} items: red, 31.',
    "Bob, 7, green.",
    'items: cat, dog, 12. {"name":"Bob","age":7,"colors":["green"]} Alice is 31 and likes red and blue.',
    "x",
]
SOURCES = [None, ("forced",), ("ngram",), ("forced", "ngram")]


@functools.cache
def _generator() -> Generator:
    tok = tokenizer("gpt2")
    return Generator(tiny_llama(len(tok), 1, scale=0.2), tok)


def _spec(sources: tuple[str, ...] | None) -> SpecConfig | None:
    return None if sources is None else SpecConfig(sources=sources)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.sampled_from(PROMPTS), st.sampled_from([SCHEMA, GBNF]), st.integers(1, 40)),
             min_size=1, max_size=5),
    st.sampled_from(SOURCES),
    st.integers(1, 4),
)
def test_greedy_rows_are_token_identical_to_decoding_alone(rows, sources, max_batch: int) -> None:
    gen = _generator()
    requests = [Request(prompt, constraint, max_new_tokens=limit) for prompt, constraint, limit in rows]
    batched = gen.generate_batch(requests, speculative=_spec(sources), max_batch=max_batch)
    for request, result in zip(requests, batched, strict=True):
        alone = gen.generate(request.prompt, request.constraint, max_new_tokens=request.max_new_tokens,
                             speculative=_spec(sources))
        assert result.token_ids == alone.token_ids
        assert (result.text, result.value, result.stats.stop_reason) == (alone.text, alone.value,
                                                                          alone.stats.stop_reason)
        assert result.stats.tokens == len(result.token_ids)


def test_seeded_plain_sampling_draws_what_each_row_draws_alone() -> None:
    gen = _generator()
    requests = [Request(PROMPTS[i % 3], GBNF, max_new_tokens=30, temperature=t, top_k=k, seed=i)
                for i, (t, k) in enumerate([(0.7, 0), (1.0, 50), (1.3, 0), (0.0, 0), (1.0, 5)])]
    batched = gen.generate_batch(requests)
    for request, result in zip(requests, batched, strict=True):
        alone = gen.generate(request.prompt, request.constraint, max_new_tokens=30,
                             temperature=request.temperature, top_k=request.top_k, seed=request.seed)
        assert result.token_ids == alone.token_ids


def test_demo_pair_rows_with_draft_trees_are_token_identical() -> None:
    from structspec.models import load
    from structspec.models.prompt import extraction_messages

    model, tok = load("demo")
    draft, _ = load("demo-draft")
    gen = Generator(model, tok, draft_model=draft)
    schema = {"type": "object", "properties": {"title": {"type": "string"}, "date": {"type": "string"},
              "venue": {"type": "string"}, "free": {"type": "boolean"}},
              "required": ["title", "date", "venue", "free"], "additionalProperties": False}
    contact = {"type": "object", "properties": {"name": {"type": "string"}, "email": {"type": "string"}},
               "required": ["name", "email"], "additionalProperties": False}
    requests = [
        Request(extraction_messages("Spring Garden Fair on 2024-05-12 at the Town Hall park. Entry is free.", schema),
                schema, max_new_tokens=64),
        Request(extraction_messages("Reach Lily Stone at lily@example.com, Leeds.", contact), contact,
                max_new_tokens=48),
        Request(extraction_messages("Jazz night, 2025-01-03, Blue Note. Tickets 20 EUR.", schema), schema,
                max_new_tokens=8),
    ]
    for spec in (SpecConfig(sources=("forced", "ngram")), SpecConfig()):
        batched = gen.generate_batch(requests, speculative=spec)
        for request, result in zip(requests, batched, strict=True):
            alone = gen.generate(request.prompt, request.constraint, max_new_tokens=request.max_new_tokens,
                                 speculative=spec)
            assert result.token_ids == alone.token_ids
    assert sum(result.stats.branches_taken for result in batched) > 0
    assert batched[0].value is not None and batched[2].stats.stop_reason == "max_new_tokens"


def test_a_row_joining_with_a_shared_prompt_waits_a_step_to_share_it() -> None:
    """Two prompts sharing more than WAIT_FOR_PREFIX tokens join together: the second waits one
    step, then holds a copy of the first one's cache for the shared part; both decode as alone."""
    gen = _generator()
    requests = [Request(PROMPTS[0] + tail, GBNF, max_new_tokens=12) for tail in (" One.", " Two!")]
    batch = gen.batch()
    first, second = (gen.sequence(request) for request in requests)
    batch.add(first)
    batch.add(second)
    batch.step()
    assert batch.rows == [first] and len(batch) == 2
    forward, held = batch.cache.logits, []
    batch.cache.logits = lambda feeds: held.append([list(t) for t in batch.cache.tokens]) or forward(feeds)
    batch.step()
    shared = common_prefix(first.decoding.sequence, second.decoding.sequence, len(second.decoding.sequence))
    assert shared >= WAIT_FOR_PREFIX and held[0][1] == second.decoding.sequence[:shared]  # held, not fed
    while len(batch):
        batch.step()
    for request, row in zip(requests, (first, second), strict=True):
        assert row.result.token_ids == gen.generate(request.prompt, GBNF, max_new_tokens=12).token_ids


def test_a_bad_request_names_its_index_before_any_decoding() -> None:
    gen = _generator()
    with pytest.raises(ValueError, match=r"requests\[1\]: .*max_new_tokens"):
        gen.generate_batch([Request("x", GBNF), Request("x", GBNF, max_new_tokens=0)])
    with pytest.raises(ValueError, match="max_batch"):
        gen.generate_batch([Request("x", GBNF)], max_batch=0)


def test_a_cancelled_row_leaves_and_the_others_go_on() -> None:
    gen = _generator()
    batch = gen.batch()
    requests = [Request(prompt, SCHEMA, max_new_tokens=40) for prompt in PROMPTS[:3]]
    rows = [gen.sequence(request) for request in requests]
    for row in rows:
        batch.add(row)
    batch.step()
    batch.step()
    batch.cancel(rows[1])
    assert len(batch) == 2 and rows[1].result is not None and rows[1].result.stats.tokens == 2
    while len(batch):
        batch.step()
    for index in (0, 2):
        alone = gen.generate(requests[index].prompt, SCHEMA, max_new_tokens=40)
        assert rows[index].result.token_ids == alone.token_ids


def test_a_model_without_batch_masks_decodes_row_by_row() -> None:
    from transformers import MistralConfig, MistralForCausalLM

    tok = tokenizer("gpt2")
    config = MistralConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=16)
    torch.manual_seed(0)
    gen = Generator(MistralForCausalLM(config).eval(), tok)
    requests = [Request(prompt, GBNF, max_new_tokens=20) for prompt in PROMPTS[:3]]
    batch = gen.batch()
    assert batch.cache is None
    for request, result in zip(requests, gen.generate_batch(requests), strict=True):
        assert result.token_ids == gen.generate(request.prompt, GBNF, max_new_tokens=20).token_ids


VOCAB = 64


@functools.cache
def _small(attention: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         attn_implementation=attention)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _alone(model, sequence: list[int], tokens: list[int], parents: list[int]) -> torch.Tensor:
    cached = CachedModel(model, VOCAB, trees=True)
    return cached.tree_logits(sequence, tokens, parents).cpu()


TREES = st.lists(st.integers(-1, 6), min_size=0, max_size=6).map(
    lambda raw: [min(parent, i - 1) for i, parent in enumerate(raw)]
)


@pytest.mark.parametrize("alone_gain", [0, ALONE_GAIN])  # 0: any longer feed is attended on its own
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, VOCAB - 1), min_size=1, max_size=12), min_size=1, max_size=4),
    st.lists(st.tuples(TREES, st.integers(0, 6)), min_size=3, max_size=3),
    st.data(),
)
def test_rows_see_only_their_own_tokens(attention: str, alone_gain: int, prompts, rounds, data) -> None:
    """Each round feeds every row its pending tokens (a row's first: the part of its prompt it
    does not share) plus a draft tree and keeps a random branch; every row's logits match a
    fresh single-sequence cache of the same sequence and tree. Rows that join after the first
    round extend the first row's prompt and start with a copy of its cache for the shared part."""
    model = _small(attention)
    joining = [prompts[0][: len(prompts[0]) // 2 + 1] + p for p in prompts[1:]]
    cache = BatchCache(model, VOCAB)
    cache.alone_gain = alone_gain
    cache.add([p[:-1] for p in prompts])
    sequences = [list(p) for p in prompts]
    for index, (parents, drop) in enumerate(rounds):
        if index == 1 and joining:
            held = [cache.held(p[:-1]) for p in joining]
            cache.add([p[:-1] for p in joining])
            for row, prompt, (shared, source) in zip(range(len(sequences), len(cache)), joining, held, strict=True):
                assert shared >= min(len(prompts[0]) // 2 + 1, len(prompt) - 1) and cache.tokens[row] == prompt[:shared]
                for layer in cache.cache.layers:
                    place = cache.places[row]
                    assert torch.equal(layer.keys[place, :, :shared], layer.keys[source, :, :shared])
            sequences += [list(p) for p in joining]
        feeds = []
        for row, sequence in enumerate(sequences):
            tokens = [(7 * row + 3 * i + 1) % (VOCAB - 1) + 1 for i in range(len(parents))]
            pending = sequence[len(cache.tokens[row]) :]
            feeds.append((pending + tokens, list(range(-1, len(pending) - 1))
                          + [len(pending) - 1 if p < 0 else len(pending) + p for p in parents], len(parents) + 1))
        got = cache.logits(feeds)
        for row, (sequence, (fed, _, _)) in enumerate(zip(sequences, feeds, strict=True)):
            pending = len(fed) - len(parents)
            expected = _alone(model, sequence, fed[pending:], parents)
            torch.testing.assert_close(got[row].cpu(), expected, atol=1e-4, rtol=1e-4)
            node = data.draw(st.integers(-1, len(parents) - 1))
            path = []
            while node >= 0:
                path.insert(0, node)
                node = parents[node]
            cache.keep(row, list(range(pending)) + [pending + n for n in path])
            sequence += [fed[pending + n] for n in path] + [5]
        if drop and len(sequences) > 1:
            gone = 1 + drop % (len(sequences) - 1)  # the first row stays: later rows share its prompt
            cache.retain([r for r in range(len(sequences)) if r != gone])
            del sequences[gone]


def test_rows_that_left_are_kept_for_later_prompts_to_share() -> None:
    """A row that leaves stays in the cache (the latest KEPT_ROWS of them): a prompt joining
    later starts out holding the prefix it shares with it, and its logits are those of a fresh
    single-sequence cache."""
    model = _small("sdpa")
    cache = BatchCache(model, VOCAB)

    def fed(tokens: list[int]) -> tuple[list[int], list[int], int]:
        return tokens, list(range(-1, len(tokens) - 1)), 1

    first = [3, 1, 4, 1, 5, 9, 2, 6]
    cache.add([first])
    cache.logits([fed(first)])
    cache.keep(0, list(range(len(first))))
    cache.retain([])
    assert len(cache) == 0 and [tokens for tokens, _ in cache.kept] == [first]
    later = [*first[:5], 7, 7]
    assert cache.held(later) == (5, cache.kept[0][1])
    cache.add([later])
    assert cache.tokens[0] == later[:5]
    got = cache.logits([fed(later[5:])])[0].cpu()
    torch.testing.assert_close(got, _alone(model, later, [], []), atol=1e-4, rtol=1e-4)
    cache.keep(0, [0, 1])
    for token in (8, 9, 10):  # more rows come and go: only the latest KEPT_ROWS stay
        cache.retain([])
        cache.add([[token] * 3])
        cache.logits([fed([token] * 3)])
        cache.keep(0, [0, 1, 2])
    cache.retain([])
    assert [tokens for tokens, _ in cache.kept] == [later, [8] * 3, [9] * 3, [10] * 3][-KEPT_ROWS:]
