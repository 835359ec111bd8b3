"""The model behind the routes: a :class:`structspec.Generator` and the name clients call it by.

:meth:`Engine.job` packages one request; :meth:`Engine.batch` makes the batch that the
:class:`~structspec.server.worker.GenerationWorker` steps on its thread. Each row yields text
pieces as they are decoded, then one :class:`Completion`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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
        messages: list[dict[str, Any]],
        grammar: CompiledGrammar | None,
        sampling: Sampling,
        prompt_field: str = "messages",
        tools: list[dict[str, Any]] | None = None,
    ) -> Job:
        """A request to decode ``messages`` under ``grammar``, compiled for :attr:`vocabulary`
        (free text when None), with ``tools`` (OpenAI function definitions) shown to the model
        through the chat template; a prompt too long for the model's context is an HTTP 400
        naming ``prompt_field`` when the job joins the batch."""
        return Job(messages, grammar or self._free_text, sampling, prompt_field, tools)

    def batch(self) -> EngineBatch:
        """An empty batch over this engine's model (for the worker thread only)."""
        return EngineBatch(self)


@dataclass(frozen=True)
class Job:
    """One request's generation, as the worker hands it to :meth:`EngineBatch.join`."""

    messages: list[dict[str, Any]]
    grammar: CompiledGrammar
    sampling: Sampling
    prompt_field: str = "messages"
    tools: list[dict[str, Any]] | None = None


class EngineBatch:
    """The engine's rows in one :class:`structspec.generation.batch.Batch` (a
    :class:`~structspec.server.worker.Stepper`): text pieces as rows decode, a
    :class:`Completion` when one is done."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.batch = engine.generator.batch()
        self._rows: list[Any] = []

    def __len__(self) -> int:
        return len(self._rows)

    def join(self, job: Job) -> Any:
        """Start ``job`` at the next step; raises an :class:`APIError` for a prompt that does not fit."""
        from structspec.generation.prompt import ContextLengthError
        from structspec.generation.sequence import Request

        try:
            request = Request(job.messages, job.grammar, **asdict(job.sampling), tools=job.tools)
            sequence = self.engine.generator.sequence(request, self.engine.speculative)
        except ContextLengthError as exc:
            raise APIError(
                f"{job.prompt_field}: {exc}; shorten the {job.prompt_field} or ask for fewer tokens",
                param=job.prompt_field,
                code="context_length_exceeded",
            ) from None
        self.batch.add(sequence)
        self._rows.append(sequence)
        return sequence

    def step(self) -> list[tuple[Any, Any, bool]]:
        """One round for every row; finished rows end with their :class:`Completion` (or error)."""
        events: list[tuple[Any, Any, bool]] = [(row, piece, False) for row, piece in self.batch.step()]
        for row in [row for row in self._rows if row.result is not None or row.error is not None]:
            self._rows.remove(row)
            if row.error is None and self.engine.on_stats is not None:
                self.engine.on_stats(row.result.stats)
            events.append((row, row.error or _completion(row), True))
        return events

    def cancel(self, handle: Any) -> None:
        """Drop a row now."""
        self.batch.cancel(handle)
        self._rows.remove(handle)


def _completion(sequence: Any) -> Completion:
    stats = sequence.result.stats
    return Completion(
        text=sequence.result.text,
        finish_reason="length" if stats.stop_reason == "max_new_tokens" else "stop",
        prompt_tokens=sequence.prompt_tokens,
        completion_tokens=stats.tokens,
        stats=stats.to_dict(),
    )
