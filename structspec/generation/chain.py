"""Chaining draft sources into one draft per round, each drafting only as far as it pays."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from structspec.generation.adaptive import Acceptance, ForwardCost
from structspec.generation.config import SpecConfig
from structspec.generation.stats import SourceStats, Stats
from structspec.matcher import Matcher


@dataclass
class Draft:
    """Draft tokens, the source of each, and each one's draft distribution (``None``: one-hot)."""

    tokens: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    qs: list[torch.Tensor | None] = field(default_factory=list)


class DraftChain:
    """Asks the sources in order, again and again, each extending the draft where the last
    stopped -- forced tokens after a copied value, a copied value after a key -- until the
    round's budget is spent or no source adds anything.

    Free sources (forced tokens, n-gram lookup) go first, then the draft model, each group in
    order of estimated per-token acceptance. Forced tokens are taken whole; the n-gram and
    model sources add at most ``max_per_source`` tokens per round, and only while they pay: a
    round yields ``1 + sum of P(first j drafts accepted)`` tokens for one target forward, and
    a token is drafted only while it raises that ratio -- while its chance of being reached
    and accepted, over its cost in target forwards, beats the round's tokens per cost so far.
    A token's cost is what it adds to the verifying forward, plus the draft model's forward
    for a model token; both are measured as the generation runs.
    """

    def __init__(self, drafters: list, config: SpecConfig) -> None:
        self.drafters = drafters
        self.config = config
        self.acceptance = {d.name: Acceptance() for d in drafters}
        self.forward = ForwardCost()  # the target's verifying forward

    def draft(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> Draft:
        """A draft of at most ``limit`` tokens continuing ``context`` (``matcher`` is a copy of
        the target's, advanced by the sources)."""
        result = Draft()
        quota = {d.name: self.config.max_per_source for d in self.drafters if d.name != "forced"}
        ranked = sorted(self.drafters, key=self._rank)
        round_ = _RoundValue()
        progress = True
        while progress and len(result.tokens) < limit and not matcher.is_finished():
            progress = False
            for drafter in ranked:
                acceptance = self.acceptance[drafter.name].probability
                price = self._price(drafter)
                room = limit - len(result.tokens)
                if drafter.name in quota:
                    room = min(room, quota[drafter.name], round_.worth(acceptance, price))
                if room <= 0 or matcher.is_finished():
                    continue
                tokens, qs = drafter.propose(context + result.tokens, matcher, room, stats)
                if drafter.name in quota:
                    quota[drafter.name] -= len(tokens)
                round_.add(len(tokens), acceptance, price)
                result.tokens += tokens
                result.qs += qs
                result.sources += [drafter.name] * len(tokens)
                progress = progress or bool(tokens)
        for name in result.sources:
            stats.sources.setdefault(name, SourceStats()).drafted += 1
        return result

    def _rank(self, drafter) -> tuple[bool, float]:
        bonus = 0.2 if drafter.name == "forced" else 0.0  # taken whole: first unless clearly less accepted
        return not drafter.free, -(self.acceptance[drafter.name].probability + bonus)

    def _price(self, drafter) -> float:
        """A drafted token's cost in verifying forwards: what it adds to the target's forward,
        plus, for a model token, ``SpecConfig.draft_cost`` or else the draft model's measured
        time (its prior price until measured)."""
        base = self.forward.base
        price = self.forward.per_token / base if base else 0.0
        if drafter.free:
            return price
        if self.config.draft_cost is not None:
            return price + self.config.draft_cost
        seconds = drafter.time_per_token.seconds
        return price + (seconds / base if seconds and base else drafter.prior_price)

    def record(self, draft: Draft, accepted: int, stats: Stats, fed: int, target_seconds: float) -> None:
        """Credit accepted tokens to their sources, update their acceptance, and the cost of
        the verifying forward (``fed`` tokens in ``target_seconds``)."""
        self.forward.add(fed, target_seconds)
        for i, name in enumerate(draft.sources[: accepted + 1]):
            source = stats.sources[name]
            source.verified += 1
            source.accepted += i < accepted
        spans: dict[str, list[int]] = {}
        for i, name in enumerate(draft.sources):
            if i > accepted:
                break  # never verified
            passed, failed = spans.setdefault(name, [0, 0])
            spans[name] = [passed + (i < accepted), failed + (i == accepted)]
        for name, (passed, failed) in spans.items():
            self.acceptance[name].update(passed, bool(failed))


@dataclass
class _RoundValue:
    """A round's expected committed tokens and its cost in verifying forwards, as drafted so far."""

    survival: float = 1.0  # chance that every draft token so far is accepted
    expected: float = 1.0  # the verified token, plus each draft token's chance of being kept
    cost: float = 1.0  # the verifying forward, plus paid draft tokens

    def add(self, count: int, acceptance: float, price: float) -> None:
        for _ in range(count):
            self.survival *= acceptance
            self.expected += self.survival
            self.cost += price

    def worth(self, acceptance: float, price: float) -> int:
        """How many tokens at ``price`` each raise expected tokens per cost, drafted next."""
        survival, expected, cost, count = self.survival, self.expected, self.cost, 0
        while count < 64:
            gain = survival * acceptance
            if gain * cost <= expected * price:
                break
            survival, expected, cost, count = gain, expected + gain, cost + price, count + 1
        return count
