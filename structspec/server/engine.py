"""The model behind the routes: a :class:`structspec.Generator` and the name clients call it by.

:meth:`Engine.job` packages one request as a function the :class:`GenerationWorker` runs on
its thread: it yields text pieces as they are decoded, then one :class:`Completion`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from structspec.generation.sampling import Sampling
from structspec.grammar import Grammar
from structspec.masks.compiled import CompiledGrammar
from structspec.masks.compiled import compile as compile_grammar
from structspec.server.errors import APIError
from structspec.tokens.vocabulary import Vocabulary

FREE_TEXT = r"root ::= [^\x00]*"
"""The grammar of a request without constraint: any text (generation ends on EOS or the token limit)."""


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

    def __init__(
        self,
        generator: Any,
        model_id: str,
        speculative: Any = None,
        *,
        defaults: Sampling | None = None,
        on_stats: Callable[[Any], None] | None = None,
    ) -> None:
        """``speculative`` is the :class:`~structspec.generation.SpecConfig` every request decodes
        with; ``defaults`` the sampling options of a request that leaves them out (its
        ``max_new_tokens`` aside, which the limits decide); ``on_stats`` is called on the worker
        thread with each finished generation's :class:`~structspec.generation.Stats`."""
        self.generator = generator
        self.speculative = speculative
        self.defaults = defaults or Sampling()
        self.on_stats = on_stats
        self.model_id = model_id
        self.created = int(time.time())
        self._free_text = compile_grammar(Grammar.from_gbnf(FREE_TEXT), generator.vocabulary)

    @property
    def vocabulary(self) -> Vocabulary:
        """The served model's vocabulary, which request grammars are compiled for."""
        return self.generator.vocabulary

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
        messages: list[dict[str, str]],
        grammar: CompiledGrammar | None,
        sampling: Sampling,
        prompt_field: str = "messages",
    ) -> Callable[[], Iterator[str | Completion]]:
        """A function that decodes ``messages`` under ``grammar``, compiled for :attr:`vocabulary`
        (free text when None); a prompt too long for the model's context is an HTTP 400 naming
        ``prompt_field``."""

        def run() -> Iterator[str | Completion]:
            from structspec.generation.prompt import ContextLengthError, prompt_ids

            prompt_tokens = len(prompt_ids(self.generator.tokenizer, messages))
            try:
                stream = self.generator.generate(
                    messages,
                    grammar or self._free_text,
                    **asdict(sampling),
                    speculative=self.speculative,
                    stream=True,
                )
            except ContextLengthError as exc:
                raise APIError(
                    f"{prompt_field}: {exc}; shorten the {prompt_field} or ask for fewer tokens",
                    param=prompt_field,
                    code="context_length_exceeded",
                ) from None
            yield from stream  # closing this generator closes the stream, which stops decoding
            stats = stream.result.stats
            if self.on_stats is not None:
                self.on_stats(stats)
            yield Completion(
                text=stream.result.text,
                finish_reason="length" if stats.stop_reason == "max_new_tokens" else "stop",
                prompt_tokens=prompt_tokens,
                completion_tokens=stats.tokens,
                stats=stats.to_dict(),
            )

        return run
