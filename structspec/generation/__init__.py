"""Constrained and speculative generation over transformers causal language models.

Its one job is the decoding loop: prompts to token ids, masked sampling, the drafters (forced
tokens, prompt n-grams, a masked draft model, draft trees), exact verification, the KV cache
and the statistics of a run.

May import: ``structspec.masks`` and everything below it; never ``server``, ``commands`` or
``models`` (callers pass the model and tokenizer in).
"""

from structspec.generation.config import SpecConfig
from structspec.generation.generator import Generator, Stream
from structspec.generation.pydantic_gen import GenerationError, generate
from structspec.generation.sequence import Request
from structspec.generation.stats import Result, Stats

__all__ = ["GenerationError", "Generator", "Request", "Result", "SpecConfig", "Stats", "Stream", "generate"]
