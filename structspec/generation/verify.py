"""Checking a draft against one target forward: exact speculative sampling under the grammar."""

from __future__ import annotations

import torch

from structspec.generation.budget import replacement
from structspec.generation.chain import Draft
from structspec.generation.logit_rows import LogitRows
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Stats
from structspec.masks.matcher import HANDED_OVER, Matcher


def verify(
    logits: LogitRows,
    draft: Draft,
    matcher: Matcher,
    sampling: Sampling,
    rng: torch.Generator,
    stats: Stats,
    left: int | None = None,
) -> tuple[list[int], int | None]:
    """Accept a branch of the draft tree from its root and choose the token after it.

    ``logits[0]`` is the target's (unmasked) prediction after the committed text and
    ``logits[1 + i]`` after draft node ``i``. Each row is read under the mask of ``matcher``
    advanced along the branch (in place, except a greedy row, which is read through its argmax:
    see :meth:`~structspec.generation.logit_rows.LogitRows.masked_argmax`). At each node:

    - a main-line child sampled from a draft distribution ``q`` (a draft model's) passes with
      probability ``min(1, p/q)``; a failure is replaced by a sample of ``norm(max(0, p - q))``;
    - otherwise, deterministic children (forced, n-gram; ``q`` one-hot): the target's token is drawn
      from ``p`` (its argmax when greedy) and the walk follows the child that drafted it, or
      stops with that token;
    - with no children left, a bonus token is drawn from the row.

    Either way each committed token is distributed as in plain masked sampling. ``matcher``
    ends advanced along the accepted nodes and the returned token. Returns ``(path, token)``:
    the accepted nodes, root first, and the token after them, ``None`` when an accepted node
    finished the grammar (nothing may follow it).

    ``left``: the tokens this round may produce at most, with the budget guard of
    :mod:`structspec.generation.budget` on; each position's token, drafted or sampled, is
    then replaced when it would leave too little room to finish (``None``: no guard).
    """

    timer = stats.timing("mask")
    greedy = sampling.greedy

    def step(index: int, depth: int, given: int | None = None) -> tuple[int, int]:
        """Choose the token at ``depth`` from row ``index`` -- ``given`` when the caller chose
        it (a draft model's token that passed, or the resample after one failed), else one
        from the masked distribution (its argmax when greedy) -- and advance ``matcher`` by it
        (see :func:`settle`); returns ``(chosen, taken)``. A greedy row's choice and step are
        timed as one block. While the path is the main line's start, a row whose argmax is the
        main line's token there needs no mask: the chain's matcher took that token at this
        point (``Draft.end``)."""
        if given is not None:
            chosen = given
        elif greedy:
            with timer:
                chosen = logits.masked_argmax(index, matcher, tokens[line[depth]] if on_line else None)
                return chosen, settle(chosen, index, depth)
        else:
            row = logits[index]
            with timer:
                matcher.apply_mask(row)
            chosen = sampling.pick(row, rng)
        with timer:
            return chosen, settle(chosen, index, depth)

    def settle(token: int, index: int, depth: int) -> int:
        """Advance ``matcher`` by the token chosen at ``depth`` (from row ``index``), or by its
        replacement when it leaves too little room to finish; returns the token taken (timed
        by the caller)."""
        handed_over = on_line and tokens[line[depth]] == token and matcher.follow(end, len(line) - depth - 1)
        if not handed_over and not matcher.accept_token(token):
            raise RuntimeError(f"the target chose token {token}, which the grammar forbids (mask bug)")
        if left is None or matcher.tokens_to_finish() <= left - depth - 1:
            return token
        matcher.rollback(1)
        stats.budget_cuts += 1
        row = logits[index]
        matcher.apply_mask(row)  # a greedy row may not be masked yet (see step)
        token = replacement(row, token, matcher, left - depth - 1, sampling, rng)
        matcher.accept_token(token)
        return token

    tokens, qs, line, end = draft.tokens, draft.qs, draft.line, draft.end
    path: list[int] = []
    # While the path is the main line's start, a main-line token is taken over from the matcher
    # the chain drafted with (Matcher.follow) instead of stepped again.
    on_line = end is not None and bool(line)
    if greedy and qs.count(None) == len(qs):  # the walk in one native call, where the rows allow
        with timer:
            walked = logits.greedy_path(matcher, tokens, draft.parents, line, left)
        if walked is not None:
            path, token = walked
            if token != HANDED_OVER:
                return path, token
            on_line = on_line and not path  # the matcher now holds history nodes of its own
    children = draft.children()
    node = path[-1] if path else -1
    while True:
        index, options = node + 1, children.get(node)
        if options is None:
            return path, step(index, len(path))[1]
        q = qs[options[0]]
        if q is None:
            chosen, taken = step(index, len(path))
        else:  # the main child was sampled from q
            drafted = tokens[options[0]]
            row = logits[index]
            with timer:
                matcher.apply_mask(row)
            p = sampling.probs(row)
            if float(torch.rand((), generator=rng)) * float(q[drafted]) >= float(p[drafted]):
                return path, step(index, len(path), _resample(p, drafted, q, rng))[1]
            chosen, taken = step(index, len(path), drafted)
        follow = None  # the child that drafted the chosen token
        for child in options:
            if tokens[child] == chosen:
                follow = child
                break
        if follow is None or taken != chosen:
            return path, taken
        path.append(follow)
        on_line = on_line and len(path) < len(line) and follow == line[len(path) - 1]
        if matcher.is_finished():
            return path, None
        node = follow


def _resample(p: torch.Tensor, token: int, q: torch.Tensor, rng: torch.Generator) -> int:
    """A sample of ``norm(max(0, p - q))`` after ``token`` was rejected."""
    residual = (p - q).clamp_min(0.0)
    if float(residual.sum()) <= 0.0:  # p == q up to rounding: the residual is undefined, p is exact
        residual = p
    return int(torch.multinomial(residual, 1, generator=rng))
