"""The three draft sources. Each extends a draft from a context and a matcher already advanced
along it; each keeps the matcher in step with what it adds and stops where the grammar does."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from structspec.generation._ngram import (
    ContextText,
    agreed_continuation,
    ends_word,
    first_word_end,
    lookup,
    value_length,
)
from structspec.generation.adaptive import DraftModelCost
from structspec.generation.cache import CachedModel
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Stats
from structspec.grammar.parse_state import ParseState
from structspec.lru import BoundedCache
from structspec.masks.compiled import CompiledGrammar
from structspec.masks.matcher import Matcher

BRANCH_KINDS = ("end", "alternative")


@dataclass(frozen=True)
class Branch:
    """Deterministic draft tokens to try instead of a proposal's ``tokens[fork:]``: the end of
    a copied value (``kind`` ``"end"``) or another continuation the text has (``"alternative"``)."""

    fork: int
    tokens: list[int]
    kind: str


@dataclass
class Proposal:
    """What a source adds to the draft: ``tokens`` in a row (the matcher advanced along them),
    each drafted from ``qs[i]`` (``None``: deterministically), and ``branches`` beside them."""

    tokens: list[int] = field(default_factory=list)
    qs: list[torch.Tensor | None] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)


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


class NgramDrafter:
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

    Beside the line, two kinds of branch (:class:`Branch`) for the target to choose from in the
    same forward: the value closed at each of the text's first word ends along the line
    (:func:`value_ends`: in prose nothing marks where a value stops), and, where the
    occurrences disagree, each of a few continuations they split into (:meth:`_alternatives`)."""

    name = "ngram"
    free = True  # a lookup, negligible beside a model forward

    def __init__(self, max_bytes: int, min_bytes: int, span_bytes: int = 64, spans: SpanTokens | None = None) -> None:
        """``spans``: the tokenized spans to share with the other sequences over the same
        vocabulary (a generator's, kept across its generations; see :meth:`_tokens`); a cache
        of this drafter's own when not given."""
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self.span_bytes = span_bytes
        self._text = ContextText()  # the context's bytes, kept across rounds
        self._encoded = span_tokens() if spans is None else spans

    def propose(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> Proposal:
        vocabulary = matcher.compiled.vocabulary
        with stats.timing("draft"):
            data = self._text.sync(context, vocabulary.token_bytes)
            written = value_length(data, self.max_bytes)
            starts = lookup(data, written, self.min_bytes, self.max_bytes)
            if not starts:  # the text holds no earlier occurrence: nothing to copy, no branch
                return Proposal()
            span = agreed_continuation(data, starts, self.span_bytes)
            run = self._tokens(span, written, matcher, limit)[:limit] if span else []
        with stats.timing("mask"):
            run = run[: matcher.accept_tokens(run)]
            if not run:  # the value as written may end where one of its occurrences ends a word
                span = first_word_end(data, starts)
            value = data[-written:] if written else b""
            ends = value_ends(run, value, span, matcher.recent_states(len(run)), matcher.compiled)
            branches = [Branch(fork, tokens, "end") for fork, tokens in ends]
            copied = b"".join(vocabulary.token_bytes[token] or b"" for token in run)
            if written + len(copied):  # inside a value: at its start a key's suffix finds the schema's texts
                for tokens in self._alternatives(data, starts, copied, written, matcher, limit - len(run)):
                    branches.append(Branch(len(run), tokens, "alternative"))
        return Proposal(run, [None] * len(run), branches)

    def _alternatives(
        self, data: bytes, starts: list[int], copied: bytes, written: int, matcher: Matcher, limit: int
    ) -> list[list[int]]:
        """Where the occurrences disagree after the bytes ``copied`` (drafted already) and
        fall into at most ``MAX_ALTERNATIVES`` groups by the byte that comes next, each
        group's agreed continuation from there, tokenized as the draft line would be and cut
        where the grammar (``matcher``, after ``copied``) forbids. ``Lily Stone`` and ``Leeds``
        after ``"L``; nothing after a suffix that many different texts follow. Only inside a
        value: at a value's start the suffix is a key, which a schema quoted in the prompt
        follows with its own texts."""
        groups: dict[bytes, list[int]] = {}
        for at in starts:
            following = data[at + len(copied) : at + len(copied) + 1]
            if following and data[at : at + len(copied)] == copied:
                groups.setdefault(following, []).append(at)
        if not 2 <= len(groups) <= MAX_ALTERNATIVES:
            return []
        alternatives = []
        for members in groups.values():
            text = agreed_continuation(data, members, self.span_bytes)[len(copied) :]
            tokens = self._tokens(text, written + len(copied), matcher, limit)[:limit]
            tokens = tokens[: matcher.copy().accept_tokens(tokens)]
            if tokens:
                alternatives.append(tokens)
        return alternatives

    def _tokens(self, span: bytes, written: int, matcher: Matcher, limit: int) -> list[int]:
        """The tokens of ``span``, of which the caller takes ``limit``: up to its first line break
        as a closed string value (when the grammar allows the value to end there) with the forced
        bytes after it, else all but the last token, which the span's end may have cut short.
        The tokenizer costs about a microsecond a byte and a draft takes a few tokens of a 64-byte
        span, so only the span's words up to a cut past ``limit`` tokens' worth of bytes
        (:func:`word_cut`) are tokenized when that gives ``limit`` tokens; and a span is
        tokenized once per vocabulary (the spans cache, :func:`span_tokens`, is shared by a
        generator's sequences): rounds often look up the same continuation again (a draft the
        grammar or the round's budget cut short, a value's alternatives), and prompts share
        text (a document or schema asked about again). Do not modify the list: it is shared."""
        end = line_end(span)
        if end > 0 or (end == 0 and written):
            closed = matcher.compiled.forced_after(matcher.state, span[:end] + b'"')
            if closed is not None:
                return closed
        cached, whole = self._encoded.get(span, _NOT_ENCODED)
        if whole or len(cached) >= limit:
            return cached
        vocabulary = matcher.compiled.vocabulary
        cut = -1 if cached else word_cut(span, BYTES_PER_TOKEN * limit)
        if cut > 0:
            tokens = _encode(vocabulary, span[:cut])  # all of them: the cut ends a word
            if len(tokens) >= limit:
                self._encoded.put(span, (tokens, False))
                return tokens
        tokens = _encode(vocabulary, span)
        tokens = tokens[:-1] if len(tokens) > 1 else tokens
        if cached:  # a cut too short for this limit: the whole span's tokens replace it
            self._encoded.pop(span)
        self._encoded.put(span, (tokens, True))
        return tokens


SPANS_KEPT = 4096  # spans a spans cache holds, least recently used dropped first (a few MB, 10 MB at most)
BYTES_PER_TOKEN = 3  # bytes of a span tokenized per token wanted, up to the next word's end (see _tokens)
_NOT_ENCODED: tuple[list[int], bool] = ([], False)

SpanTokens = BoundedCache[bytes, tuple[list[int], bool]]
"""Spans an n-gram source tokenized: span -> (its tokens, whether of the whole span), see
:meth:`NgramDrafter._tokens`. Valid for one vocabulary."""


def span_tokens() -> SpanTokens:
    """An empty spans cache for n-gram sources over one vocabulary (thread-safe, bounded)."""
    return BoundedCache(max_entries=SPANS_KEPT)


MAX_BRANCHES = 3  # value ends proposed per n-gram draft
MAX_ALTERNATIVES = 3  # continuations drafted side by side where the text's occurrences disagree


def line_end(span: bytes) -> int:
    """The offset of the first line break (``\\n`` or ``\\r``) in ``span``; -1 when none."""
    end = span.find(b"\n")
    carriage = span.find(b"\r", 0, len(span) if end < 0 else end)
    return carriage if carriage >= 0 else end


def value_ends(
    run: list[int], value: bytes, text: bytes, states: list[ParseState], compiled: CompiledGrammar
) -> list[tuple[int, list[int]]]:
    """Where a copied value may end instead of going on: the first ``MAX_BRANCHES`` word ends
    (:func:`ends_word`) of ``text`` (the source text following the value's start ``value``)
    along ``run`` where the grammar lets the string close, each as the branch
    ``(fork, tokens)`` closing it after ``run[:fork]`` with the bytes the grammar forces after
    it (``","date":"``, see :meth:`~structspec.masks.compiled.CompiledGrammar.forced_after`).
    ``states[f]`` is the parse state after ``run[:f]``."""
    branches: list[tuple[int, list[int]]] = []
    copied = b""
    for fork in range(len(run) + 1):
        if not text.startswith(copied):
            break  # past the text: a value the run closed itself
        if (copied or value)[-1:].isalnum() and ends_word(text[len(copied) :]):
            tokens = compiled.forced_after(states[fork], b'"')
            if tokens:
                branches.append((fork, tokens))
                if len(branches) == MAX_BRANCHES:
                    break
        if fork < len(run):
            copied += compiled.vocabulary.token_bytes[run[fork]] or b""
    return branches


def _encode(vocabulary, data: bytes) -> list[int]:
    """Tokens of ``data``; none where a byte of it is spelled by no token."""
    try:
        return vocabulary.encode_bytes(data)
    except ValueError:
        return []


def word_cut(span: bytes, start: int) -> int:
    """The first offset from ``start`` on where a space follows a byte that is not whitespace
    (-1: none). Tokenizers split text into words before they merge bytes into tokens, and a word
    does not run on into the space after it (byte-level BPE's words take the space before them,
    SentencePiece's pieces their ``▁``; the bundled models' tokenizer splits at every space), so
    the tokens of ``span[:cut]`` are the first tokens of ``span``'s. A tokenizer for which this
    does not hold gets other drafts, verified as exactly as any."""
    at = span.find(b" ", max(start, 1))
    while at > 0 and span[at - 1 : at].isspace():
        at = span.find(b" ", at + 1)
    return at


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
