"""Token masks: which vocabulary tokens may come next from a parse state.

Design (the hot path; see docs/masks.md for the measurements behind it):

* A parse state is a set of stacks; the tokens allowed from one stack depend mostly on its
  top automaton state ``q``. For each ``q`` that generation reaches we compute, once and
  lazily, a :class:`LocalMask`: the tokens consumed while the stack never pops below the
  frame of ``q`` (*context-independent*), and the token-trie nodes after which ``q``'s rule
  may end with bytes left (*context-dependent*). Both come from one breadth-first sweep of
  the vocabulary's token trie through a lazily determinized pushdown
  (:mod:`structspec.masks.runner`, :mod:`structspec.tokens.trie`).
* At run time the mask of a state is the OR of its stacks' context-independent words plus a
  sweep of the context-dependent nodes from the stack below.
* Whole-state masks are cached by parse state (stacks are hash-consed by structure), so
  the common case -- the same configuration token after token, e.g. inside a string -- is a
  dictionary hit.

Masks are packed 32-bit words: bit ``j`` of word ``i`` is token ``32 * i + j``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from weakref import WeakKeyDictionary

import numpy as np

from structspec.errors import GrammarError
from structspec.grammar import Grammar
from structspec.grammar.completion import completion_cost, rule_completion_costs, spellable_bytes
from structspec.grammar.parse_state import Frame, ParseState, close, frame, union
from structspec.ir.expr import TokenRef
from structspec.masks.matcher import Matcher
from structspec.masks.runner import StackRunner, rows_in
from structspec.tokens.trie import token_trie
from structspec.tokens.vocabulary import Vocabulary

STATE_CACHE_BYTES = 16 << 20  # whole-state mask cache per compiled grammar (LRU)
FORCED_CACHE_SIZE = 4096  # (state, text) forced continuations kept per compiled grammar (LRU)
ADVANCE_CACHE_SIZE = 4096  # (state, token) steps kept per compiled grammar (LRU; a round needs only its own)
MISSING = object()  # what a Memo holds for a key it does not hold


class Memo:
    """A bounded map from keys to computed values, shared by threads: the least recently used
    is dropped past ``size``. Values may be ``None``; :meth:`get` says ``MISSING`` instead."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        """The value kept for ``key`` (now the most recently used), or ``MISSING``."""
        with self._lock:
            value = self._items.get(key, MISSING)
            if value is not MISSING:
                self._items.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            if len(self._items) > self.size:
                self._items.popitem(last=False)


@dataclass(frozen=True)
class LocalMask:
    """Tokens allowed from a stack topped by one automaton state, below-frame aside."""

    words: np.ndarray  # uint32 [n_words]: accepted without leaving the frame
    pending: np.ndarray  # int32 trie nodes after which the frame may end, the tokens below with bytes left


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
        self._closures: dict[int, tuple[tuple[int, ...], ...]] = {}  # see _reached_in_place
        self._states = Memo(max(64, STATE_CACHE_BYTES // (4 * self.n_words)))  # state -> mask words
        self._steps = Memo(ADVANCE_CACHE_SIZE)  # (state, token id) -> state after it
        self._jumps = Memo(FORCED_CACHE_SIZE)  # (state, text) -> tokens of the text and what it forces
        self._runner = StackRunner(self.rules, token_trie(vocabulary))
        self._completion_costs: list[float] | None = None  # filled on first use (threads may race: same result)

    def matcher(self) -> Matcher:
        """A fresh :class:`~structspec.masks.matcher.Matcher` at the start of the grammar."""
        return Matcher(self)

    # -- masks -------------------------------------------------------------------------------
    def mask_words(self, state: ParseState) -> np.ndarray:
        """Packed uint32 mask of the tokens allowed from ``state`` (do not modify it)."""
        words = self._states.get(state)
        if words is MISSING:
            words = self._compute(state)
            self._states.put(state, words)
        return words

    def known_mask_words(self, state: ParseState) -> np.ndarray | None:
        """The mask of ``state`` if it was computed and is still cached, else None (no work)."""
        words = self._states.get(state)
        return None if words is MISSING else words

    def _compute(self, state: ParseState) -> np.ndarray:
        words = np.zeros(self.n_words, dtype=np.uint32)
        lo: list[np.ndarray] = []
        hi: list[np.ndarray] = []
        for head in self._own_heads(state.heads):
            local = self.local_mask(head.state)
            np.bitwise_or(words, local.words, out=words)
            if len(local.pending) and head.parent is not None:
                self._accepted_below(head.parent, local.pending, lo, hi)
        for head in state.heads:
            for ref, _ in self.rules.token_edges[head.state]:
                np.bitwise_or(words, self._token_refs[ref].words, out=words)
        if lo:
            np.bitwise_or(words, self._words_of_rows(np.concatenate(lo), np.concatenate(hi)), out=words)
        if state.accepting:
            np.bitwise_or(words, self._eos_words, out=words)
        return words

    def _own_heads(self, heads: tuple[Frame, ...]) -> list[Frame]:
        """The heads whose tokens are not already inside another head's.

        Closing a head ``g`` pushes the rules it calls (and reaches the states after callees
        that may be empty); those heads sit in the state beside ``g``, but ``g``'s local mask
        already runs them, from a lone frame, through their return into ``g``'s rule, and its
        pending nodes continue below ``g``. So a head the closure of ``g`` reaches in place
        adds nothing once ``g`` is counted (the first visit of ``{"`` in an object with
        undeclared keys would otherwise sweep the key rule twice). Heads that only cover each
        other (a cycle of empty calls) are all kept."""
        if len(heads) < 2:
            return list(heads)
        present = set(heads)
        covers: dict[Frame, list[Frame]] = {}
        for g in heads:
            for chain in self._reached_in_place(g.state):
                top = g.parent
                for q in reversed(chain):
                    top = frame(self.rules, q, top)
                if top in present and top is not g:
                    covers.setdefault(g, []).append(top)
        if not covers:
            return list(heads)
        covered = {h for hs in covers.values() for h in hs}
        skipped: set[Frame] = set()
        todo = [g for g in heads if g not in covered]
        while todo:
            for h in covers.get(todo.pop(), ()):
                if h not in skipped:
                    skipped.add(h)
                    todo.append(h)
        return [h for h in heads if h not in skipped]

    def _reached_in_place(self, q: int) -> tuple[tuple[int, ...], ...]:
        """The stacks (automaton states, top first) that closing a lone frame topped by ``q``
        reaches besides that frame, before any input."""
        found = self._closures.get(q)
        if found is None:
            lone = frame(self.rules, q, None)
            heads, _ = close(self.rules, [lone])
            found = self._closures[q] = tuple(tuple(h.states()) for h in heads if h is not lone)
        return found

    def _accepted_below(self, parent: Frame, nodes: np.ndarray, lo: list[np.ndarray], hi: list[np.ndarray]) -> None:
        """Append the row ranges of the tokens below trie ``nodes`` whose rest the stack
        ``parent`` accepts (tokens that leave a frame above it after those nodes): each head of
        its closure runs them (the runs are kept: the same nodes recur below the stacks of a
        list's items or a counted string's positions), and what leaves that head's frame in turn
        goes one level down."""
        heads, _ = close(self.rules, [parent])
        runner = self._runner
        for head in self._own_heads(heads):
            accepted_lo, accepted_hi, pending = runner.run(runner.start(head.state), nodes, keep=True)
            lo.append(accepted_lo)
            hi.append(accepted_hi)
            if len(pending) and head.parent is not None:
                self._accepted_below(head.parent, pending, lo, hi)

    def forced_tokens(self, state: ParseState) -> list[int]:
        """Canonical tokenization of the bytes every continuation of ``state`` starts with
        (empty where this vocabulary cannot spell them). Cached like :meth:`forced_after`: a
        schema's keys and punctuation recur across array items, sequences and requests; do not
        modify the list."""
        return self.forced_after(state, b"") or []

    def forced_after(self, state: ParseState, data: bytes) -> list[int] | None:
        """Canonical tokenization of ``data`` and the bytes every continuation after it starts
        with, together (a closing quote and the next key: ``","date":"``); ``None`` where the
        grammar does not allow ``data`` at ``state`` or the vocabulary cannot spell it. Cached
        per (state, data); do not modify the list."""
        key = (state, data)
        tokens = self._jumps.get(key)
        if tokens is MISSING:
            after = state.advance(data)
            try:
                tokens = None if after is None else self.vocabulary.encode_bytes(data + after.forced_bytes())
            except ValueError:  # a byte no token spells
                tokens = None
            self._jumps.put(key, tokens)
        return tokens

    def tokens_to_finish(self, state: ParseState) -> float:
        """An upper bound on the tokens ``state`` needs to become complete: its shortest
        completion spelled one byte per token (``inf`` when this vocabulary cannot spell one)."""
        costs = self._completion_costs
        if costs is None:
            spellable = spellable_bytes(self.vocabulary.byte_matrix, self.vocabulary.lengths)
            costs = self._completion_costs = rule_completion_costs(self.rules, spellable)
        return completion_cost(state, costs)

    def advance_token(self, state: ParseState, token_id: int) -> ParseState | None:
        """The state after a non-end-of-sequence token: its bytes, or a token reference
        (cached: speculative decoding steps along each draft token twice, drafting and
        verifying, and forced tokens recur)."""
        key = (state, token_id)
        following = self._steps.get(key)
        if following is MISSING:
            following = self._advance_token(state, token_id)
            self._steps.put(key, following)
        return following

    def _advance_token(self, state: ParseState, token_id: int) -> ParseState | None:
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
        runner = self._runner
        lo, hi, pending = runner.run(runner.start(q), np.zeros(1, np.int32))  # from the trie root
        return LocalMask(words=self._words_of_rows(lo, hi), pending=pending)

    def _words_of_rows(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Mask words of the text tokens in the trie's row ranges ``[lo, hi)``."""
        bits = np.zeros(self.n_words * 32, dtype=bool)
        bits[self.vocabulary.text_ids] = rows_in(lo, hi, len(self.vocabulary.text_ids))
        return np.packbits(bits, bitorder="little").view(np.uint32)


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
