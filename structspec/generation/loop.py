"""The decoding round shared by plain and speculative decoding, one sequence or a batch: draft
(maybe nothing), one target forward over the pending token plus the draft, verify, commit.

:class:`Decoding` is one sequence's side of the round; whoever runs the target forward sits
between :meth:`Decoding.draft` and :meth:`Decoding.commit` -- :func:`decode` for one sequence,
:class:`~structspec.generation.batch.Batch` for many in one forward. Both compute the masks a
round will read during its forward (:mod:`structspec.generation.prefetch`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from structspec.generation.cache import CachedModel
from structspec.generation.chain import Draft, DraftChain
from structspec.generation.logit_rows import LogitRows
from structspec.generation.prefetch import MaskPrefetch
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Stats
from structspec.generation.verify import verify
from structspec.masks.matcher import Matcher


class Decoding:
    """One sequence's rounds: :meth:`draft`, then (the caller's target forward) :meth:`commit`,
    until :attr:`done`. ``sequence`` is the prompt plus the committed tokens; ``matcher``
    follows the committed tokens.

    When ``max_new_tokens`` holds the constraint's shortest output (spelled one byte per
    token), the budget guard (:mod:`structspec.generation.budget`) makes the text complete by
    the time the tokens run out."""

    def __init__(
        self,
        prompt: list[int],
        matcher: Matcher,
        max_new_tokens: int,
        sampling: Sampling,
        rng: torch.Generator,
        chain: DraftChain | None,
        max_draft: int,
        stats: Stats,
    ) -> None:
        self.sequence = list(prompt)
        self.matcher = matcher
        self.max_new_tokens = max_new_tokens
        self.sampling = sampling
        self.rng = rng
        self.chain = chain
        self.max_draft = max_draft
        self.stats = stats
        self.produced = 0
        self.guarded = matcher.tokens_to_finish() <= max_new_tokens

    @property
    def done(self) -> bool:
        """Whether the grammar is finished (an end-of-sequence token or a complete text nothing
        may follow) or ``max_new_tokens`` are out."""
        return self.produced >= self.max_new_tokens or self.matcher.is_finished()

    def draft(self) -> Draft:
        """This round's draft (empty for plain decoding), within the tokens left: the verified
        token always comes on top of it. Its ``end`` is set: the matcher at its main line's end."""
        room = self.max_new_tokens - self.produced - 1
        if self.chain is None or not room:
            return Draft(end=self.matcher.copy())
        return self.chain.draft(self.sequence, self.matcher.copy(), min(room, self.max_draft), self.stats)

    def commit(self, logits: LogitRows, draft: Draft) -> tuple[list[int], list[int]]:
        """Verify ``draft`` against the target's rows ``logits`` (after the sequence, then after
        each draft node) and commit; returns the accepted nodes and the committed tokens."""
        self.stats.target_forwards += 1
        left = self.max_new_tokens - self.produced if self.guarded else None
        path, token = verify(logits, draft, self.matcher, self.sampling, self.rng, self.stats, left)
        if self.chain is not None:
            self.chain.record(draft, path, self.stats)
        committed = [draft.tokens[node] for node in path] + ([] if token is None else [token])
        self.sequence += committed
        self.produced += len(committed)
        self.stats.tokens = self.produced
        return path, committed

    def stop_reason(self) -> str:
        """Why the sequence ended: ``eos``, ``grammar`` or ``max_new_tokens``."""
        if self.matcher.is_finished() and not self.stats.budget_cuts:
            last = self.sequence[-1]
            return "eos" if last in self.matcher.compiled.vocabulary.eos_ids else "grammar"
        return "max_new_tokens"


def decode(target: CachedModel, run: Decoding, prefetch: MaskPrefetch) -> Iterator[list[int]]:
    """Run ``run`` to the end, one target forward a round; yields the tokens committed each round
    and sets ``stats.stop_reason``. The masks each round reads (at the committed text and along
    the draft's main line) are computed by ``prefetch``'s worker thread during the forward (the
    caller's, kept across generations: a worker started and joined per generation cost about
    0.1-0.2 ms of each); none is left running when the loop ends or is closed. ``target``'s
    cache is not trimmed to the accepted branch after the last round (see
    :meth:`~structspec.generation.cache.CachedModel.keep`): it is the generation's own."""
    stats = run.stats
    try:
        while not run.done:
            draft = run.draft()
            prefetch.start([(draft.end, len(draft.line))])
            start = time.perf_counter()
            logits = target.tree_logits(run.sequence, draft.tokens, draft.parents)
            seconds = time.perf_counter() - start
            prefetch.wait()
            stats.seconds["target"] += seconds
            stats.seconds["mask"] += time.perf_counter() - start - seconds  # waiting for the masks
            length = len(run.sequence)
            path, committed = run.commit(logits, draft)
            if not run.done:  # after the last round nothing reads the cache: its branches stay
                target.keep(length, path)
            if run.chain is not None:
                run.chain.forward.add(len(draft.tokens) + 1, seconds)
            yield committed
    finally:
        prefetch.wait()
    stats.stop_reason = run.stop_reason()
