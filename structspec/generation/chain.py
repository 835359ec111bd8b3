"""Chaining draft sources into one draft per round, each drafting only as far as it pays."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from structspec.generation.adaptive import Acceptance, ForwardCost
from structspec.generation.config import SpecConfig
from structspec.generation.drafters import BRANCH_KINDS
from structspec.generation.stats import SourceStats, Stats
from structspec.masks.matcher import Matcher


@dataclass
class Draft:
    """A tree of draft tokens verified by one target forward. Node ``i`` holds ``tokens[i]``,
    drafted by ``sources[i]`` from ``qs[i]`` (``None``: deterministically) after node
    ``parents[i]`` (-1: after the committed text); parents come before their children.

    The sources extend one main line (``line``, node indices). Branches hang off it: what the
    n-gram source proposes to try instead, where a copied value may end or where the text goes
    on in more than one way (``forks`` maps each branch's first node to its kind). The
    children of a node with several are deterministic drafts, so the target's own token picks
    among them (see :func:`~structspec.generation.verify.verify`)."""

    tokens: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    qs: list[torch.Tensor | None] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    line: list[int] = field(default_factory=list)
    forks: dict[int, str] = field(default_factory=dict)

    def extend(self, tokens: list[int], qs: list, source: str, fork: int | None = None, kind: str = "") -> None:
        """Add ``tokens`` in a row: to the main line, or with ``fork`` as a branch of ``kind``
        after the main line's first ``fork`` nodes."""
        ahead = len(self.line) if fork is None else fork
        parent = self.line[ahead - 1] if ahead else -1
        if fork is not None and tokens:
            self.forks[len(self.tokens)] = kind
        for token, q in zip(tokens, qs, strict=True):
            if fork is None:
                self.line.append(len(self.tokens))
            self.parents.append(parent)
            parent = len(self.tokens)
            self.tokens.append(token)
            self.sources.append(source)
            self.qs.append(q)

    @property
    def main(self) -> list[int]:
        """The main line's tokens."""
        return [self.tokens[i] for i in self.line]

    def children(self) -> dict[int, list[int]]:
        """Each node's children (-1: the root's), main-line child first."""
        out: dict[int, list[int]] = {}
        on_line = set(self.line)
        for node, parent in sorted(enumerate(self.parents), key=lambda item: item[0] not in on_line):
            out.setdefault(parent, []).append(node)
        return out


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

    Branches a source proposes beside its tokens (see :class:`Draft`) are priced alike: one is
    kept when its chance of being reached and then taken -- as often as reached branches of
    its kind have been -- over the cost of its tokens beats the round's tokens per cost.
    """

    def __init__(
        self, drafters: list, config: SpecConfig, branching: bool = False, forward: ForwardCost | None = None
    ) -> None:
        self.drafters = drafters
        self.config = config
        self.branching = branching  # the target verifies draft trees (see CachedModel.tree_logits)
        self.acceptance = {d.name: Acceptance() for d in drafters}
        self.branch_taken = {kind: Acceptance() for kind in BRANCH_KINDS}  # how often a reached branch is taken
        # The target's verifying forward, measured by whoever runs it (shared by a batch's rows).
        self.forward = forward or ForwardCost()

    def draft(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> Draft:
        """A draft continuing ``context`` (``matcher`` is a copy of the target's, advanced by
        the sources along the main line) whose branches are at most ``limit`` tokens deep."""
        result = Draft()
        quota = {d.name: self.config.max_per_source for d in self.drafters if d.name != "forced"}
        ranked = sorted(self.drafters, key=self._rank)
        round_ = _RoundValue()
        progress = True
        while progress and len(result.line) < limit and not matcher.is_finished():
            progress = False
            for drafter in ranked:
                acceptance = self.acceptance[drafter.name].probability
                price, upfront = self._price(drafter), self._upfront(drafter, context + result.main)
                room = limit - len(result.line)
                if drafter.name in quota:
                    room = round_.worth(acceptance, price, min(room, quota[drafter.name]), upfront)
                if room <= 0 or matcher.is_finished():
                    continue
                proposal = drafter.propose(context + result.main, matcher, room, stats)
                if drafter.name in quota:
                    quota[drafter.name] -= len(proposal.tokens)
                start, reach = len(result.line), round_.survival
                round_.add(len(proposal.tokens), acceptance, price, upfront)
                result.extend(proposal.tokens, proposal.qs, drafter.name)
                for branch in proposal.branches:  # reached when the proposal's tokens before it pass
                    fork, tokens = start + branch.fork, branch.tokens
                    chance = reach * acceptance**branch.fork * self.branch_taken[branch.kind].probability
                    if self._fits(result, fork, tokens, limit) and round_.branch(chance, len(tokens), price):
                        result.extend(tokens, [None] * len(tokens), drafter.name, fork=fork, kind=branch.kind)
                progress = progress or bool(proposal.tokens)
        for name in dict.fromkeys(result.sources):  # in order of first appearance, as stats list them
            stats.sources.setdefault(name, SourceStats()).drafted += result.sources.count(name)
        stats.branches += len(result.forks)
        return result

    def _fits(self, result: Draft, fork: int, tokens: list[int], limit: int) -> bool:
        """Whether a branch of ``tokens`` may hang off the main line after its first ``fork``
        nodes: the target verifies trees, the branch stays within ``limit`` tokens deep, and
        it does not start with a token already drafted there."""
        if not self.branching or not tokens or fork + len(tokens) > limit:
            return False
        parent = result.line[fork - 1] if fork else -1
        return not any(token == tokens[0] and result.parents[n] == parent for n, token in enumerate(result.tokens))

    def _rank(self, drafter) -> tuple[bool, float]:
        bonus = 0.2 if drafter.name == "forced" else 0.0  # taken whole: first unless clearly less accepted
        return not drafter.free, -(self.acceptance[drafter.name].probability + bonus)

    def _price(self, drafter) -> float:
        """A drafted token's cost in verifying forwards: what it adds to the target's forward,
        plus, for a model token, ``SpecConfig.draft_cost`` or else the draft model's measured
        forward over one token (its prior price until measured)."""
        base = self.forward.base
        price = self.forward.per_token / base if base else 0.0
        if drafter.free:
            return price
        if self.config.draft_cost is not None:
            return price + self.config.draft_cost
        seconds = drafter.cost.step
        return price + (seconds / base if seconds and base else drafter.prior_price)

    def _upfront(self, drafter, context: list[int]) -> float:
        """What a paid source's first token costs on top of its price, in verifying forwards:
        the draft model catching up on ``context`` (a new sequence's prompt, the tokens
        committed since it last drafted), once measured; nothing with a configured
        ``draft_cost``."""
        base, per_token = self.forward.base, None if drafter.free else drafter.cost.per_token
        if not base or not per_token or self.config.draft_cost is not None:
            return 0.0
        return per_token * drafter.catch_up(context) / base

    def record(self, draft: Draft, path: list[int], stats: Stats) -> None:
        """Credit the accepted nodes (``path``) to their sources, and update the sources'
        acceptance along the main line and how often reached branches were taken. (The cost of
        the verifying forward goes to :attr:`forward` from the loop that runs it.)"""
        kept = set(path)
        rejected = draft.children().get(path[-1] if path else -1, [])[:1]
        for node in [*path, *rejected]:
            source = stats.sources[draft.sources[node]]
            source.verified += 1
            source.accepted += node in kept
        spans: dict[str, list[int]] = {}
        for node in draft.line:
            passed, failed = spans.setdefault(draft.sources[node], [0, 0])
            spans[draft.sources[node]] = [passed + (node in kept), failed + (node not in kept)]
            if node not in kept:
                break  # the main line after it was never verified
        for name, (passed, failed) in spans.items():
            self.acceptance[name].update(passed, bool(failed))
        for fork, kind in draft.forks.items():
            if draft.parents[fork] < 0 or draft.parents[fork] in kept:
                self.branch_taken[kind].update(int(fork in kept), fork not in kept)
        stats.branches_taken += sum(fork in kept for fork in draft.forks)


@dataclass
class _RoundValue:
    """A round's expected committed tokens and its cost in verifying forwards, as drafted so far."""

    survival: float = 1.0  # chance that every draft token so far is accepted
    expected: float = 1.0  # the verified token, plus each draft token's chance of being kept
    cost: float = 1.0  # the verifying forward, plus paid draft tokens

    def add(self, count: int, acceptance: float, price: float, upfront: float = 0.0) -> None:
        if count:
            self.cost += upfront
        for _ in range(count):
            self.survival *= acceptance
            self.expected += self.survival
            self.cost += price

    def branch(self, chance: float, count: int, price: float) -> bool:
        """Whether a branch of ``count`` tokens at ``price`` each, all kept with probability
        ``chance``, raises expected tokens per cost; counts it in when it does."""
        gain = chance * count
        if gain * self.cost <= self.expected * price * count:
            return False
        self.expected += gain
        self.cost += price * count
        return True

    def worth(self, acceptance: float, price: float, most: int = 64, upfront: float = 0.0) -> int:
        """How many tokens at ``price`` each, after paying ``upfront`` for the first, raise
        expected tokens per cost, drafted next (at most ``most``: counted no further than the
        room the caller has); 0 when no count pays for the upfront cost."""
        survival, expected, cost, count = self.survival, self.expected, self.cost + upfront, 0
        while count < most:
            gain = survival * acceptance
            if gain * cost <= expected * price:
                break
            survival, expected, cost, count = gain, expected + gain, cost + price, count + 1
        return count if expected * self.cost > self.expected * cost else 0
