"""The one sampling-options object: its checks (against an independent statement of the ranges),
seeds mapped one to one onto torch's 64-bit generators, numerically safe tiny temperatures, and
the context-length check ``Generator.generate`` makes before decoding."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import one_thread, tiny_llama, tokenizer

from structspec.errors import StructspecError
from structspec.generation import Generator, SpecConfig
from structspec.generation.prompt import ContextLengthError
from structspec.generation.sampling import MAX_SEED, OptionError, Sampling, check

__all__ = ["one_thread"]

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70), st.booleans(),
                    st.none(), st.text(max_size=3))


def valid(name: str, value: Any) -> bool:
    """The documented ranges, written out independently of the code under test."""
    is_int = type(value) is int
    is_number = type(value) in (int, float) and math.isfinite(value)
    return {
        "temperature": is_number and 0 <= value <= 2,
        "top_p": is_number and 0 < value <= 1,
        "top_k": is_int and value >= 0,
        "seed": value is None or (is_int and 0 <= value < 2**64),
        "max_new_tokens": is_int and value >= 1,
    }[name]


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(["temperature", "top_p", "top_k", "seed", "max_new_tokens"]), value=NUMBERS)
def test_an_option_is_accepted_exactly_when_it_is_in_range(name: str, value: Any) -> None:
    try:
        options = Sampling(**{name: value})
    except OptionError as exc:
        assert not valid(name, value)
        assert exc.field == name and str(exc) == f"{name} {exc.problem}"
        assert repr(value) in exc.problem or str(value) in exc.problem
        assert isinstance(exc, StructspecError) and isinstance(exc, ValueError)
    else:
        assert valid(name, value)
        assert getattr(options, name) == value


def test_a_temperature_that_is_not_finite_says_so() -> None:
    for value in (math.nan, math.inf):
        with pytest.raises(OptionError, match="must be a finite number in"):
            check("temperature", value)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, MAX_SEED))
def test_every_accepted_seed_is_its_own_torch_seed(seed: int) -> None:
    # One to one: torch folds negative seeds onto the top of the range, which is why they are refused.
    assert Sampling(seed=seed).rng().initial_seed() == seed


@settings(max_examples=200, deadline=None)
@given(temperature=st.floats(0, 2, exclude_min=True), scale=st.floats(1e-3, 1e4))
def test_probabilities_are_a_distribution_at_any_temperature(temperature: float, scale: float) -> None:
    logits = torch.tensor([3.0, -1.0, 3.0, float("-inf"), 0.5]) * scale
    probs = Sampling(temperature=temperature).probs(logits)
    assert torch.isfinite(probs).all() and abs(float(probs.sum()) - 1) < 1e-5
    assert float(probs[3]) == 0.0


def test_a_tiny_temperature_is_greedy_over_the_best_tokens() -> None:
    logits = torch.tensor([3.0, -1.0, 3.0, float("-inf"), 0.5])
    for temperature in (5e-324, 1e-200, 1e-40):
        assert Sampling(temperature=temperature).probs(logits).tolist() == [0.5, 0.0, 0.5, 0.0, 0.0]


def test_the_options_import_without_torch() -> None:
    code = "import sys, structspec.generation.sampling; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _gen(draft_context: int | None = None) -> Generator:
    tok = tokenizer("gpt2")
    draft = None
    if draft_context is not None:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=draft_context)
        torch.manual_seed(0)
        draft = LlamaForCausalLM(config).eval()
    return Generator(tiny_llama(len(tok), 5), tok, draft_model=draft)  # a 1024-token context


def test_generate_refuses_a_prompt_past_the_context_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _gen()
    monkeypatch.setattr(gen, "compile", lambda _: pytest.fail("compiled, so it would have decoded"))
    prompt = "one two three " * 400
    with pytest.raises(ContextLengthError) as caught:
        gen.generate(prompt, 'root ::= "a"', max_new_tokens=8)
    error = caught.value
    length = len(gen.tokenizer(prompt)["input_ids"])
    assert (error.prompt_tokens, error.max_new_tokens, error.context, error.which) == (length, 8, 1024, "model")
    assert "context of 1024 tokens" in str(error) and isinstance(error, StructspecError)
    with pytest.raises(ContextLengthError):  # fits alone, not with the tokens asked for
        gen.generate("one two three " * 300, 'root ::= "a"', max_new_tokens=200)


def test_the_draft_models_context_counts_too() -> None:
    gen = _gen(draft_context=64)
    with pytest.raises(ContextLengthError, match="draft model's context of 64 tokens"):
        gen.generate("one two three " * 20, 'root ::= "a"', max_new_tokens=8, speculative=SpecConfig())
    assert gen.generate("one two", 'root ::= "a"', max_new_tokens=8, speculative=SpecConfig()).text == "a"


def test_generate_names_a_bad_seed() -> None:
    gen = _gen()
    with pytest.raises(OptionError, match=r"seed must be in 0\.\.18446744073709551615"):
        gen.generate("x", 'root ::= "a"', temperature=1.0, seed=2**70)
    assert gen.generate("x", 'root ::= "a" | "b"', temperature=1.0, seed=MAX_SEED).text in {"a", "b"}
