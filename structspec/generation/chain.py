"""Chaining draft sources into one draft per round, with per-source adaptive lengths."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from structspec.generation.adaptive import AdaptiveLength
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
    round's budget is spent or no source adds anything. Sources go in order of their estimated
    per-token acceptance (the likelier one drafts first, so the expected accepted length is
    longest; forced tokens, free to draft, get a 0.2 head start). Forced tokens are taken whole; the n-gram and
    model sources are capped by their :class:`AdaptiveLength` per round."""

    def __init__(self, drafters: list, config: SpecConfig) -> None:
        self.drafters = drafters
        self.config = config
        self.lengths = {d.name: AdaptiveLength(config.max_per_source, config.min_chain_probability) for d in drafters}

    def draft(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> Draft:
        """A draft of at most ``limit`` tokens continuing ``context`` (``matcher`` is a copy of
        the target's, advanced by the sources)."""
        result = Draft()
        quota = {name: length.length() for name, length in self.lengths.items() if name != "forced"}
        ranked = sorted(self.drafters, key=self._rank)
        progress = True
        while progress and len(result.tokens) < limit and not matcher.is_finished():
            progress = False
            for drafter in ranked:
                room = limit - len(result.tokens)
                if drafter.name in quota:
                    room = min(room, quota[drafter.name])
                if room <= 0 or matcher.is_finished():
                    continue
                tokens, qs = drafter.propose(context + result.tokens, matcher, room, stats)
                if drafter.name in quota:
                    quota[drafter.name] -= len(tokens)
                result.tokens += tokens
                result.qs += qs
                result.sources += [drafter.name] * len(tokens)
                progress = progress or bool(tokens)
        for name in result.sources:
            stats.sources.setdefault(name, SourceStats()).drafted += 1
        return result

    def _rank(self, drafter) -> float:
        bonus = 0.2 if drafter.name == "forced" else 0.0  # free to draft: first unless clearly less accepted
        return -(self.lengths[drafter.name].acceptance + bonus)

    def record(self, draft: Draft, accepted: int, stats: Stats) -> None:
        """Credit accepted tokens to their sources and update the adaptive lengths."""
        for name in draft.sources[:accepted]:
            stats.sources[name].accepted += 1
        spans: dict[str, list[int]] = {}
        for i, name in enumerate(draft.sources):
            if i > accepted:
                break  # never verified
            passed, failed = spans.setdefault(name, [0, 0])
            spans[name] = [passed + (i < accepted), failed + (i == accepted)]
        for name, (passed, failed) in spans.items():
            self.lengths[name].update(passed, bool(failed))
