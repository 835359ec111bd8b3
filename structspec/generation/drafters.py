"""The three draft sources. Each extends a draft from a context and a matcher already advanced
along it; each keeps the matcher in step with what it adds and stops where the grammar does."""

from __future__ import annotations

import time

import torch

from structspec.generation.adaptive import CallTime
from structspec.generation.cache import CachedModel, common_prefix
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Stats
from structspec.matcher import Matcher


class ForcedDrafter:
    """Grammar-forced tokens: the canonical tokenization of the bytes every continuation
    starts with (keys, punctuation, enum tails)."""

    name = "forced"
    free = True  # no model call

    def propose(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> tuple[list[int], list]:
        with stats.timing("mask"):
            tokens = matcher.forced_tokens()[:limit]
            taken = matcher.accept_tokens(tokens)
        return tokens[:taken], [None] * taken


class NgramDrafter:
    """Prompt / output lookup over bytes: find the latest earlier occurrences of the longest
    suffix of the context's text (``min_bytes`` to ``max_bytes`` long) and propose the tokens
    of the bytes that followed, cut at the first token the grammar forbids; of the few latest
    occurrences the longest valid continuation wins. Matching bytes rather than token ids
    finds a value copied from the source text even where it tokenizes differently after a
    JSON quote than after a space."""

    name = "ngram"
    free = True  # a lookup, negligible beside a model forward

    def __init__(self, max_bytes: int, min_bytes: int, candidates: int = 4, span_bytes: int = 64) -> None:
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self.candidates = candidates
        self.span_bytes = span_bytes
        self._text: list[bytes] = []  # bytes of each context token, kept across rounds
        self._ids: list[int] = []

    def propose(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> tuple[list[int], list]:
        vocabulary = matcher.compiled.vocabulary
        with stats.timing("draft"):
            data = self._bytes(context, vocabulary.token_bytes)
            spans = [data[start : start + self.span_bytes] for start in self._continuations(data)]
        best: list[int] = []
        with stats.timing("mask"):
            for span in spans:
                run = _encode_prefix(vocabulary, span)[:limit]
                probe = matcher.copy()
                taken = probe.accept_tokens(run)
                if taken > len(best):
                    best = run[:taken]
            matcher.accept_tokens(best)
        return best, [None] * len(best)

    def _bytes(self, context: list[int], token_bytes) -> bytes:
        """The context's text, reusing the part shared with the previous call."""
        ids, text = self._ids, self._text
        keep = common_prefix(ids, context, len(context))
        del ids[keep:], text[keep:]
        for token_id in context[keep:]:
            ids.append(token_id)
            text.append(token_bytes[token_id] or b"")
        return b"".join(text)

    def _continuations(self, data: bytes) -> list[int]:
        """Offsets just after the latest occurrences of the longest matching suffix."""
        size = len(data)
        found: list[int] = []
        length = self.min_bytes
        while length <= min(self.max_bytes, size - 1):
            at = data.rfind(data[size - length :], 0, size - 1)
            if at < 0:
                break
            found, end = [], size - 1
            while at >= 0 and len(found) < self.candidates:
                found.append(at + length)
                end = at + length - 1
                at = data.rfind(data[size - length :], 0, end)
            length += 1
        return found


def _encode_prefix(vocabulary, span: bytes) -> list[int]:
    """Tokens of ``span`` less its last token, which may be cut short by the span's end."""
    try:
        tokens = vocabulary.encode_bytes(span)
    except ValueError:  # a byte no token spells
        return []
    return tokens[:-1] if len(tokens) > 1 else tokens


class ModelDrafter:
    """A draft model sampled from its *masked* logits with the same temperature / top-k / top-p
    as the target; its matcher is the chain's copy of the target's, so no state is saved."""

    name = "draft"
    free = False  # a draft forward per token

    def __init__(self, runner: CachedModel, sampling: Sampling, rng: torch.Generator) -> None:
        self.runner = runner
        self.sampling = sampling
        self.rng = rng
        self.time_per_token = CallTime()

    def propose(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> tuple[list[int], list]:
        start = time.perf_counter()
        tokens: list[int] = []
        qs: list[torch.Tensor | None] = []
        while len(tokens) < limit and not matcher.is_finished():
            with stats.timing("draft"):
                row = self.runner.logits(context + tokens, 1)[0]
            stats.draft_forwards += 1
            if self.sampling.greedy:
                with stats.timing("mask"):
                    token, q = matcher.masked_argmax(row), None
            else:
                with stats.timing("mask"):
                    matcher.apply_mask(row)
                with stats.timing("draft"):
                    q = self.sampling.probs(row)
                    token = int(torch.multinomial(q, 1, generator=self.rng))
            with stats.timing("mask"):
                if not matcher.accept_token(token):  # an all -inf row: nothing allowed is left
                    break
            tokens.append(token)
            qs.append(q)
        if tokens:
            self.time_per_token.add((time.perf_counter() - start) / len(tokens))
        return tokens, qs
