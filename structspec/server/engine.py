"""The model behind the routes: a :class:`structspec.Generator` and the name clients call it by.

:meth:`Engine.job` packages one request as a function the :class:`GenerationWorker` runs on
its thread: it yields text pieces as they are decoded, then one :class:`Completion`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from structspec.grammar import Grammar
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

    def job(self, messages: list[dict[str, str]], grammar: Grammar | None, sampling: Sampling) -> Job:
        """A request to decode ``messages`` under ``grammar`` (free text when None)."""
        return Job(messages, grammar or self._free_text, sampling)

    def batch(self) -> EngineBatch:
        """An empty batch over this engine's model (for the worker thread only)."""
        return EngineBatch(self)

    def _check_context(self, prompt_tokens: int, max_tokens: int) -> None:
        context = getattr(getattr(self.generator.model, "config", None), "max_position_embeddings", None)
        if isinstance(context, int) and prompt_tokens + max_tokens > context:
            raise APIError(
                f"messages: the prompt is {prompt_tokens} tokens; with max_tokens {max_tokens} that exceeds the "
                f"model's context of {context} tokens",
                param="messages",
                code="context_length_exceeded",
            )


@dataclass(frozen=True)
class Job:
    """One request's generation, as the worker hands it to :meth:`EngineBatch.join`."""

    messages: list[dict[str, str]]
    grammar: Grammar
    sampling: Sampling


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
        from structspec.generation.sequence import Request

        sampling = job.sampling
        request = Request(job.messages, job.grammar, sampling.max_tokens, sampling.temperature, sampling.top_p,
                          sampling.top_k, sampling.seed)
        sequence = self.engine.generator.sequence(request, self.engine.speculative)
        self.engine._check_context(sequence.prompt_tokens, sampling.max_tokens)
        self.batch.add(sequence)
        self._rows.append(sequence)
        return sequence

    def step(self) -> list[tuple[Any, Any, bool]]:
        """One round for every row; finished rows end with their :class:`Completion` (or error)."""
        events: list[tuple[Any, Any, bool]] = [(row, piece, False) for row, piece in self.batch.step()]
        for row in [row for row in self._rows if row.result is not None or row.error is not None]:
            self._rows.remove(row)
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
