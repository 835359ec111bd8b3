"""Checking a draft against one target forward: exact speculative sampling under the grammar."""

from __future__ import annotations

import torch

from structspec.generation.budget import replacement
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Stats
from structspec.matcher import Matcher


def verify(
    logits: torch.Tensor,
    draft: list[int],
    qs: list[torch.Tensor | None],
    matcher: Matcher,
    sampling: Sampling,
    rng: torch.Generator,
    stats: Stats,
    left: int | None = None,
) -> tuple[int, int | None]:
    """Accept a prefix of ``draft`` and choose the token after it.

    ``logits[i]`` is the target's (unmasked) prediction after ``draft[:i]``; ``len(logits)`` is
    ``len(draft) + 1``. Each row is read under the mask of ``matcher`` advanced along the draft
    (in place; a greedy row only when its unmasked argmax is forbidden, see
    :meth:`~structspec.matcher.Matcher.masked_argmax`). Greedy: a draft token passes while it
    equals the masked argmax. Sampling: it passes with
    probability ``min(1, p/q)`` (``q`` one-hot when ``qs[i]`` is ``None``: a deterministic
    draft); the first failure is replaced by a sample of ``norm(max(0, p - q))``; if all pass,
    a bonus token is sampled from the last row. ``matcher`` ends advanced along the accepted
    tokens and the returned one. Returns ``(accepted, next_token)``; ``next_token`` is ``None``
    when an accepted draft token finished the grammar (nothing may follow it).

    ``left``: the tokens this round may produce at most, with the budget guard of
    :mod:`structspec.generation.budget` on; each position's token, drafted or sampled, is
    then replaced when it would leave too little room to finish (``None``: no guard).
    """

    def settle(token: int, row: torch.Tensor, i: int) -> int:
        """Advance ``matcher`` by the token chosen for position ``i``, or by its replacement
        when it leaves too little room to finish; returns the token taken."""
        with stats.timing("mask"):
            if not matcher.accept_token(token):
                raise RuntimeError(f"the target chose token {token}, which the grammar forbids (mask bug)")
            if left is None or matcher.tokens_to_finish() <= left - i - 1:
                return token
            matcher.rollback(1)
            stats.budget_cuts += 1
            matcher.apply_mask(row)  # a greedy row may not be masked yet (masked_argmax)
            token = replacement(row, token, matcher, left - i - 1, sampling, rng)
            matcher.accept_token(token)
            return token

    for i, token in enumerate(draft):
        row = logits[i]
        if sampling.greedy:
            with stats.timing("mask"):
                best = matcher.masked_argmax(row)
            if best != token:
                return i, settle(best, row, i)
        else:
            with stats.timing("mask"):
                matcher.apply_mask(row)
            p = sampling.probs(row)
            q = qs[i]
            q_token = 1.0 if q is None else float(q[token])
            if float(torch.rand((), generator=rng)) * q_token >= float(p[token]):
                return i, settle(_resample(p, token, q, rng), row, i)
        taken = settle(token, row, i)
        if taken != token:
            return i, taken
        if matcher.is_finished():
            return i + 1, None
    row = logits[len(draft)]
    return len(draft), settle(_choose(row, matcher, sampling, rng, stats), row, len(draft))


def _choose(row: torch.Tensor, matcher: Matcher, sampling: Sampling, rng: torch.Generator, stats: Stats) -> int:
    """A token from the masked distribution of a logits row (its argmax when greedy)."""
    with stats.timing("mask"):
        if sampling.greedy:
            return matcher.masked_argmax(row)
        matcher.apply_mask(row)
    return sampling.pick(row, rng)


def _resample(p: torch.Tensor, token: int, q: torch.Tensor | None, rng: torch.Generator) -> int:
    """A sample of ``norm(max(0, p - q))`` after ``token`` was rejected."""
    if q is None:
        residual = p.clone()
        residual[token] = 0.0
    else:
        residual = (p - q).clamp_min(0.0)
    if float(residual.sum()) <= 0.0:  # p == q up to rounding: the residual is undefined, p is exact
        residual = p
    return int(torch.multinomial(residual, 1, generator=rng))
