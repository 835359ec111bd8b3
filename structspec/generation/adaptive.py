"""Per-source draft length from the observed acceptance, and measured call costs."""

from __future__ import annotations

import math


class AdaptiveLength:
    """Estimates a source's per-token acceptance probability ``a`` (decayed counts of accepted
    tokens and rejections, Laplace-smoothed) and drafts the longest run whose all-accepted
    chance ``a**k`` stays at or above ``min_chain_probability``."""

    def __init__(self, max_length: int, min_chain_probability: float, decay: float = 0.9) -> None:
        self.max_length = max_length
        self.log_threshold = math.log(min_chain_probability)
        self.decay = decay
        self.accepted = 0.0
        self.rejected = 0.0

    @property
    def acceptance(self) -> float:
        """Estimated probability that the next draft token is accepted."""
        return (self.accepted + 1.0) / (self.accepted + self.rejected + 2.0)

    def length(self) -> int:
        """How many tokens to draft now (at least 1)."""
        a = self.acceptance
        if a >= 1.0:
            return self.max_length
        return max(1, min(self.max_length, int(self.log_threshold / math.log(a))))

    def update(self, accepted: int, rejected: bool) -> None:
        """Record a verified span: ``accepted`` tokens passed, then one failed if ``rejected``."""
        self.accepted = self.accepted * self.decay + accepted
        self.rejected = self.rejected * self.decay + (1.0 if rejected else 0.0)


class CallTime:
    """Moving average of a call's seconds; the first call, which encodes the prompt, is left out."""

    def __init__(self, weight: float = 0.2) -> None:
        self.weight = weight
        self.seconds: float | None = None
        self._calls = 0

    def add(self, seconds: float) -> None:
        self._calls += 1
        if self._calls == 1:
            return
        last = self.seconds
        self.seconds = seconds if last is None else (1 - self.weight) * last + self.weight * seconds
