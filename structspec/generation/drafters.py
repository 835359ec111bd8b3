"""The three draft sources. Each extends a draft from a context and a matcher already advanced
along it; each keeps the matcher in step with what it adds and stops where the grammar does."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import accumulate, islice

import torch

from structspec.generation.adaptive import DraftModelCost
from structspec.generation.cache import CachedModel, common_prefix
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
            tokens = matcher.forced_tokens()[:limit]
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
        self._ids: list[int] = []  # the context of the last call, kept across rounds
        self._ends: list[int] = []  # where each of its tokens' bytes end in its text
        self._data = b""  # its text
        self._encoded = span_tokens() if spans is None else spans

    def propose(self, context: list[int], matcher: Matcher, limit: int, stats: Stats) -> Proposal:
        vocabulary = matcher.compiled.vocabulary
        with stats.timing("draft"):
            data = self._bytes(context, vocabulary.token_bytes)
            written = value_length(data, self.max_bytes)
            starts = self.lookup(data, written)
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

    def _bytes(self, context: list[int], token_bytes) -> bytes:
        """The context's text, reusing the part shared with the previous call."""
        ids, ends = self._ids, self._ends
        keep = common_prefix(ids, context, len(context))
        if keep < len(ids):  # tokens dropped (a rejected draft): their bytes go too
            del ids[keep:], ends[keep:]
            self._data = self._data[: ends[-1] if ends else 0]
        if keep < len(context):
            added = context[keep:]
            pieces = [token_bytes[token_id] or b"" for token_id in added]
            ids += added
            ends += islice(accumulate(map(len, pieces), initial=len(self._data)), 1, None)
            self._data += b"".join(pieces)
        return self._data

    def lookup(self, data: bytes, written: int | None = None) -> list[int]:
        """Offsets just after the earlier occurrences of the longest matching suffix of
        ``data`` (the latest ``MAX_SCANNED``, latest first); a suffix shorter than
        ``min_bytes`` counts only as the whole value being written (``written`` bytes, see
        :func:`value_length`), found where it starts a word."""
        top = min(self.max_bytes, len(data) - 1)
        value = value_length(data, self.max_bytes) if written is None else written
        length = min(self.min_bytes, value) if value else self.min_bytes
        longest = 0
        while length < self.min_bytes:  # the value being written: a word start, one length after another
            if length > top or not self._occurrences(data, length, 1):
                return self._occurrences(data, longest, MAX_SCANNED) if longest else []
            longest, length = length, length + 1
        longest = longest_repeated_suffix(data, length, top) or longest
        return self._occurrences(data, longest, MAX_SCANNED) if longest else []

    def _occurrences(self, data: bytes, length: int, most: int) -> list[int]:
        size = len(data)
        suffix = data[size - length :]
        word_start = length < self.min_bytes
        hits: list[int] = []
        at = data.rfind(suffix, 0, size - 1)
        for _ in range(MAX_SCANNED):
            if at < 0 or len(hits) == most:
                break
            if not word_start or at == 0 or not data[at - 1 : at].isalnum():
                hits.append(at + length)
            at = data.rfind(suffix, 0, at + length - 1)
        return hits


MAX_SCANNED = 64  # occurrences of a suffix looked at, latest first
SPANS_KEPT = 4096  # spans a spans cache holds, least recently used dropped first (a few MB, 10 MB at most)
BYTES_PER_TOKEN = 3  # bytes of a span tokenized per token wanted, up to the next word's end (see _tokens)
_NOT_ENCODED: tuple[list[int], bool] = ([], False)

SpanTokens = BoundedCache[bytes, tuple[list[int], bool]]
"""Spans an n-gram source tokenized: span -> (its tokens, whether of the whole span), see
:meth:`NgramDrafter._tokens`. Valid for one vocabulary."""


def span_tokens() -> SpanTokens:
    """An empty spans cache for n-gram sources over one vocabulary (thread-safe, bounded)."""
    return BoundedCache(max_entries=SPANS_KEPT)


def longest_repeated_suffix(data: bytes, shortest: int, longest: int) -> int:
    """The greatest length in ``[shortest, longest]`` (``1 <= shortest``, ``longest < len(data)``)
    whose suffix of ``data`` also ends earlier in ``data``; 0 when none does. A suffix found
    earlier implies each shorter one is, so the lengths are tried growing by doubling steps, then
    halved between the last found and the first not found: a few ``rfind`` calls rather than
    one per byte of the match."""
    end = len(data) - 1
    found, missing, step = shortest - 1, longest + 1, 1  # a length found (or none yet), one not found
    while found + step < missing:  # gallop: shortest, then 1, 2, 4 ... bytes longer
        probe = found + step
        if data.rfind(data[-probe:], 0, end) < 0:
            missing = probe
            break
        found, step = probe, step * 2 if probe > shortest else 1
    while missing - found > 1:  # bisect
        middle = (found + missing) // 2
        if data.rfind(data[-middle:], 0, end) >= 0:
            found = middle
        else:
            missing = middle
    return found if found >= shortest else 0


VALUE_DELIMITERS = tuple(bytes([byte]) for byte in b'":,[{')


def value_length(data: bytes, limit: int) -> int:
    """How many trailing bytes of ``data`` follow its last JSON delimiter (the value being
    written); all of the last ``limit`` bytes when none of them is one."""
    tail = data[-limit:]
    return len(tail) - 1 - max(map(tail.rfind, VALUE_DELIMITERS))


def agreed_continuation(data: bytes, starts: list[int], span_bytes: int) -> bytes:
    """The longest prefix shared by the ``span_bytes`` after each offset of ``starts``."""
    spans = [data[start : start + span_bytes] for start in starts]
    if not spans:
        return b""
    low, high = min(spans), max(spans)  # what the sorted extremes share, every span shares
    return low[: shared_length(low, high)]


def shared_length(low: bytes, high: bytes) -> int:
    """How many leading bytes ``low`` and ``high`` share: the first differing byte is where
    their bits, read as big-endian numbers of the same width, first differ."""
    width = min(len(low), len(high))
    differ = int.from_bytes(low[:width], "big") ^ int.from_bytes(high[:width], "big")
    return width - (differ.bit_length() + 7) // 8


MAX_BRANCHES = 3  # value ends proposed per n-gram draft
MAX_ALTERNATIVES = 3  # continuations drafted side by side where the text's occurrences disagree


def ends_word(following: bytes) -> bool:
    """Whether a word ends before ``following``: it starts with whitespace, or with
    punctuation followed by whitespace or nothing more."""
    first, second = following[:1], following[1:2]
    return first.isspace() or (first in (b".", b",", b";", b":", b"!", b"?", b")") and (not second or second.isspace()))


def first_word_end(data: bytes, starts: list[int]) -> bytes:
    """The two bytes at the first offset of ``starts`` where a word ends (:func:`ends_word`);
    empty when a word ends at none. Each distinct pair is judged once."""
    return next((two for two in dict.fromkeys(data[at : at + 2] for at in starts) if ends_word(two)), b"")


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
