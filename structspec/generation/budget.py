"""Finishing on time: a generation that may use ``max_new_tokens`` ends with a complete text.

The guard keeps one invariant: the shortest completion of the text so far
(:meth:`~structspec.masks.matcher.Matcher.tokens_to_finish`, spelled one byte per token) fits in the
tokens left. It holds at the start whenever ``max_new_tokens`` is at least the constraint's
shortest output, and every step can keep it (the first byte of a shortest completion, as a
token of its own). A token that would break it is replaced by a sample from the same masked
distribution restricted to the tokens that keep it -- rejection sampling, so the output is
distributed as masked sampling conditioned on finishing in time, and greedy decoding takes
the best-scored token that keeps it. The guard only acts when the budget is about to run
out, so runs that finish early are untouched.
"""

from __future__ import annotations

import torch

from structspec.generation.sampling import Sampling
from structspec.masks.matcher import Matcher


def fits(matcher: Matcher, token: int, left: int) -> bool:
    """Whether the text can still be completed in ``left`` tokens after ``token``."""
    after = matcher.copy()
    return after.accept_token(token) and after.tokens_to_finish() <= left


def replacement(
    masked: torch.Tensor, rejected: int, matcher: Matcher, left: int, sampling: Sampling, rng: torch.Generator
) -> int:
    """A token in place of ``rejected`` (which would leave too little room to finish), from
    the masked logits row ``masked``, among the tokens after which the text can be completed
    in ``left`` tokens. Greedy: the highest-scored such token. Sampling: a sample of the
    temperature / top-k / top-p distribution restricted to them (of the temperature
    distribution alone if top-k / top-p cut them all). Returns ``rejected`` if no token fits:
    the guard can only keep a budget that was feasible at the start."""
    if sampling.greedy:
        order = torch.sort(masked.float(), descending=True, stable=True)
        for score, token in zip(order.values.tolist(), order.indices.tolist(), strict=True):
            if score == float("-inf"):
                break
            if token != rejected and fits(matcher, token, left):
                return token
        return rejected
    tried = [rejected]
    for probs in (sampling.probs(masked), Sampling(sampling.temperature).probs(masked)):
        probs[tried] = 0.0
        while float(probs.sum()) > 0.0:
            token = int(torch.multinomial(probs, 1, generator=rng))
            if fits(matcher, token, left):
                return token
            probs[token] = 0.0
            tried.append(token)
    return rejected
