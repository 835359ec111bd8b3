"""Token masks: which vocabulary tokens may come next from a parse state.

Design (the hot path; see docs/masks.md for the measurements behind it):

* A parse state is a set of stacks; the tokens allowed from one stack depend mostly on its
  top automaton state ``q``. For each ``q`` that generation reaches we compute, once and
  lazily, a :class:`LocalMask`: the tokens accepted while the stack never pops below the
  frame of ``q`` (*context-independent*), and the few tokens that reach the end of ``q``'s
  rule with bytes left, with the offset where they do (*context-dependent*). The first part
  is a vectorized run of ``q``'s automaton over the whole vocabulary at once (numpy, one step
  per byte position over the still-alive tokens); only tokens that reach a state with rule
  references or a possible rule end are walked one by one through real parse stacks.
* At run time the mask of a state is the OR of its stacks' context-independent words plus a
  check of the context-dependent tokens against the stack below (a real ``advance``).
* Whole-state masks are cached by parse state (stacks are hash-consed by structure), so
  the common case -- the same configuration token after token, e.g. inside a string -- is a
  dictionary hit.

Masks are packed 32-bit words: bit ``j`` of word ``i`` is token ``32 * i + j``.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import numpy as np

from structspec.errors import GrammarError
from structspec.gbnf.ast import TokenRef
from structspec.grammar import Grammar
from structspec.parse_state import ParseState, close, frame, union
from structspec.vocab import Vocabulary

STATE_CACHE_SIZE = 4096


@dataclass(frozen=True)
class LocalMask:
    """Tokens allowed from a stack topped by one automaton state, below-frame aside."""

    words: np.ndarray  # uint32 [n_words]: accepted without leaving the frame
    pending_ids: np.ndarray  # int32: tokens that leave the frame with bytes left ...
    pending_offsets: np.ndarray  # int32: ... after this many bytes
    pending_next: np.ndarray  # uint8: the byte at that offset (a cheap first filter)


@dataclass(frozen=True)
class _TokenRefSet:
    """The token ids a resolved token reference matches, as packed mask words."""

    words: np.ndarray

    def matches(self, token_id: int) -> bool:
        return bool((self.words[token_id >> 5] >> (token_id & 31)) & 1)


class CompiledGrammar:
    """A grammar bound to a vocabulary: the immutable, shared part of constrained decoding.

    Thread-safe and meant to be reused across sequences and requests; create matchers with
    :meth:`matcher`. Caches fill lazily, so the first mask comes fast.
    """

    def __init__(self, grammar: Grammar, vocabulary: Vocabulary) -> None:
        self.grammar = grammar
        self.vocabulary = vocabulary
        self.rules = grammar.ruleset
        self.n_words = (vocabulary.size + 31) // 32
        self._eos_words = _words_of(vocabulary.eos_ids, self.n_words)
        self._token_refs = tuple(self._token_ref_set(ref) for ref in self.rules.token_refs)
        self._local: dict[int, LocalMask] = {}
        self._states: OrderedDict[ParseState, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._slow = np.array(
            [bool(self.rules.refs[q]) or self.rules.final[q] for q in range(self.rules.n_states)], dtype=bool
        )

    def matcher(self):
        """A fresh :class:`~structspec.matcher.Matcher` at the start of the grammar."""
        from structspec.matcher import Matcher

        return Matcher(self)

    # -- masks -------------------------------------------------------------------------------
    def mask_words(self, state: ParseState) -> np.ndarray:
        """Packed uint32 mask of the tokens allowed from ``state`` (do not modify it)."""
        with self._lock:
            words = self._states.get(state)
            if words is not None:
                self._states.move_to_end(state)
                return words
        words = self._compute(state)
        with self._lock:
            self._states[state] = words
            if len(self._states) > STATE_CACHE_SIZE:
                self._states.popitem(last=False)
        return words

    def _compute(self, state: ParseState) -> np.ndarray:
        words = np.zeros(self.n_words, dtype=np.uint32)
        below: dict[int, ParseState | None] = {}
        for head in state.heads:
            local = self.local_mask(head.state)
            np.bitwise_or(words, local.words, out=words)
            if len(local.pending_ids) and head.parent is not None:
                parent = below.get(id(head.parent))
                if parent is None:
                    heads, accepting = close(self.rules, [head.parent])
                    parent = below[id(head.parent)] = ParseState(self.rules, heads, accepting)
                self._add_pending(words, local, parent)
            for ref, _ in self.rules.token_edges[head.state]:
                np.bitwise_or(words, self._token_refs[ref].words, out=words)
        if state.accepting:
            np.bitwise_or(words, self._eos_words, out=words)
        return words

    def _add_pending(self, words: np.ndarray, local: LocalMask, parent: ParseState) -> None:
        """Set the context-dependent tokens of ``local`` that the stack below accepts."""
        next_ok = np.zeros(256, dtype=bool)
        next_ok[list(parent.allowed_bytes())] = True
        candidates = np.flatnonzero(next_ok[local.pending_next])
        token_bytes = self.vocabulary.token_bytes
        for i in candidates.tolist():
            token_id = int(local.pending_ids[i])
            if (words[token_id >> 5] >> (token_id & 31)) & 1:
                continue
            rest = token_bytes[token_id][int(local.pending_offsets[i]) :]
            # One allowed byte is always a valid prefix; longer rests need a real advance.
            if len(rest) == 1 or parent.advance(rest) is not None:
                words[token_id >> 5] |= np.uint32(1 << (token_id & 31))

    def advance_token(self, state: ParseState, token_id: int) -> ParseState | None:
        """The state after a non-end-of-sequence token: its bytes, or a token reference."""
        spelled = self.vocabulary.token_bytes[token_id]
        following = state.advance(spelled) if spelled else None
        if self._token_refs and any(self.rules.token_edges[h.state] for h in state.heads):
            refs = self._token_refs
            by_ref = state.advance_token_ref(lambda ref: refs[ref].matches(token_id))
            following = union(following, by_ref)
        return following

    def _token_ref_set(self, ref: TokenRef) -> _TokenRefSet:
        """``<x>`` matches token x; ``!<x>`` any real token but x -- text and special tokens,
        never end-of-sequence ids (those end the text only where the grammar is complete) nor
        padding ids beyond the tokenizer."""
        named = _words_of([_resolve(ref, self.vocabulary, self.grammar.source)], self.n_words)
        if not ref.negated:
            return _TokenRefSet(named)
        vocab = self.vocabulary
        real = _words_of_array(np.concatenate([vocab.text_ids, np.fromiter(vocab.special_tokens.values(), np.int32)]),
                               self.n_words)
        return _TokenRefSet(real & ~named & ~self._eos_words)

    def local_mask(self, q: int) -> LocalMask:
        """The context-independent part of the mask for stacks topped by state ``q``."""
        local = self._local.get(q)
        if local is None:
            local = self._local[q] = self._compute_local(q)
        return local

    def _compute_local(self, q: int) -> LocalMask:
        vocab, rules, tables = self.vocabulary, self.rules, _vocab_tables(self.vocabulary)
        first_map = np.full(256, -1, dtype=np.int32)
        for b, target in rules.byte_next[q].items():
            first_map[b] = target
        rows, cur, lengths = self._candidates(tables, first_map, sorted(rules.byte_next[q]))
        accepted: list[np.ndarray] = []
        # Tokens made only of bytes that loop on q stay in q: accepted with no walk at all
        # (inside a JSON string that is nearly the whole vocabulary).
        loop = _byte_set_words([b for b, target in rules.byte_next[q].items() if target == q])
        if any(loop):
            stay = np.ones(len(rows), dtype=bool)
            for k in range(4):
                stay &= (tables.byte_sets[k][rows] & ~loop[k]) == 0
            accepted.append(rows[stay])
            moving = np.flatnonzero(~stay)
            rows, cur, lengths = rows[moving], cur[moving], lengths[moving]
        flat_table, n_classes, byte_class = rules.class_table.ravel(), rules.class_table.shape[1], rules.byte_class
        escalated: list[tuple[np.ndarray, np.ndarray, int]] = []
        pos = 1
        while len(rows):
            done = int(np.searchsorted(lengths, pos, side="right"))
            if done:
                accepted.append(rows[:done])
                rows, cur, lengths = rows[done:], cur[done:], lengths[done:]
            slow = self._slow[cur]
            if slow.any():
                escalated.append((rows[slow], cur[slow], pos))
                fast = np.flatnonzero(~slow)
                rows, cur, lengths = rows[fast], cur[fast], lengths[fast]
            if not len(rows):
                break
            nxt = flat_table[cur * n_classes + byte_class[tables.columns[pos][rows]]]
            alive = np.flatnonzero(nxt >= 0)
            rows, cur, lengths = rows[alive], nxt[alive], lengths[alive]
            pos += 1
        ids = [vocab.text_ids[r] for r in accepted]
        pending_ids: list[np.ndarray] = []
        pending_offsets: list[np.ndarray] = []
        for esc_rows, esc_states, offset in escalated:
            for start in np.unique(esc_states).tolist():
                group = np.sort(esc_rows[esc_states == start])  # back to byte order for prefix sharing
                ids.extend(self._walk_group(start, offset, group, pending_ids, pending_offsets))
        pend_ids = np.concatenate(pending_ids) if pending_ids else np.zeros(0, np.int32)
        pend_offsets = np.concatenate(pending_offsets) if pending_offsets else np.zeros(0, np.int32)
        rows = tables.row_of_id[pend_ids]
        return LocalMask(
            words=_words_of_array(np.concatenate(ids) if ids else np.zeros(0, np.int32), self.n_words),
            pending_ids=pend_ids,
            pending_offsets=pend_offsets,
            pending_next=vocab.byte_matrix[rows, pend_offsets] if len(rows) else np.zeros(0, np.uint8),
        )

    def _candidates(
        self, tables: _VocabTables, first_map: np.ndarray, first_bytes: list[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows of the tokens whose first byte moves from the state, their state after it and
        their lengths -- in order of byte length, so tokens ending at each step lead the arrays."""
        spans = [tables.first_byte_rows[b] for b in first_bytes]
        count = sum(stop - start for start, stop in spans)
        if count * 5 < len(tables.by_length):  # few candidates: gather the trie ranges
            rows = np.concatenate([np.arange(start, stop, dtype=np.int32) for start, stop in spans]) if spans else (
                np.zeros(0, np.int32))
            lengths = self.vocabulary.lengths[rows]
            order = np.argsort(lengths, kind="stable")
            rows, lengths = rows[order], lengths[order]
            return rows, first_map[tables.columns[0][rows]], lengths
        cur = first_map[tables.first_byte]
        keep = np.flatnonzero(cur >= 0)
        return tables.by_length[keep], cur[keep], tables.sorted_lengths[keep]

    def _walk_group(
        self, q: int, offset: int, rows: np.ndarray, pending_ids: list[np.ndarray], pending_offsets: list[np.ndarray]
    ) -> list[np.ndarray]:
        """Walk tokens that all reach state ``q`` after ``offset`` bytes through real parse
        stacks over a lone frame ``q``, one parse step per distinct prefix (a trie walk over
        the byte-sorted rows, splitting blocks by the next byte).

        Returns the ids accepted without leaving the frame; for each other token, appends
        every offset at which the frame's rule may end with bytes left (checked against the
        stack below at run time).
        """
        vocab = self.vocabulary
        matrix, lengths, text_ids = vocab.byte_matrix, vocab.lengths, vocab.text_ids
        heads, accepting = close(self.rules, [frame(self.rules, q, None)])
        accepted: list[np.ndarray] = []
        todo: list[tuple[np.ndarray, int, ParseState, tuple[int, ...]]] = [
            (rows, offset, ParseState(self.rules, heads, accepting), ())
        ]
        while todo:
            block, depth, state, ends = todo.pop()
            if state.accepting:
                ends = (*ends, depth)
            done = lengths[block] == depth
            if done.any():
                accepted.append(text_ids[block[done]])
                block = block[~done]
            if not len(block):
                continue
            column = matrix[block, depth]
            cuts = (np.flatnonzero(np.diff(column)) + 1).tolist()
            for start, stop in zip([0, *cuts], [*cuts, len(block)], strict=True):
                child = state.advance_byte(int(column[start]))
                if child is not None:
                    todo.append((block[start:stop], depth + 1, child, ends))
                elif ends:
                    ids = text_ids[block[start:stop]]
                    for end in ends:
                        pending_ids.append(ids)
                        pending_offsets.append(np.full(len(ids), end, dtype=np.int32))
        return accepted


@dataclass(frozen=True)
class _VocabTables:
    """Column-major token bytes and a by-length order, built once per vocabulary."""

    columns: np.ndarray  # uint8 [max_len, n]: columns[i][row] = byte i of trie row `row`
    by_length: np.ndarray  # int32 trie rows sorted by byte length (stable)
    sorted_lengths: np.ndarray  # int32 lengths in that order
    first_byte: np.ndarray  # uint8 first byte in that order
    row_of_id: np.ndarray  # int32 [size]: trie row of each token id (-1 for non-text ids)
    byte_sets: np.ndarray  # uint64 [4, n]: bit b set when trie row `row` contains byte b
    first_byte_rows: tuple[tuple[int, int], ...]  # per byte: the trie rows starting with it


@functools.lru_cache(maxsize=8)
def _vocab_tables(vocab: Vocabulary) -> _VocabTables:
    order = np.argsort(vocab.lengths, kind="stable").astype(np.int32)
    columns = np.ascontiguousarray(vocab.byte_matrix.T)
    bounds = np.searchsorted(columns[0], np.arange(257)) if len(order) else np.zeros(257, np.int64)
    row_of_id = np.full(vocab.size, -1, dtype=np.int32)
    row_of_id[vocab.text_ids] = np.arange(len(vocab.text_ids), dtype=np.int32)
    return _VocabTables(
        columns=columns,
        by_length=order,
        sorted_lengths=vocab.lengths[order],
        first_byte=columns[0][order] if len(order) else np.zeros(0, np.uint8),
        row_of_id=row_of_id,
        byte_sets=_token_byte_sets(columns, order, vocab.lengths[order]),
        first_byte_rows=tuple(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)),
    )


def _token_byte_sets(columns: np.ndarray, by_length: np.ndarray, sorted_lengths: np.ndarray) -> np.ndarray:
    sets = np.zeros((4, len(by_length)), dtype=np.uint64)
    for i, column in enumerate(columns):
        rows = by_length[np.searchsorted(sorted_lengths, i, side="right") :]  # tokens longer than i
        values = column[rows]
        bits = np.left_shift(np.uint64(1), (values & 63).astype(np.uint64))
        words = values >> 6
        for k in range(4):
            hit = np.flatnonzero(words == k)
            sets[k, rows[hit]] |= bits[hit]
    return sets


def _byte_set_words(byte_values: list[int]) -> list[np.uint64]:
    words = [0, 0, 0, 0]
    for b in byte_values:
        words[b >> 6] |= 1 << (b & 63)
    return [np.uint64(w) for w in words]


def _resolve(ref: TokenRef, vocab: Vocabulary, source: str) -> int:
    """The id a token reference names; E109 when the vocabulary has no such token."""
    if isinstance(ref.token, int):
        if not 0 <= ref.token < vocab.size:
            raise _token_error(ref, f"token id {ref.token} is outside the vocabulary (size {vocab.size})", source)
        return ref.token
    token_id = vocab.special_tokens.get(ref.token)
    if token_id is None:
        spelled = ref.token.encode("utf-8")
        matches = [i for i, b in enumerate(vocab.token_bytes) if b == spelled]
        if len(matches) != 1:
            raise _token_error(ref, f"no single token is spelled {ref.token!r} in this vocabulary", source)
        token_id = matches[0]
    return token_id


def _token_error(ref: TokenRef, message: str, source: str) -> GrammarError:
    lines = source.splitlines()
    line = lines[ref.line - 1] if 0 < ref.line <= len(lines) else None
    return GrammarError("E109", message, ref.line, ref.column, line)


def _words_of(ids, n_words: int) -> np.ndarray:
    return _words_of_array(np.fromiter(ids, dtype=np.int64), n_words)


def _words_of_array(ids: np.ndarray, n_words: int) -> np.ndarray:
    bits = np.zeros(n_words * 32, dtype=bool)
    bits[ids] = True
    return np.packbits(bits, bitorder="little").view(np.uint32).copy()


_COMPILED: WeakKeyDictionary[Grammar, dict[str, CompiledGrammar]] = WeakKeyDictionary()
_COMPILED_LOCK = threading.Lock()


def compile(grammar: Grammar, tokenizer_or_vocabulary) -> CompiledGrammar:
    """Bind ``grammar`` to a tokenizer (or :class:`~structspec.Vocabulary`); cached per pair."""
    vocabulary = (
        tokenizer_or_vocabulary
        if isinstance(tokenizer_or_vocabulary, Vocabulary)
        else Vocabulary.from_tokenizer(tokenizer_or_vocabulary)
    )
    with _COMPILED_LOCK:
        per_grammar = _COMPILED.setdefault(grammar, {})
        compiled = per_grammar.get(vocabulary.fingerprint)
        if compiled is None:
            compiled = per_grammar[vocabulary.fingerprint] = CompiledGrammar(grammar, vocabulary)
    return compiled
