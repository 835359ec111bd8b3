"""Speculative decoding is exact.

* Greedy: speculative output is token-identical to plain constrained greedy output, for random
  tiny Llama models over real tokenizers (gpt2, llama2), several seeds, JSON Schema and GBNF
  constraints, and every drafter combination (forced / n-gram / draft model / all), with a
  draft model that agrees with the target (the target itself) and one that does not.
* Sampling: the distribution of speculative outputs equals plain masked sampling, checked by
  chi-square goodness of fit against the exact distribution (enumerated by brute force over
  the grammar's token tree) on the 512-id stories260K vocabulary. Each check rejects at
  p < 1e-3, so a correct implementation fails a given check with probability 0.1% over seeds;
  seeds are fixed and the draft lengths do not depend on timing (``fixed_forward_cost``), so the
  outcome is reproducible.
* Real weights (stories260K) give JSON that validates against sample schemas.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tiny_models import one_thread, stories_model, tiny_llama, tokenizer

from structspec import Grammar, Vocabulary
from structspec import compile as compile_grammar
from structspec.generation import Generator, SpecConfig
from structspec.generation.adaptive import ForwardCost
from structspec.generation.budget import fits
from structspec.generation.chain import Draft
from structspec.generation.logit_rows import LogitRows
from structspec.generation.sampling import Sampling
from structspec.generation.stats import SourceStats, Stats
from structspec.generation.verify import verify

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
PROMPT = 'Alice is 31 and likes red and blue. {"name":"Alice","age":31,"colors":["red","blue"]} items: red, 31.'
COMBOS = {
    "forced": ("forced",),
    "ngram": ("ngram",),
    "draft": ("draft",),
    "forced+ngram": ("forced", "ngram"),
    "all": ("forced", "ngram", "draft"),
}


def _spec(sources: tuple[str, ...] | None = None) -> SpecConfig:
    """Drafting from ``sources`` (all when None). The test draft models are as large as their
    targets, so measured costs would stop the draft model; a zero draft cost keeps its path
    (sampled drafts, rejections, cache crops) under test."""
    return SpecConfig(sources=sources, draft_cost=0.0)


@pytest.fixture
def fixed_forward_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave the target's forward unmeasured, so a drafted token's price is ``draft_cost`` alone.
    Measured forward times decide the draft lengths, and with them how many random draws each
    round makes: with timing in play the same seeds sample different outputs from run to run."""
    monkeypatch.setattr(ForwardCost, "add", lambda self, fed, seconds: None)


def _valid(constraint, text: str) -> bool:
    if isinstance(constraint, dict):
        jsonschema.validate(json.loads(text), constraint)
        return True
    return Grammar.from_gbnf(constraint).matches(text)


@pytest.mark.parametrize("tokenizer_name", ["gpt2", "llama2"])
@pytest.mark.parametrize("constraint", [SCHEMA, GBNF], ids=["schema", "gbnf"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_speculative_is_token_identical(tokenizer_name: str, constraint, seed: int) -> None:
    tok = tokenizer(tokenizer_name)
    target = tiny_llama(len(tok), seed)
    stranger = tiny_llama(len(tok), seed + 100)
    plain = Generator(target, tok).generate(PROMPT, constraint, max_new_tokens=40)
    assert plain.stats.target_forwards == plain.stats.tokens
    if plain.stats.stop_reason != "max_new_tokens":
        assert _valid(constraint, plain.text)
    for draft_model in (target, stranger):
        gen = Generator(target, tok, draft_model=draft_model)
        for name, sources in COMBOS.items():
            result = gen.generate(PROMPT, constraint, max_new_tokens=40, speculative=_spec(sources))
            assert result.token_ids == plain.token_ids, (name, draft_model is target)
            assert result.text == plain.text
            assert result.stats.stop_reason == plain.stats.stop_reason
            assert result.stats.target_forwards <= plain.stats.target_forwards
            if name == "draft" and draft_model is target:
                assert result.stats.acceptance_rate == 1.0  # a draft equal to the target is always right


def test_a_generator_tokenizes_a_span_once_across_its_generations(
    fixed_forward_cost: None, encoded_spans: list[bytes]
) -> None:
    """The n-gram sources of a generator's sequences share its spans cache: the same request
    again (the same drafts: the forward's cost is left unmeasured) tokenizes no span and gives
    the same tokens; another generator tokenizes afresh."""
    encoded = encoded_spans
    tok = tokenizer("gpt2")
    target = tiny_llama(len(tok), 0)
    gen = Generator(target, tok)
    first = gen.generate(PROMPT, SCHEMA, max_new_tokens=40, speculative=_spec(("ngram",)))
    spans = len(encoded)
    assert spans > 0
    again = gen.generate(PROMPT, SCHEMA, max_new_tokens=40, speculative=_spec(("ngram",)))
    assert again.token_ids == first.token_ids and len(encoded) == spans
    other = Generator(target, tok).generate(PROMPT, SCHEMA, max_new_tokens=40, speculative=_spec(("ngram",)))
    assert other.token_ids == first.token_ids and len(encoded) > spans


def test_a_draft_model_cache_starts_from_the_prefix_shared_with_an_earlier_sequence() -> None:
    """A new sequence's draft-model cache copies what the latest sequences' caches hold of its
    prompt: its first draft forward feeds only the rest, and the output stays what plain
    decoding gives."""
    tok = tokenizer("gpt2")
    target, drafter = tiny_llama(len(tok), 0), tiny_llama(len(tok), 5)
    gen = Generator(target, tok, draft_model=drafter)
    fed: list[int] = []
    drafter.register_forward_hook(lambda module, args, kwargs, out: fed.append(kwargs["input_ids"].shape[1]),
                                  with_kwargs=True)
    gen.generate(PROMPT, GBNF, max_new_tokens=12, speculative=_spec(("draft",)))
    prompt_length = fed[0]
    other = PROMPT[:-4] + " blue, 7."
    fed.clear()
    result = gen.generate(other, GBNF, max_new_tokens=12, speculative=_spec(("draft",)))
    shared = len(tok(PROMPT[:-4])["input_ids"]) - 1
    assert fed and fed[0] < prompt_length - shared // 2
    assert result.token_ids == Generator(target, tok).generate(other, GBNF, max_new_tokens=12).token_ids


def test_adopting_a_cache_holds_the_shared_prefix_and_gives_the_same_logits() -> None:
    from structspec.generation.cache import CachedModel

    model = tiny_llama(64, 3)
    donor = CachedModel(model, 64)
    donor.logits([5, 6, 7, 8, 9, 10], 1)
    sequence = [5, 6, 7, 8, 20, 21]
    adopted = CachedModel(model, 64)
    adopted.adopt(donor, sequence)
    assert adopted.tokens == [5, 6, 7, 8]
    torch.testing.assert_close(adopted.logits(sequence, 2).cpu(), CachedModel(model, 64).logits(sequence, 2).cpu(),
                               atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="only an empty cache"):
        adopted.adopt(donor, sequence)
    whole = CachedModel(model, 64)
    whole.adopt(donor, [5, 6, 7, 8, 9, 10])
    assert whole.tokens == [5, 6, 7, 8, 9]  # all but the last token: something is left to feed


# -- sampling ----------------------------------------------------------------------------------

SAMPLING_GRAMMAR = 'root ::= [ab] " ab" [ab]?'


def _exact_distribution(
    model, prompt: list[int], compiled, sampling: Sampling, budget: int | None = None
) -> dict[tuple[int, ...], float]:
    """Probability of every complete output of plain masked sampling, by walking the token tree;
    with a ``budget``, each step's distribution is restricted to the tokens after which the text
    can still be completed in the tokens left (and renormalized)."""
    leaves: dict[tuple[int, ...], float] = {}
    stack = [((), compiled.matcher(), 1.0)]
    while stack:
        tokens, matcher, prob = stack.pop()
        if matcher.is_finished() or len(tokens) == budget:
            leaves[tokens] = leaves.get(tokens, 0.0) + prob
            continue
        with torch.no_grad():
            row = model(input_ids=torch.tensor([prompt + list(tokens)])).logits[0, -1].float()
        probs = sampling.probs(matcher.apply_mask(row))
        if budget is not None:
            for token in torch.nonzero(probs > 0).flatten().tolist():
                probs[token] *= fits(matcher, token, budget - len(tokens) - 1)
            probs /= probs.sum()
        for token in torch.nonzero(probs > 0).flatten().tolist():
            child = matcher.copy()
            assert child.accept_token(token)
            stack.append(((*tokens, token), child, prob * float(probs[token])))
    return leaves


def _chi_square_p(counts: dict, expected: dict[tuple, float], n: int) -> float:
    """p-value of the counts under ``expected``; outcomes expected fewer than 5 times are pooled."""
    assert set(counts) <= set(expected), "an outcome plain sampling can never produce"
    stat, cells, pooled_obs, pooled_exp = 0.0, 0, 0, 0.0
    for outcome, p in expected.items():
        if n * p >= 5:
            stat += (counts.get(outcome, 0) - n * p) ** 2 / (n * p)
            cells += 1
        else:
            pooled_obs += counts.get(outcome, 0)
            pooled_exp += n * p
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        cells += 1
    dof = max(cells - 1, 1)
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2)))


@pytest.mark.parametrize(
    ("sources", "temperature", "top_k", "top_p"),
    [
        (None, 1.0, 0, 1.0),
        (("forced", "ngram", "draft"), 1.0, 0, 1.0),
        (("draft", "ngram"), 0.8, 3, 0.9),
    ],
    ids=["plain", "all", "draft+ngram-topk-topp"],
)
def test_sampling_matches_plain_distribution(fixed_forward_cost: None, sources, temperature: float, top_k: int,
                                             top_p: float) -> None:
    tok = tokenizer("stories260K")
    target = tiny_llama(len(tok), 7, scale=0.4)
    drafter = tiny_llama(len(tok), 8, scale=0.4)
    gen = Generator(target, tok, draft_model=drafter)
    prompt = "a ab b ab ba"
    _, compiled = gen.compile(SAMPLING_GRAMMAR)
    sampling = Sampling(temperature, top_k, top_p)
    expected = _exact_distribution(target, list(tok(prompt)["input_ids"]), compiled, sampling)
    spec = _spec(sources) if sources else None
    n = 300
    counts: dict[tuple[int, ...], int] = {}
    drafted = 0
    for seed in range(n):
        result = gen.generate(prompt, SAMPLING_GRAMMAR, max_new_tokens=8, temperature=temperature,
                              top_k=top_k, top_p=top_p, seed=seed, speculative=spec)
        counts[result.token_ids] = counts.get(result.token_ids, 0) + 1
        drafted += result.stats.draft_forwards
    assert _chi_square_p(counts, expected, n) > 1e-3
    assert drafted > 0 if spec else drafted == 0


@pytest.mark.parametrize("sources", [None, ("forced", "ngram", "draft")], ids=["plain", "all"])
def test_sampling_under_a_tight_budget_is_masked_sampling_conditioned_on_finishing(fixed_forward_cost: None,
                                                                                  sources) -> None:
    """Three tokens for ``[ab]+ "."``: the last must close, so the budget guard replaces the
    tokens that would not; outputs follow the masked distribution restricted, step by step, to
    the tokens that leave room to finish."""
    grammar = 'root ::= [ab]+ "."'
    tok = tokenizer("stories260K")
    target = tiny_llama(len(tok), 7, scale=0.4)
    gen = Generator(target, tok, draft_model=tiny_llama(len(tok), 8, scale=0.4))
    prompt = "a ab b ab ba"
    _, compiled = gen.compile(grammar)
    sampling = Sampling(1.0)
    expected = _exact_distribution(target, list(tok(prompt)["input_ids"]), compiled, sampling, budget=3)
    assert all(tok.decode(list(tokens)).endswith(".") for tokens in expected)
    spec = _spec(sources) if sources else None
    n = 300
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(n):
        result = gen.generate(prompt, grammar, max_new_tokens=3, temperature=1.0, seed=seed, speculative=spec)
        counts[result.token_ids] = counts.get(result.token_ids, 0) + 1
    assert _chi_square_p(counts, expected, n) > 1e-3


@pytest.mark.parametrize("combo", list(COMBOS))
def test_greedy_speculative_is_token_identical_under_a_tight_budget(combo: str) -> None:
    tok = tokenizer("gpt2")
    target = tiny_llama(len(tok), 3)
    gen = Generator(target, tok, draft_model=tiny_llama(len(tok), 103))
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items":
              {"type": "string"}}}, "required": ["name", "tags"], "additionalProperties": False}
    _, compiled = gen.compile(schema)
    budget = int(compiled.matcher().tokens_to_finish()) + 4
    plain = gen.generate(PROMPT, schema, max_new_tokens=budget)
    assert plain.stats.budget_cuts > 0 and plain.stats.stop_reason == "max_new_tokens"
    jsonschema.validate(plain.value, schema)
    spec = gen.generate(PROMPT, schema, max_new_tokens=budget, speculative=_spec(COMBOS[combo]))
    assert spec.token_ids == plain.token_ids


def test_verify_one_step_is_exact_for_sampled_and_one_hot_drafts() -> None:
    """One verification step alone: the token in the drafted position is distributed as the
    target's masked p whatever q drafted it (5,000 draws per case, p < 1e-3 rejects)."""
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"c", b"d", b"e", None], eos_ids=[5])
    compiled = compile_grammar(Grammar.from_gbnf("root ::= [a-d] [a-e]"), vocab)
    rng = torch.Generator().manual_seed(0)
    logits = torch.tensor([[1.0, 0.2, -0.5, 0.7, 3.0, 0.0], [0.0] * 6])
    sampling = Sampling(temperature=1.0)
    p = sampling.probs(compiled.matcher().apply_mask(logits[0].clone()))
    q_model = torch.tensor([0.05, 0.6, 0.3, 0.05, 0.0, 0.0])
    n = 5000
    for q in (q_model, None):
        counts: dict[tuple[int], int] = {}
        for _ in range(n):
            token = int(torch.multinomial(q_model, 1, generator=rng)) if q is not None else 2
            draft = Draft()
            draft.extend([token], [q], "draft" if q is not None else "ngram")
            path, bonus = verify(LogitRows(logits.clone(), 6), draft, compiled.matcher(), sampling, rng, Stats())
            first = token if path else bonus
            counts[(first,)] = counts.get((first,), 0) + 1
        expected = {(i,): float(p[i]) for i in range(4)}
        assert _chi_square_p(counts, expected, n) > 1e-3


SPECIAL_LOGITS = st.sampled_from([float("-inf"), -1.0, 0.0, 0.5, 2.0, float("inf"), float("nan")])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@given(st.lists(SPECIAL_LOGITS, min_size=6, max_size=8), st.sampled_from([b"", b"a", b"c"]))
def test_verify_greedy_choice_is_masked_argmax(dtype: torch.dtype, row: list[float], prefix: bytes) -> None:
    """verify's greedy token is torch's argmax of the masked row, on rows full of ties,
    infinities and NaN, wider than the vocabulary or not: float32 rows read through numpy
    (:meth:`Matcher.masked_argmax`), other rows (as an accelerator's stay) through the argmax of
    the whole block, a row read only when its argmax is forbidden."""
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"c", b"d", b"e", None], eos_ids=[5])
    compiled = compile_grammar(Grammar.from_gbnf("root ::= [a-d] [a-e]"), vocab)
    matcher, oracle = compiled.matcher(), compiled.matcher()
    for walker in (matcher, oracle):
        walker.accept_tokens([b"abcde".index(prefix)] if prefix else [])
    logits = torch.tensor([row], dtype=dtype)
    expected = int(oracle.apply_mask(logits[0, :6].float().clone()).argmax())
    rows = LogitRows(logits, 6)
    if not oracle.allows(expected):  # an all -inf row once masked: both read a forbidden token
        with pytest.raises(RuntimeError, match="forbids"):
            verify(rows, Draft(), matcher, Sampling(), torch.Generator(), Stats())
        return
    assert verify(rows, Draft(), matcher, Sampling(), torch.Generator(), Stats()) == ([], expected)


def _allowed_argmax_by_masking(row: np.ndarray, words: np.ndarray, size: int) -> int:
    """The stand-in for a forbidden argmax as it was first written: the whole row masked."""
    allowed = np.unpackbits(words.view(np.uint8), count=size, bitorder="little").view(np.bool_)
    return int(np.where(allowed, row[:size], -np.inf).argmax())


@given(st.data(), st.integers(1, 100), st.integers(0, 40))
def test_a_forbidden_argmax_gives_way_to_the_masked_rows_argmax(data, size: int, padding: int) -> None:
    """The stand-in for a forbidden argmax (:meth:`Matcher.masked_argmax`, which verify reads) is
    the argmax of the row masked in place (every forbidden id and every id past the vocabulary
    at -inf), as masked decoding reads it: NaN first, the lowest id among ties, 0 for an all
    -inf row; over masks of several words, read again from the cache of allowed ids, and with
    a row shorter than the mask (``size`` cut), the same token as masking the whole row."""
    from structspec.masks.matcher import _allowed_argmax

    row = np.array(data.draw(st.lists(SPECIAL_LOGITS, min_size=size + padding, max_size=size + padding)),
                   dtype=np.float32)
    allowed = np.array(data.draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    words = np.packbits(np.concatenate([allowed, np.zeros(-size % 32, bool)]), bitorder="little").view(np.uint32)
    masked = row.copy()
    masked[:size][~allowed] = -np.inf
    masked[size:] = -np.inf
    assert _allowed_argmax(row, words, size) == int(masked.argmax())
    assert _allowed_argmax(row, words, size) == _allowed_argmax_by_masking(row, words, size)
    cut = data.draw(st.integers(1, size))
    assert _allowed_argmax(row, words, cut) == _allowed_argmax_by_masking(row, words, cut)


# -- real weights ------------------------------------------------------------------------------

STORY_SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "mood": {"enum": ["happy", "sad", "scared"]},
            "age": {"type": "integer", "minimum": 1, "maximum": 99},
        },
        "required": ["name", "mood", "age"],
        "additionalProperties": False,
    },
    {
        "type": "array",
        "items": {"type": "object", "properties": {"pet": {"enum": ["cat", "dog"]}, "big": {"type": "boolean"}},
                  "required": ["pet", "big"], "additionalProperties": False},
        "minItems": 1,
        "maxItems": 2,
    },
]


@pytest.mark.parametrize("schema", STORY_SCHEMAS, ids=["person", "pets"])
def test_stories260k_yields_valid_json(schema: dict) -> None:
    tok = tokenizer("stories260K")
    model = stories_model()
    gen = Generator(model, tok, draft_model=model)
    prompt = "Once upon a time, there was a little girl named Lily. She was happy and had a big dog."
    outputs = []
    for spec in (None, _spec()):
        for temperature in (0.0, 1.0):
            result = gen.generate(prompt, schema, max_new_tokens=80, temperature=temperature, seed=3, speculative=spec)
            assert result.stats.stop_reason in ("grammar", "eos"), result.text
            jsonschema.validate(result.value, schema)
            assert json.loads(result.text) == result.value
            outputs.append(result.token_ids)
    assert outputs[0] == outputs[2]  # greedy: plain and speculative agree


def test_acceptance_follows_the_verified_spans() -> None:
    from structspec.generation.adaptive import Acceptance

    acceptance = Acceptance()
    assert acceptance.probability == 0.5  # no evidence
    for _ in range(20):
        acceptance.update(8, rejected=False)
    assert acceptance.probability > 0.95
    for _ in range(60):  # older evidence fades
        acceptance.update(0, rejected=True)
    assert acceptance.probability < 0.15


@given(
    st.floats(1e-3, 1e-1),  # above the floor ForwardCost.base keeps (a thousandth of the mean forward, < 2.6e-4 here)
    st.floats(0.0, 1e-2),
    st.lists(st.integers(1, 17), min_size=3, max_size=40).filter(lambda fed: len(set(fed[1:])) > 1),
)
def test_forward_cost_recovers_a_linear_cost(base: float, per_token: float, fed: list[int]) -> None:
    """Forwards that cost ``base + per_token * (fed - 1)`` give back both figures, whatever the
    mix of sizes; the first call (the prompt) is left out."""
    from structspec.generation.adaptive import ForwardCost

    cost = ForwardCost()
    cost.add(300, 1.0)  # the prompt: far off the line, and ignored
    for k in fed[1:]:
        cost.add(k, base + per_token * (k - 1))
    assert cost.per_token == pytest.approx(per_token, rel=1e-6, abs=1e-9)
    assert cost.base == pytest.approx(base, rel=1e-6)


def test_forward_cost_is_flat_until_two_sizes_were_seen() -> None:
    from structspec.generation.adaptive import ForwardCost

    cost = ForwardCost()
    assert cost.base is None and cost.per_token == 0.0
    cost.add(200, 0.5)
    cost.add(1, 0.002)
    cost.add(1, 0.002)
    assert cost.base == pytest.approx(0.002) and cost.per_token == 0.0


def test_a_round_credits_the_tokens_the_target_checked() -> None:
    """Two forced tokens accepted, then the first n-gram token rejected: the n-gram tokens after
    it were never checked and count as drafted only."""
    from structspec.generation.chain import DraftChain
    from structspec.generation.drafters import ForcedDrafter, NgramDrafter

    chain = DraftChain([ForcedDrafter(), NgramDrafter(32, 3)], SpecConfig())
    draft = Draft()
    draft.extend([1, 2], [None] * 2, "forced")
    draft.extend([3, 4, 5], [None] * 3, "ngram")
    stats = Stats()
    for name in draft.sources:
        stats.sources.setdefault(name, SourceStats()).drafted += 1
    chain.record(draft, [0, 1], stats)
    forced, ngram = stats.sources["forced"], stats.sources["ngram"]
    assert (forced.drafted, forced.verified, forced.accepted) == (2, 2, 2)
    assert (ngram.drafted, ngram.verified, ngram.accepted) == (3, 1, 0)
    assert stats.acceptance_rate == pytest.approx(2 / 3)
    assert chain.acceptance["ngram"].probability < 0.5 < chain.acceptance["forced"].probability


class _Runner:
    """A draft model's cache that holds the first ``held`` tokens of any sequence."""

    def __init__(self, held: int) -> None:
        self.held = held

    def pending(self, sequence: list[int]) -> int:
        return len(sequence) - min(self.held, len(sequence) - 1)


def test_a_draft_model_token_is_priced_by_its_measured_cost_or_the_configured_one() -> None:
    from structspec.generation.adaptive import DraftModelCost
    from structspec.generation.chain import DraftChain
    from structspec.generation.drafters import ForcedDrafter, ModelDrafter

    model = ModelDrafter(_Runner(held=10), Sampling(0.0), torch.Generator(), prior_price=0.25, cost=DraftModelCost())
    forced = ForcedDrafter()
    chain = DraftChain([forced, model], SpecConfig())
    context = list(range(111))
    assert chain._price(forced) == 0.0 and chain._price(model) == 0.25  # nothing measured: the prior
    assert chain._upfront(model, context) == 0.0
    for fed, seconds in [(300, 0.5), (1, 0.010), (5, 0.014), (3, 0.012)]:
        chain.forward.add(fed, seconds)
    model.cost.add(1, 0.004)  # a drafting call
    model.cost.add(51, 0.104)  # a catch-up of 50 tokens on top: 2 ms each
    assert chain._price(forced) == pytest.approx(0.1)  # 1 ms a token on a 10 ms forward
    assert chain._price(model) == pytest.approx(0.1 + 0.4)
    assert chain._upfront(forced, context) == 0.0
    assert chain._upfront(model, context) == pytest.approx(100 * 0.002 / 0.010)  # 100 tokens to catch up
    model.runner.held = 110
    assert chain._upfront(model, context) == 0.0  # only the last token is fed
    fixed = DraftChain([forced, model], SpecConfig(draft_cost=0.0))
    fixed.forward = chain.forward
    assert fixed._price(model) == pytest.approx(0.1) and fixed._upfront(model, context) == 0.0


def test_the_draft_model_drafts_only_when_its_catch_up_pays() -> None:
    """A draft model whose cache lacks most of the context is not asked for a draft when
    catching up costs more than its tokens are worth; one whose cache is current is."""
    from structspec.generation.adaptive import DraftModelCost
    from structspec.generation.chain import DraftChain
    from structspec.generation.drafters import ModelDrafter
    from structspec.generation.proposal import Proposal

    asked = []

    class Drafter(ModelDrafter):
        def propose(self, context, matcher, limit, stats):
            asked.append(limit)
            return Proposal([], [])

    class Open:  # a matcher copy that never finishes
        def is_finished(self) -> bool:
            return False

    cost = DraftModelCost()
    cost.add(1, 0.001)  # a draft token: a tenth of the verifying forward
    cost.add(101, 0.101)  # 1 ms a token caught up
    drafter = Drafter(_Runner(held=0), Sampling(0.0), torch.Generator(), prior_price=0.1, cost=cost)
    chain = DraftChain([drafter], SpecConfig())
    chain.acceptance["draft"].accepted = 50.0  # a draft model the target agrees with
    for fed, seconds in [(1, 0.010), (1, 0.010), (2, 0.010)]:
        chain.forward.add(fed, seconds)
    context = list(range(200))
    chain.draft(context, Open(), 8, Stats())
    assert asked == []  # 199 tokens to catch up: about 20 verifying forwards
    drafter.runner.held = 198
    chain.draft(context, Open(), 8, Stats())
    assert asked == [8]


@given(st.floats(0.05, 0.99), st.floats(0.01, 2.0), st.floats(0.0, 5.0), st.integers(0, 20),
       st.lists(st.floats(0.05, 1.0), max_size=6))
def test_a_paid_source_with_an_upfront_cost_drafts_the_best_count_or_none(
    acceptance: float, price: float, upfront: float, most: int, free: list[float]
) -> None:
    """With a cost paid once for its first token (a draft model catching up), the source
    drafts the count within ``most`` that maximizes expected tokens per cost, or nothing when
    no count beats the round without it."""
    from structspec.generation._chain import RoundValue

    round_ = RoundValue()
    for a in free:
        round_.add(1, a, 0.0)

    def ratio(k: int) -> float:
        trial = RoundValue(round_.survival, round_.expected, round_.cost)
        trial.add(k, acceptance, price, upfront)
        return trial.expected / trial.cost

    ratios = [ratio(k) for k in range(most + 1)]
    chosen = round_.worth(acceptance, price, most, upfront)
    assert 0 <= chosen <= most
    assert ratios[chosen] >= max(ratios) - 1e-12
    assert chosen == 0 or ratios[chosen] > ratios[0]


@given(st.floats(0.05, 0.99), st.floats(0.01, 2.0), st.lists(st.floats(0.05, 1.0), max_size=6))
def test_paid_drafts_stop_where_tokens_per_cost_peaks(acceptance: float, price: float, free: list[float]) -> None:
    """After some free draft tokens, the paid source drafts the count that maximizes expected
    committed tokens per verifying-forward cost."""
    from structspec.generation._chain import RoundValue

    round_ = RoundValue()
    for a in free:
        round_.add(1, a, 0.0)

    def ratio(k: int) -> float:
        trial = RoundValue(round_.survival, round_.expected, round_.cost)
        trial.add(k, acceptance, price)
        return trial.expected / trial.cost

    ratios = [ratio(k) for k in range(65)]
    assert ratios[round_.worth(acceptance, price)] >= max(ratios) - 1e-12
    for most in range(-1, 20):  # counted only as far as the room: the same as cutting the count
        assert round_.worth(acceptance, price, most) == max(0, min(round_.worth(acceptance, price), most))


def test_sampling_order_is_temperature_top_k_top_p() -> None:
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, float("-inf")])
    probs = Sampling(temperature=0.5, top_k=3, top_p=0.8).probs(logits)
    # after temperature: [4, 2, 1, 0]; top-3 drops id 3; softmax of [4, 2, 1] = [.84, .11, .04]:
    # the first token alone reaches 0.8, so top-p keeps only it
    assert probs.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    probs = Sampling(temperature=2.0, top_k=3, top_p=0.9).probs(logits)
    kept = torch.softmax(torch.tensor([1.0, 0.5, 0.25]), 0)
    assert torch.allclose(probs[:3], kept) and probs[3:].sum() == 0


@given(st.lists(st.tuples(st.integers(1, 40), st.floats(1e-6, 1.0)), min_size=1, max_size=30),
       st.floats(0.01, 0.99))
def test_forward_cost_means_are_the_weighted_moving_averages(calls, weight) -> None:
    """Each mean of (k, t, k*k, k*t) moves towards the call's point by the weight, bit for bit
    as ``(1 - w) * mean + w * point`` over the four of them; the first call is left out."""
    cost = ForwardCost(weight)
    means = None
    for fed, seconds in calls:
        cost.add(fed, seconds)
        if cost._calls == 1:
            continue
        k = float(fed - 1)
        point = (k, seconds, k * k, k * seconds)
        if means is not None:
            point = tuple((1 - weight) * m + weight * p for m, p in zip(means, point, strict=True))
        means = point
        assert cost._means == means
