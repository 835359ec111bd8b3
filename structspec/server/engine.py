"""The model behind the routes: a :class:`structspec.Generator` and the name clients call it by.

:meth:`Engine.job` packages one request as a function the :class:`GenerationWorker` runs on
its thread: it yields text pieces as they are decoded, then one :class:`Completion`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from structspec.grammar import Grammar
from structspec.grammar.tags import StructuralTag
from structspec.server.errors import APIError

FREE_TEXT = r"root ::= [^\x00]*"
"""The grammar of a request without constraint: any text (generation ends on EOS or the token limit)."""


@dataclass(frozen=True)
class Sampling:
    """Decoding settings of one request."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None


@dataclass(frozen=True)
class Completion:
    """A finished generation as the routes report it."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    stats: dict[str, Any]

    def usage(self) -> dict[str, int]:
        """OpenAI's ``usage`` object."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


class Engine:
    """One loaded model; only the worker thread may run its jobs."""

    def __init__(self, generator: Any, model_id: str, speculative: Any = None) -> None:
        """``speculative`` is the :class:`~structspec.generation.SpecConfig` every request decodes with."""
        self.generator = generator
        self.speculative = speculative
        self.model_id = model_id
        self.created = int(time.time())
        self._free_text = Grammar.from_gbnf(FREE_TEXT)

    def check_model(self, requested: str | None) -> None:
        """Refuse a request naming another model (HTTP 404)."""
        if requested is not None and requested != self.model_id:
            raise APIError(
                f"model {requested!r} is not served here; this server serves {self.model_id!r}",
                status=404,
                type="invalid_request_error",
                param="model",
                code="model_not_found",
            )

    @staticmethod
    def extraction_messages(text: str, schema: dict[str, Any], instructions: str | None) -> list[dict[str, str]]:
        """The chat messages of an extraction request (the format the bundled models were trained on)."""
        from structspec.models.prompt import extraction_messages

        return extraction_messages(text, schema, instructions)

    def job(
        self,
        messages: list[dict[str, Any]],
        grammar: Grammar | StructuralTag | None,
        sampling: Sampling,
        tools: list[dict[str, Any]] | None = None,
    ) -> Callable[[], Iterator[str | Completion]]:
        """A function that decodes ``messages`` under ``grammar`` (free text when None), with
        ``tools`` (OpenAI function definitions) shown to the model through the chat template."""

        def run() -> Iterator[str | Completion]:
            from structspec.generation.prompt import prompt_ids

            prompt_tokens = len(prompt_ids(self.generator.tokenizer, messages, tools))
            self._check_context(prompt_tokens, sampling.max_tokens)
            stream = self.generator.generate(
                messages,
                grammar or self._free_text,
                max_new_tokens=sampling.max_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                seed=sampling.seed,
                speculative=self.speculative,
                stream=True,
                tools=tools,
            )
            yield from stream  # closing this generator closes the stream, which stops decoding
            stats = stream.result.stats
            yield Completion(
                text=stream.result.text,
                finish_reason="length" if stats.stop_reason == "max_new_tokens" else "stop",
                prompt_tokens=prompt_tokens,
                completion_tokens=stats.tokens,
                stats=stats.to_dict(),
            )

        return run

    def _check_context(self, prompt_tokens: int, max_tokens: int) -> None:
        context = getattr(getattr(self.generator.model, "config", None), "max_position_embeddings", None)
        if isinstance(context, int) and prompt_tokens + max_tokens > context:
            raise APIError(
                f"messages: the prompt is {prompt_tokens} tokens; with max_tokens {max_tokens} that exceeds the "
                f"model's context of {context} tokens",
                param="messages",
                code="context_length_exceeded",
            )
