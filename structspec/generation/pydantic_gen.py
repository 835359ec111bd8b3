"""``structspec.generate``: a validated Pydantic instance straight from a model."""

from __future__ import annotations

from typing import Any, TypeVar

from structspec.errors import StructspecError
from structspec.generation.generator import Generator
from structspec.generation.stats import Result

ModelT = TypeVar("ModelT")


class GenerationError(StructspecError, RuntimeError):
    """Generation ended before the output was complete (``result`` holds what was made)."""

    def __init__(self, message: str, result: Result) -> None:
        self.result = result
        super().__init__(message)


def generate(model: Any, tokenizer: Any, output_type: type[ModelT], prompt: Any, **options: Any) -> ModelT:
    """Generate an instance of the Pydantic model ``output_type`` from ``prompt`` (text or chat
    messages). ``options`` are :meth:`Generator.generate`'s (``max_new_tokens``, ``temperature``,
    ``speculative``, ``draft_model=`` for the generator ...). Raises
    :class:`~structspec.jsonschema.pydantic_models.InstanceValidationError` (with pydantic's error list)
    when the text does not validate, and :class:`GenerationError` when ``max_new_tokens`` ran
    out first."""
    draft_model = options.pop("draft_model", None)
    if options.get("stream"):
        raise ValueError("structspec.generate returns one instance; use Generator.generate(stream=True) to stream")
    result = Generator(model, tokenizer, draft_model=draft_model).generate(prompt, output_type, **options)
    if result.value is None:
        raise GenerationError(
            f"generation stopped ({result.stats.stop_reason}) after {result.stats.tokens} tokens before the "
            f"{getattr(output_type, '__name__', output_type)} was complete: {result.text!r}",
            result,
        )
    return result.value
