"""What a generation did and where its time went."""

from __future__ import annotations

from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

TIME_KEYS = ("mask", "draft", "target", "other")


@dataclass
class SourceStats:
    """Draft tokens one source proposed, how many the target checked (the accepted ones and
    the first rejected: tokens after a rejection are never checked) and how many it accepted."""

    drafted: int = 0
    verified: int = 0
    accepted: int = 0


@dataclass
class Stats:
    """Counters and timings of one generation.

    Attributes:
        tokens: tokens generated (an end-of-sequence token counts).
        target_forwards, draft_forwards: model calls.
        sources: per draft source, drafted, verified and accepted tokens.
        branches, branches_taken: branches drafted beside the main draft line (a copied value
            ended early, or another continuation the text has; see
            ``structspec.generation.chain.Draft``), and those the target took.
        seconds: time in grammar masks/advancing (``mask``), drafting (``draft``: draft
            model calls and n-gram lookup), the target model (``target``) and the rest
            (``other``); ``total`` is wall time.
        budget_cuts: tokens the budget guard chose in place of the model's choice, which would
            have left too few tokens to complete the text (see ``structspec.generation.budget``).
        stop_reason: ``"eos"``, ``"grammar"`` (complete, nothing may follow) or
            ``"max_new_tokens"`` (the tokens ran out, or the budget guard cut the text short:
            complete, but not what the model would have written with more room).
    """

    tokens: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    sources: dict[str, SourceStats] = field(default_factory=dict)
    branches: int = 0
    branches_taken: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys((*TIME_KEYS, "total"), 0.0))
    budget_cuts: int = 0
    stop_reason: str = ""
    _timers: dict[str, _Timer] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._timers = {key: _Timer(self.seconds, key) for key in TIME_KEYS}

    @property
    def drafted(self) -> int:
        """Draft tokens proposed, all sources."""
        return sum(s.drafted for s in self.sources.values())

    @property
    def verified(self) -> int:
        """Draft tokens the target checked, all sources."""
        return sum(s.verified for s in self.sources.values())

    @property
    def accepted(self) -> int:
        """Draft tokens accepted, all sources."""
        return sum(s.accepted for s in self.sources.values())

    @property
    def acceptance_rate(self) -> float:
        """Accepted over verified: the chance that the target accepts a draft token it checks,
        whatever the draft lengths (0 when nothing was verified)."""
        return self.accepted / self.verified if self.verified else 0.0

    @property
    def tokens_per_forward(self) -> float:
        """Generated tokens per target forward."""
        return self.tokens / self.target_forwards if self.target_forwards else 0.0

    def timing(self, key: str) -> _Timer:
        """A context manager adding the time spent in its block to ``seconds[key]`` (blocks
        must not nest: each key has one timer, reused every round)."""
        return self._timers[key]

    def finish(self, total_seconds: float, stop_reason: str) -> None:
        """Record wall time (``other`` is what the timed blocks do not cover) and the stop reason."""
        self.seconds["total"] = total_seconds
        self.seconds["other"] = max(0.0, total_seconds - sum(self.seconds[k] for k in TIME_KEYS[:3]))
        self.stop_reason = stop_reason

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {
            "tokens": self.tokens,
            "target_forwards": self.target_forwards,
            "draft_forwards": self.draft_forwards,
            "tokens_per_forward": round(self.tokens_per_forward, 3),
            "drafted": self.drafted,
            "verified": self.verified,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 3),
            "sources": {k: {"drafted": v.drafted, "verified": v.verified, "accepted": v.accepted}
                        for k, v in self.sources.items()},
            "branches": self.branches,
            "branches_taken": self.branches_taken,
            "seconds": {k: round(v, 6) for k, v in self.seconds.items()},
            "budget_cuts": self.budget_cuts,
            "stop_reason": self.stop_reason,
        }


class _Timer:
    """Adds the seconds of each ``with`` block to ``seconds[key]``: a plain class, a third of
    what a generator-based context manager costs, for the dozens of blocks a round times."""

    __slots__ = ("_key", "_seconds", "_start")

    def __init__(self, seconds: dict[str, float], key: str) -> None:
        self._seconds = seconds
        self._key = key
        self._start = 0.0

    def __enter__(self) -> None:
        self._start = perf_counter()

    def __exit__(self, *_exc: object) -> None:
        self._seconds[self._key] += perf_counter() - self._start


@dataclass(frozen=True)
class Result:
    """A finished generation: the text, its value (parsed JSON, a validated Pydantic instance,
    or ``None`` for a plain grammar or an unfinished output) and the stats."""

    text: str
    value: Any
    stats: Stats
    token_ids: tuple[int, ...] = ()
