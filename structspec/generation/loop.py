"""The decoding loop shared by plain and speculative decoding: draft (maybe nothing), one
target forward over the pending token plus the draft (the round's masks computed meanwhile in
a worker thread), verify, commit."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from structspec.generation.cache import CachedModel
from structspec.generation.chain import Draft, DraftChain
from structspec.generation.prefetch import MaskPrefetch, mask_prefetch
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Stats
from structspec.generation.verify import verify
from structspec.masks.matcher import Matcher


def decode(
    target: CachedModel,
    prompt: list[int],
    matcher: Matcher,
    max_new_tokens: int,
    sampling: Sampling,
    rng: torch.Generator,
    chain: DraftChain | None,
    max_draft: int,
    stats: Stats,
) -> Iterator[list[int]]:
    """Yield the tokens committed each round until the grammar is finished (an end-of-sequence
    token or a complete text nothing may follow) or ``max_new_tokens`` are out; sets
    ``stats.stop_reason``. ``matcher`` follows the committed tokens.

    When ``max_new_tokens`` holds the constraint's shortest output (spelled one byte per
    token), the budget guard (:mod:`structspec.generation.budget`) makes the text complete by
    the time the tokens run out."""
    with mask_prefetch() as prefetch:
        yield from _rounds(target, prompt, matcher, max_new_tokens, sampling, rng, chain, max_draft, stats, prefetch)


def _rounds(
    target: CachedModel,
    prompt: list[int],
    matcher: Matcher,
    max_new_tokens: int,
    sampling: Sampling,
    rng: torch.Generator,
    chain: DraftChain | None,
    max_draft: int,
    stats: Stats,
    prefetch: MaskPrefetch,
) -> Iterator[list[int]]:
    """The rounds of :func:`decode`; the masks a round reads are computed during its forward."""
    sequence = list(prompt)
    produced = 0
    guarded = matcher.tokens_to_finish() <= max_new_tokens
    while produced < max_new_tokens and not matcher.is_finished():
        room = max_new_tokens - produced - 1  # the verified token always comes on top of the draft
        draft = chain.draft(sequence, matcher.copy(), min(room, max_draft), stats) if chain and room else Draft()
        prefetch.start(matcher, draft.main)
        before = stats.seconds["target"]
        with stats.timing("target"):
            logits = target.tree_logits(sequence, draft.tokens, draft.parents)
        stats.target_forwards += 1
        with stats.timing("mask"):
            prefetch.wait()
        left = max_new_tokens - produced if guarded else None
        path, token = verify(logits, draft, matcher, sampling, rng, stats, left)
        target.keep(len(sequence), path)
        if chain is not None:
            chain.record(draft, path, stats, len(draft.tokens) + 1, stats.seconds["target"] - before)
        committed = [draft.tokens[node] for node in path] + ([] if token is None else [token])
        sequence += committed
        produced += len(committed)
        stats.tokens = produced
        yield committed
    if matcher.is_finished() and not stats.budget_cuts:
        last = sequence[-1]
        stats.stop_reason = "eos" if last in matcher.compiled.vocabulary.eos_ids else "grammar"
    else:
        stats.stop_reason = "max_new_tokens"
