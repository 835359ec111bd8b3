"""Chaining draft sources into one draft per round, each drafting only as far as it pays."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from structspec.generation._chain import draft_round
from structspec.generation.adaptive import Acceptance, ForwardCost
from structspec.generation.config import SpecConfig
from structspec.generation.proposal import BRANCH_KINDS
from structspec.generation.stats import SourceStats, Stats
from structspec.masks.matcher import Matcher


@dataclass
class Draft:
    """A tree of draft tokens verified by one target forward. Node ``i`` holds ``tokens[i]``,
    drafted by ``sources[i]`` from ``qs[i]`` (``None``: deterministically) after node
    ``parents[i]`` (-1: after the committed text); parents come before their children.

    The sources extend one main line (``line``, node indices); ``end`` is the matcher advanced
    along it (the chain drafts on a copy of the sequence's), ``None`` for a draft built by
    hand. Branches hang off it: what the
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
    end: Matcher | None = None

    def extend(self, tokens: list[int], qs: list, source: str, fork: int | None = None, kind: str = "") -> None:
        """Add ``tokens`` in a row: to the main line, or with ``fork`` as a branch of ``kind``
        after the main line's first ``fork`` nodes."""
        if len(tokens) != len(qs):
            raise ValueError(f"{len(tokens)} tokens but {len(qs)} draft distributions")
        if not tokens:
            return
        ahead = len(self.line) if fork is None else fork
        first = len(self.tokens)
        if fork is None:
            self.line += range(first, first + len(tokens))
        else:
            self.forks[first] = kind
        self.parents.append(self.line[ahead - 1] if ahead else -1)
        self.parents += range(first, first + len(tokens) - 1)  # then each token after the one before
        self.tokens += tokens
        self.sources += [source] * len(tokens)
        self.qs += qs

    def count_into(self, stats: Stats) -> None:
        """Count this draft's tokens per source (in order of first appearance, as stats list
        them) and its branches into ``stats``."""
        sources = stats.sources
        for name in dict.fromkeys(self.sources):
            sources.setdefault(name, SourceStats()).drafted += self.sources.count(name)
        stats.branches += len(self.forks)

    def children(self) -> dict[int, list[int]]:
        """Each node's children (-1: the root's), main-line child first."""
        parents = self.parents
        out: dict[int, list[int]] = {parents[node]: [node] for node in self.line}
        if self.forks:  # branches: every node off the main line, in order
            on_line = set(self.line)
            for node, parent in enumerate(parents):
                if node not in on_line:
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

    A free source that proposed nothing (no token, no branch) is not asked again until the main
    line grows: its proposal depends only on the text and the grammar state, and one that is
    empty with room for a token is empty with any room.
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
        the sources along the main line) whose branches are at most ``limit`` tokens deep (the
        round's bookkeeping in native code: :func:`~structspec.generation._chain.draft_round`)."""
        result = Draft(end=matcher)
        draft_round(self, context, matcher, limit, stats, result)
        return result

    def _price(self, drafter) -> float:
        """A drafted token's cost in verifying forwards: what it adds to the target's forward,
        plus, for a model token, ``SpecConfig.draft_cost`` or else the draft model's measured
        forward over one token (its prior price until measured)."""
        price = self._forward_price()
        if drafter.free:
            return price
        if self.config.draft_cost is not None:
            return price + self.config.draft_cost
        base, seconds = self.forward.base, drafter.cost.step
        return price + (seconds / base if seconds and base else drafter.prior_price)

    def _forward_price(self) -> float:
        """What a drafted token adds to the target's forward, in verifying forwards."""
        base = self.forward.base
        return self.forward.per_token / base if base else 0.0

    def _upfront(self, drafter, context: list[int]) -> float:
        """What a paid source's first token costs on top of its price, in verifying forwards:
        the draft model catching up on ``context`` (a new sequence's prompt, the tokens
        committed since it last drafted), once measured; nothing with a configured
        ``draft_cost``."""
        if drafter.free or self.config.draft_cost is not None:
            return 0.0
        base, per_token = self.forward.base, drafter.cost.per_token
        return per_token * drafter.catch_up(context) / base if base and per_token else 0.0

    def record(self, draft: Draft, path: list[int], stats: Stats) -> None:
        """Credit the accepted nodes (``path``) to their sources, and update the sources'
        acceptance along the main line and how often reached branches were taken. (The cost of
        the verifying forward goes to :attr:`forward` from the loop that runs it.)"""
        kept = set(path)
        for node in [*path, *_first_child(draft, path)]:
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
            taken = fork in kept
            stats.branches_taken += taken
            if draft.parents[fork] < 0 or draft.parents[fork] in kept:
                self.branch_taken[kind].update(int(taken), not taken)


def _first_child(draft: Draft, path: list[int]) -> list[int]:
    """The child of the path's last node (the root's when empty) that the target checked next
    and rejected: its main-line child, else its first branch (see :meth:`Draft.children`)."""
    last, depth, parents = path[-1] if path else -1, len(path), draft.parents
    if depth < len(draft.line) and parents[draft.line[depth]] == last:
        return [draft.line[depth]]
    return [parents.index(last)] if last in parents else []
