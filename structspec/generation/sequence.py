"""One generation from its prompt to its :class:`Result`: the rounds, the text and the value.

A :class:`Sequence` is decoded alone (``Generator.generate``) or as a row of a batch
(:class:`~structspec.generation.batch.Batch`); either way the same :class:`Decoding` makes its
rounds, so the output does not depend on which.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from structspec.generation.detokenize import TextAssembler
from structspec.generation.loop import Decoding
from structspec.generation.prompt import Messages
from structspec.generation.stats import Result
from structspec.grammar.content import Constraint


@dataclass(frozen=True)
class Request:
    """One generation of a batch: the arguments of ``Generator.generate`` for one sequence.

    ``prompt`` is text or chat messages, ``constraint`` a Grammar, GBNF text, a JSON Schema dict,
    a Pydantic model class or a :class:`~structspec.StructuralTag`; ``temperature == 0`` is
    greedy; ``seed`` makes sampling reproducible (``None``: non-deterministic); ``tools``
    (OpenAI-style function definitions) go to the chat template with the messages; ``source``
    and ``grounded`` ground a schema's strings in a text as ``Generator.generate`` says
    (docs/grounded.md)."""

    prompt: str | Messages
    constraint: Any
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    tools: list[dict[str, Any]] | None = None
    source: str | None = None
    grounded: bool = False


class RequestError(ValueError):
    """A request of a batch that cannot start: ``index`` is its place in the batch, ``cause``
    the error it raised alone (a bad option, constraint or prompt)."""

    def __init__(self, index: int, cause: Exception) -> None:
        super().__init__(f"requests[{index}]: {cause}")
        self.index = index
        self.cause = cause


class Sequence:
    """A generation under way: its :class:`Decoding`, the text decoded so far and, once
    :meth:`finish` ran, its :attr:`result`."""

    def __init__(self, decoding: Decoding, parsed: Constraint, text: TextAssembler) -> None:
        self.decoding = decoding
        self.parsed = parsed
        self.text = text
        self.generated: list[int] = []
        self.result: Result | None = None
        self.error: Exception | None = None  # what finishing raised, for a row of a batch
        self._start = time.perf_counter()

    @property
    def prompt_tokens(self) -> int:
        """Length of the prompt in tokens."""
        return len(self.decoding.sequence) - len(self.generated)

    def add(self, committed: list[int]) -> str:
        """Record a round's committed tokens; returns the text they complete."""
        self.generated += committed
        return self.text.add(committed)

    def finish(self) -> str:
        """End the generation (whether or not its decoding is done: a cancelled one stops
        early); sets :attr:`result` and returns the text held back until now."""
        tail = self.text.finish()
        stats, matcher = self.decoding.stats, self.decoding.matcher
        stats.finish(time.perf_counter() - self._start, self.decoding.stop_reason())
        complete = stats.stop_reason != "max_new_tokens" or matcher.is_accepting()
        value = self.parsed.value(self.text.text) if complete else None
        self.result = Result(self.text.text, value, stats, tuple(self.generated))
        return tail
