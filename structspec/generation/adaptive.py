"""Estimates the draft chain decides by: each source's acceptance, and what calls cost."""

from __future__ import annotations


class Acceptance:
    """A source's per-token acceptance probability, from decayed counts of accepted tokens and
    rejections (Laplace-smoothed, so 0.5 before any evidence)."""

    def __init__(self, decay: float = 0.9) -> None:
        self.decay = decay
        self.accepted = 0.0
        self.rejected = 0.0

    @property
    def probability(self) -> float:
        """Estimated probability that the source's next draft token is accepted."""
        return (self.accepted + 1.0) / (self.accepted + self.rejected + 2.0)

    def update(self, accepted: int, rejected: bool) -> None:
        """Record a verified span: ``accepted`` tokens passed, then one failed if ``rejected``."""
        self.accepted = self.accepted * self.decay + accepted
        self.rejected = self.rejected * self.decay + (1.0 if rejected else 0.0)


class DraftModelCost:
    """A draft-model forward's seconds: ``step`` when it feeds one token (the usual drafting
    call), plus ``per_token`` for each further token it feeds -- the tokens committed since its
    cache last saw the sequence, or a new sequence's prompt. Moving averages, shared by a
    generator's sequences, so that a new sequence starts from what was measured."""

    def __init__(self, weight: float = 0.2) -> None:
        self.weight = weight
        self.step: float | None = None
        self.per_token: float | None = None

    def add(self, fed: int, seconds: float) -> None:
        """Record a forward that fed ``fed`` tokens and took ``seconds`` (its masking included)."""
        if fed <= 1:
            self.step = self._mean(self.step, seconds)
        else:
            self.per_token = self._mean(self.per_token, max(0.0, seconds - (self.step or 0.0)) / (fed - 1))

    def _mean(self, last: float | None, value: float) -> float:
        return value if last is None else (1 - self.weight) * last + self.weight * value


class ForwardCost:
    """The target's verifying forward as a line in the tokens it is fed: ``base`` seconds for
    one token plus ``per_token`` for each further one, fitted by exponentially weighted least
    squares over the calls so far (the first, which encodes the prompt, is left out).

    On a CPU a forward over a few more tokens costs a little more (here about 20% for the
    second token, then a few percent each); on a GPU next to nothing. That marginal cost is
    what a drafted token costs even when the source drafting it is free."""

    def __init__(self, weight: float = 0.1) -> None:
        self.weight = weight
        self._calls = 0
        self._means: tuple[float, float, float, float] | None = None  # of k, t, k*k, k*t; k = fed - 1
        self.per_token = 0.0
        """Seconds each fed token beyond the first adds (0 until two sizes were seen)."""
        self.base: float | None = None
        """Seconds of a forward over one token (None until measured)."""

    def add(self, fed: float, seconds: float) -> None:
        """Record one forward over ``fed`` tokens that took ``seconds`` (a batch's rows: the
        tokens fed per row and each row's share of the time)."""
        self._calls += 1
        if self._calls == 1:
            return
        k = float(fed - 1)
        kk, kt = k * k, k * seconds
        if self._means is None:
            self._means = (k, seconds, kk, kt)
        else:  # each mean moves towards the point by the weight (written out: a call a round)
            w = self.weight
            rest = 1 - w
            mk, mt, mkk, mkt = self._means
            self._means = (rest * mk + w * k, rest * mt + w * seconds, rest * mkk + w * kk, rest * mkt + w * kt)
        # the fit, once per call here rather than at each of the many reads a round makes
        mean_k, mean_t, mean_kk, mean_kt = self._means
        spread = mean_kk - mean_k * mean_k
        self.per_token = 0.0 if spread <= 1e-9 * max(1.0, mean_kk) else max(0.0, (mean_kt - mean_k * mean_t) / spread)
        self.base = max(mean_t - self.per_token * mean_k, 1e-3 * mean_t, 1e-9)
