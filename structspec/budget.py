"""Bounded work: the nesting limits every front end enforces, and wall-clock deadlines.

Nesting: the JSON Schema converter, the regex parser and the GBNF parser descend their input
recursively, so each refuses input nested deeper than its limit with its own located error,
well before Python's recursion limit: a schema :data:`MAX_NESTING` levels, a GBNF expression
:data:`MAX_GBNF_NESTING` levels (sequences, alternatives, repetitions), a regex
:data:`MAX_REGEX_NESTING` groups (a group can become three GBNF levels: alternatives, a
sequence and a repetition, so every pattern the regex parser accepts converts to GBNF the GBNF
parser accepts).

Deadlines: a stage runs inside ``with deadline(seconds, expired):`` and its loops call
:func:`check`, which costs one context-variable read and one clock read, and raises
``expired(seconds)`` once the time is up. Deadlines nest (the one that ends first wins) and
belong to the current thread or asyncio task (a :class:`contextvars.ContextVar`): a server
converting in a thread pool keeps each request's deadline to itself, and ``asyncio.to_thread``
carries the caller's deadline into the thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

MAX_NESTING = 64
MAX_GBNF_NESTING = 128
MAX_REGEX_NESTING = 32


@dataclass(frozen=True)
class Deadline:
    """The monotonic clock value ``at`` which work stops, and how to say so."""

    at: float
    seconds: float
    expired: Callable[[float], Exception]


_ACTIVE: ContextVar[Deadline | None] = ContextVar("structspec_deadline", default=None)


@contextmanager
def deadline(seconds: float | None, expired: Callable[[float], Exception]) -> Iterator[None]:
    """Run the body under a budget of ``seconds`` (``None``: no budget of its own).

    ``expired(seconds)`` builds the error :func:`check` raises once the budget is spent. An
    enclosing deadline that ends sooner stays in force, with its own error.
    """
    if seconds is None:
        yield
        return
    if seconds < 0:
        raise ValueError(f"a time budget cannot be negative, got {seconds}")
    mine = Deadline(time.monotonic() + seconds, seconds, expired)
    outer = _ACTIVE.get()
    token = _ACTIVE.set(outer if outer is not None and outer.at <= mine.at else mine)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def check() -> None:
    """Raise the current deadline's error when its time is up; return at once otherwise."""
    active = _ACTIVE.get()
    if active is not None and time.monotonic() >= active.at:
        raise active.expired(active.seconds)
