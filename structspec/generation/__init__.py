"""Constrained and speculative generation over transformers causal language models.

Its one job is the decoding loop: the sampling options and their checks, prompts to token ids
(and the context-length check), masked sampling, the drafters (forced tokens, prompt n-grams, a
masked draft model, draft trees), exact verification, the KV cache and the statistics of a run.

May import: ``structspec.masks`` and everything below it; never ``server``, ``commands`` or
``models`` (callers pass the model and tokenizer in).

The names below load on first use, so that :mod:`structspec.generation.sampling` imports without
torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from structspec.generation.config import SpecConfig
    from structspec.generation.generator import Generator, Stream
    from structspec.generation.prompt import ContextLengthError
    from structspec.generation.pydantic_gen import GenerationError, generate
    from structspec.generation.sampling import OptionError
    from structspec.generation.sequence import Request
    from structspec.generation.stats import Result, Stats

__all__ = [
    "ContextLengthError",
    "GenerationError",
    "Generator",
    "OptionError",
    "Request",
    "Result",
    "SpecConfig",
    "Stats",
    "Stream",
    "generate",
]

_HOMES = {
    "ContextLengthError": "prompt",
    "OptionError": "sampling",
    "SpecConfig": "config",
    "Generator": "generator",
    "Stream": "generator",
    "GenerationError": "pydantic_gen",
    "generate": "pydantic_gen",
    "Request": "sequence",
    "Result": "stats",
    "Stats": "stats",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"structspec.generation.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'structspec.generation' has no attribute {name!r}")
