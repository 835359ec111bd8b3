"""The three draft sources. Each extends a draft from a context and a matcher already advanced
along it; each keeps the matcher in step with what it adds and stops where the grammar does."""

from __future__ import annotations

import time

import torch

from structspec.generation._ngram import NgramSource
from structspec.generation.adaptive import DraftModelCost
from structspec.generation.cache import CachedModel
from structspec.generation.proposal import Proposal
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Stats
from structspec.lru import BoundedCache
from structspec.masks.matcher import Matcher


class ForcedDrafter:
    """Grammar-forced tokens: the canonical tokenization of the bytes every continuation
    starts with (keys, punctuation, enum tails)."""

    name = "forced"
    free = True  # no model call

    def propose(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> Proposal:
        with stats.timing("mask"):
            tokens = matcher.forced_tokens()
            if not tokens:  # most calls: a round asks again after each source that added tokens
                return Proposal()
            tokens = tokens[:limit]
            taken = matcher.accept_tokens(tokens)
        return Proposal(tokens[:taken], [None] * taken)


class NgramDrafter(NgramSource):
    """Prompt / output lookup over bytes: find the latest earlier occurrences of the longest
    suffix of the context's text (``min_bytes`` to ``max_bytes`` long) and propose the tokens
    of the bytes that followed, cut at the first token the grammar forbids. Matching bytes
    rather than token ids finds a value copied from the source text even where it tokenizes
    differently after a JSON quote than after a space.

    Three rules make the line worth verifying. The value being written (the bytes since
    the last ``"`` ``:`` ``,`` ``[`` or ``{``) is looked up even when shorter than ``min_bytes``,
    where it starts a word of the text: ``"+`` finds the phone number ``+44 20 ...`` of the
    source. Only the continuation that all occurrences agree on is drafted: a suffix such as
    ``e":"`` that ends many keys says nothing about the next value, and the round is better
    left to the other sources than spent on a guess. And a value copied up to the end of its
    line in the text (``Phone: +44 20 7946 0958`` then a line break, which a JSON string
    cannot hold) is drafted as ending there: its closing quote and the bytes the grammar forces
    after it (``","city":"``) follow in the same draft, tokenized together as the model would
    write them.

    Beside the line, two kinds of branch (:class:`~structspec.generation.proposal.Branch`) for
    the target to choose from in the same forward: the value closed, with the bytes the grammar
    forces after it, at each of the text's first ``MAX_BRANCHES`` word ends along the line (in
    prose nothing marks where a value stops), and, where the
    occurrences disagree, each of a few continuations they split into (``MAX_ALTERNATIVES`` at
    most; nothing after a suffix that many different texts follow). Alternatives are drafted only
    inside a value: at a value's start the suffix is a key, which a schema quoted in the prompt
    follows with its own texts.

    The work is native (:class:`~structspec.generation._ngram.NgramSource`); a span is
    tokenized once per spans cache (:func:`span_tokens`, shared by a generator's sequences),
    and only its words up to a cut past the tokens wanted (:func:`~structspec.generation._ngram.word_cut`)."""

    name = "ngram"
    free = True  # a lookup, negligible beside a model forward

    def __init__(self, max_bytes: int, min_bytes: int, span_bytes: int = 64, spans: SpanTokens | None = None) -> None:
        """``spans``: the tokenized spans to share with the other sequences over the same
        vocabulary (a generator's, kept across its generations); a cache of this drafter's own
        when not given."""
        super().__init__(max_bytes, min_bytes, span_bytes, span_tokens() if spans is None else spans)


SPANS_KEPT = 4096  # spans a spans cache holds, least recently used dropped first (a few MB, 10 MB at most)

SpanTokens = BoundedCache[bytes, tuple[list[int], bool]]
"""Spans an n-gram source tokenized: span -> (its tokens, whether of the whole span), see
:class:`NgramDrafter`. Valid for one vocabulary."""


def span_tokens() -> SpanTokens:
    """An empty spans cache for n-gram sources over one vocabulary (thread-safe, bounded)."""
    return BoundedCache(max_entries=SPANS_KEPT)


class ModelDrafter:
    """A draft model sampled from its *masked* logits with the same temperature / top-k / top-p
    as the target; its matcher is the chain's copy of the target's, so no state is saved."""

    name = "draft"
    free = False  # a draft forward per token

    def __init__(
        self, runner: CachedModel, sampling: Sampling, rng: torch.Generator, prior_price: float, cost: DraftModelCost
    ) -> None:
        self.runner = runner
        self.sampling = sampling
        self.rng = rng
        self.cost = cost  # measured, shared with the generator's other sequences
        self.prior_price = prior_price  # a token's cost in target forwards until measured

    def catch_up(self, context: list[int]) -> int:
        """The tokens of ``context`` before its last that the draft model's cache lacks, fed
        with its next draft token."""
        return self.runner.pending(context) - 1

    def propose(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> Proposal:
        tokens: list[int] = []
        qs: list[torch.Tensor | None] = []
        while len(tokens) < limit and not matcher.is_finished():
            start = time.perf_counter()
            sequence = context + tokens
            fed = self.runner.pending(sequence)
            with stats.timing("draft"):
                rows = self.runner.logits(sequence, 1)
            stats.draft_forwards += 1
            if self.sampling.greedy:
                with stats.timing("mask"):
                    token, q = rows.masked_argmax(0, matcher), None
            else:
                row = rows[0]
                with stats.timing("mask"):
                    matcher.apply_mask(row)
                with stats.timing("draft"):
                    q = self.sampling.probs(row)
                    token = int(torch.multinomial(q, 1, generator=self.rng))
            with stats.timing("mask"):
                accepted = matcher.accept_token(token)
            self.cost.add(fed, time.perf_counter() - start)
            if not accepted:  # an all -inf row: nothing allowed is left
                break
            tokens.append(token)
            qs.append(q)
        return Proposal(tokens, qs)
