"""Finishing on time: a generation that may use ``max_new_tokens`` ends with a complete text.

The guard keeps one invariant: the shortest completion of the text so far
(:meth:`~structspec.masks.matcher.Matcher.tokens_to_finish`, spelled one byte per token) fits in the
tokens left. It holds at the start whenever ``max_new_tokens`` is at least the constraint's
shortest output, and every step can keep it: a token that starts a shortest completion
(:meth:`~structspec.masks.matcher.Matcher.finishing_tokens`) lowers it by at least one.

A sampled token that would break the invariant is replaced, at a bounded cost per step (a
check is one advance of the parse state; no mask is computed):

- up to :data:`TRIES` further draws from the same masked distribution, without the tokens
  already refused, each checked; the first that keeps the invariant is taken (greedy: the
  best-scored of the next :data:`TRIES` tokens by score);
- failing that, a token that starts a shortest completion, drawn from the masked
  distribution restricted to those tokens (greedy: the best-scored of them).

Where fewer than :data:`TRIES` allowed tokens break the invariant this is exactly masked
sampling conditioned on finishing in time; otherwise it leans towards closing the text. The
guard only acts when the budget is about to run out, so runs that finish early, and every
step where the sampled token keeps the invariant, are untouched.
"""

from __future__ import annotations

import torch

from structspec.generation.sampling import Sampling
from structspec.masks.matcher import Matcher

TRIES = 8
"""Checked draws of a replacement before a token that starts a shortest completion is taken."""


def fits(matcher: Matcher, token: int, left: int) -> bool:
    """Whether the text can still be completed in ``left`` tokens after ``token``."""
    after = matcher.copy()
    return after.accept_token(token) and after.tokens_to_finish() <= left


def replacement(
    masked: torch.Tensor, rejected: int, matcher: Matcher, left: int, sampling: Sampling, rng: torch.Generator
) -> int:
    """A token in place of ``rejected`` (which would leave too little room to finish), from
    the masked logits row ``masked``, after which the text can be completed in ``left``
    tokens (see the module docstring for how it is chosen). Returns ``rejected`` if no token
    can keep the budget: the guard can only keep one that was feasible at the start."""
    if sampling.greedy:
        order = torch.argsort(masked.float(), descending=True, stable=True)[: TRIES + 1].tolist()
        for token in order:
            if masked[token] == float("-inf"):
                break
            if token != rejected and fits(matcher, token, left):
                return token
        return _best_finishing(masked, matcher, rejected)
    probs = sampling.probs(masked)
    probs[rejected] = 0.0
    for _ in range(TRIES):
        if float(probs.sum()) <= 0.0:
            break
        token = int(torch.multinomial(probs, 1, generator=rng))
        if fits(matcher, token, left):
            return token
        probs[token] = 0.0
    finishing = matcher.finishing_tokens()
    if not finishing:
        return rejected
    ids = torch.tensor(finishing)
    for weights in (sampling.probs(masked)[ids], Sampling(sampling.temperature).probs(masked)[ids]):
        if float(weights.sum()) > 0.0:
            return finishing[int(torch.multinomial(weights, 1, generator=rng))]
    return _best_finishing(masked, matcher, rejected)


def _best_finishing(masked: torch.Tensor, matcher: Matcher, rejected: int) -> int:
    """The best-scored token that starts a shortest completion (the lowest id among ties)."""
    finishing = matcher.finishing_tokens()
    if not finishing:
        return rejected
    scores = masked.float()[torch.tensor(finishing)]
    return finishing[int(torch.argmax(scores))]
