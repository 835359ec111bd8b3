"""The KV cache goes to the model under the argument its forward takes: ``cache`` in current
transformers (``past_key_values`` is deprecated there and goes in 5.40, with a FutureWarning on
every call), ``past_key_values`` where that is all a model knows. Outputs are unchanged."""

from __future__ import annotations

import inspect
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from tiny_models import one_thread, tiny_llama

from structspec.generation.cache import CachedModel

__all__ = ["one_thread"]


def full_logits(model: Any, sequence: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([sequence])).logits[0, -1].float()


@pytest.mark.parametrize("source", ["tiny", "demo"])
def test_cached_logits_without_deprecation_warnings(source: str) -> None:
    if source == "demo":
        from structspec.models import load

        model, _ = load("demo")
    else:
        model = tiny_llama(64, seed=3)
    width = model.config.vocab_size
    sequence = [5, 9, 12, 7, 33, 2, 19, 40]
    runner = CachedModel(model, width)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # past_key_values= gave a FutureWarning on each forward
        first = runner.logits(sequence[:5], 1)[0]
        rest = runner.logits(sequence, 3)  # the cache holds five tokens: three are fed
        runner.logits([*sequence[:4], 1], 1)  # diverges: the cache is cropped first
    assert torch.allclose(first, full_logits(model, sequence[:5]), atol=1e-5)
    assert torch.allclose(rest[-1], full_logits(model, sequence), atol=1e-5)
    assert runner.tokens == [*sequence[:4], 1]


def test_models_that_only_know_past_key_values_still_get_the_cache() -> None:
    llama = tiny_llama(64, seed=3)
    seen: list[str] = []

    class Legacy(torch.nn.Module):
        """A model whose forward predates the ``cache`` argument."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = llama
            self.config = llama.config

        def forward(self, input_ids: Any = None, past_key_values: Any = None, use_cache: Any = None) -> Any:
            seen.append("past_key_values" if past_key_values is not None else "none")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                out = self.inner(input_ids=input_ids, past_key_values=past_key_values, use_cache=use_cache)
            return SimpleNamespace(logits=out.logits)

    assert "cache" not in inspect.signature(Legacy.forward).parameters
    runner = CachedModel(Legacy(), 64)
    runner.logits([5, 9, 12], 1)
    last = runner.logits([5, 9, 12, 7], 1)[0]
    assert seen == ["past_key_values", "past_key_values"]
    assert torch.allclose(last, full_logits(llama, [5, 9, 12, 7]), atol=1e-5)
