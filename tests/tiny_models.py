"""Tiny causal LMs and tokenizers for the generation tests (shared by test_generation,
test_speculative and test_hf_processor).

Models are random ``LlamaForCausalLM``s built from a config (2 layers, hidden 32) over real
tokenizers from the shared assets; ``scale`` sets the weight spread (larger: peakier logits).
Torch runs on one thread while these tests run: tiny models are dominated by per-op overhead
and two threads on the shared cores only contend.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from conftest import assets_dir, tokenizer_dir


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Run the module's tests with one torch thread (restored afterwards)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@functools.cache
def tokenizer(name: str) -> Any:
    """A shared-assets tokenizer by folder name (``gpt2``, ``llama2``, ...), or ``stories260K``."""
    from transformers import AutoTokenizer

    if name == "stories260K":
        return AutoTokenizer.from_pretrained(stories_dir())
    return AutoTokenizer.from_pretrained(tokenizer_dir(name))


def stories_dir() -> Any:
    """The stories260K model folder; skips when absent."""
    path = assets_dir() / "models" / "stories260K"
    if not (path / "model.safetensors").is_file():
        pytest.skip(f"stories260K not found at {path}")
    return path


@functools.cache
def stories_model() -> Any:
    """The real stories260K weights."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(stories_dir()).eval()


@functools.cache
def tiny_llama(vocab_size: int, seed: int, scale: float = 0.02, layers: int = 2) -> Any:
    """A random LlamaForCausalLM (hidden 32) with ``vocab_size`` logits, reproducible by seed."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        initializer_range=scale,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()
