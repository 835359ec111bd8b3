"""Constrained and speculative generation over transformers causal language models."""

from structspec.generation.config import SpecConfig
from structspec.generation.generator import Generator, Stream
from structspec.generation.pydantic_gen import GenerationError, generate
from structspec.generation.stats import Result, Stats

__all__ = ["GenerationError", "Generator", "Result", "SpecConfig", "Stats", "Stream", "generate"]
