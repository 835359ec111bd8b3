"""Token masks: which vocabulary tokens may come next from a parse state.

Design (the hot path; see docs/masks.md for the measurements behind it):

* The text tokens a parse state allows come from one depth-first sweep of the vocabulary's
  token trie through a lazily determinized pushdown, in native code with the GIL released
  (:mod:`structspec.masks.runner`, :mod:`structspec.tokens.trie`); subtrees whose remaining
  bytes loop, or step through a counted repetition, are accepted without expanding them.
  Token references and end-of-sequence are added on top.
* Whole-state masks are cached by parse state (stacks are hash-consed by structure), so
  the common case -- the same configuration token after token, e.g. inside a string -- is a
  dictionary hit. Equal masks share one array, across states and compiled grammars (found by
  a native digest of their words, compared in full): the positions of a counted string, and
  the same schema shapes in different grammars, allow the same tokens.
* A one-stack state missing that cache may share its mask with states whose stacks agree on
  their top frames (a schema's keys nested at other depths or under other parents): the mask
  swept from the top frames over an opaque frame is kept per top, unless some token's bytes
  pop into the opaque frame, which stops that sweep.
* Parse states are numbered in a flat state table (:attr:`CompiledGrammar.table`,
  :mod:`structspec.masks._states`), which holds the token steps between them and what a
  decoding round reads by number (forced tokens, finishing costs), so that greedy
  verification walks a draft tree in one native call.

Masks are packed 32-bit words: bit ``j`` of word ``i`` is token ``32 * i + j``.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from functools import partial
from weakref import WeakValueDictionary

import numpy as np

from structspec.errors import GrammarError
from structspec.grammar import Grammar
from structspec.grammar.completion import completion_cost, rule_completion_costs, shortest_steps, spellable_bytes
from structspec.grammar.parse_state import Frame, ParseState, union
from structspec.grammar.tags import StructuralTag
from structspec.ir.expr import TokenRef
from structspec.lru import MISSING, BoundedCache
from structspec.masks._states import STALE, StateTable
from structspec.masks.matcher import Matcher
from structspec.masks.runner import StackRunner, same_words, words_digest
from structspec.tokens.trie import token_trie
from structspec.tokens.vocabulary import Vocabulary

STATE_CACHE_BYTES = 16 << 20  # whole-state mask cache per compiled grammar (LRU)
FORCED_CACHE_ENTRIES = 4096  # (state, text) forced continuations kept per compiled grammar (LRU)
FORCED_CACHE_BYTES = 2 << 20
MAX_NUMBERED_STATES = 4096  # states numbered per compiled grammar before the state table starts a new epoch
MAX_KNOWN_STEPS = 4096  # (state, token) steps it knows before it does (a round needs only its own)
TOP_FRAMES = (1, 3)  # stack frames a state's top masks read, tried in turn (see _new_mask)
TOP_CACHE_ENTRIES = 8192  # top masks (or None: some token reaches below) kept per compiled grammar (LRU)
TOP_CACHE_BYTES = 8 << 20
OBJECT_BYTES = 64  # estimated bytes of a small Python object (a tuple, a parse state, a dict entry)
POINTER_BYTES = 8
RULE_STATE_BYTES = 64  # estimated bytes per automaton state of a grammar: its rule tuples and flags (~40 measured)


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
        self._eos_words = _eos_words(vocabulary, self.n_words)
        self._token_refs = tuple(self._token_ref_set(ref) for ref in self.rules.token_refs)
        # state -> mask words; (state, text) -> tokens of the text and of what it forces
        self._states: BoundedCache[ParseState, np.ndarray] = BoundedCache(
            max_bytes=STATE_CACHE_BYTES, weigh=_mask_bytes)
        # parse states numbered, and the token steps between them (see structspec/masks/_states.pyx)
        self.table = StateTable(MAX_NUMBERED_STATES, MAX_KNOWN_STEPS)
        self._jumps: BoundedCache[tuple[ParseState, bytes], list[int] | None] = BoundedCache(
            max_entries=FORCED_CACHE_ENTRIES, max_bytes=FORCED_CACHE_BYTES, weigh=_tokens_bytes)
        # the top frames of a one-stack state (see _top_key) -> its mask, when no token reaches below them
        # (else None)
        self._tops: BoundedCache[tuple[tuple[int, ...], bool, bool], np.ndarray | None] = BoundedCache(
            max_entries=TOP_CACHE_ENTRIES, max_bytes=TOP_CACHE_BYTES, weigh=_top_bytes)
        self._trie = token_trie(vocabulary)
        self._runner = StackRunner(self.rules, vocabulary, self._trie, self.n_words)
        self._completion_costs: list[float] | None = None  # filled on first use (threads may race: same result)
        self._spellable: np.ndarray | None = None  # see _spellable_bytes()

    def matcher(self) -> Matcher:
        """A fresh :class:`~structspec.masks.matcher.Matcher` at the start of the grammar."""
        return Matcher(self)

    @property
    def nbytes(self) -> int:
        """Estimated bytes held by this compiled grammar and its grammar: the rule set, the
        masks and steps cached so far and the runner's tables. The token trie is shared by
        every grammar of the vocabulary and not counted. Grows as generation visits new states."""
        rules = self.rules
        return (
            rules.move_rows.nbytes
            + rules.move_row.nbytes
            + rules.n_states * RULE_STATE_BYTES
            + len(self.grammar.source)
            + self._states.nbytes
            + self.table.nbytes
            + self._jumps.nbytes
            + self._tops.nbytes
            + self._runner.nbytes
        )

    # -- masks -------------------------------------------------------------------------------
    def mask_words(self, state: ParseState) -> np.ndarray:
        """Packed uint32 mask of the tokens allowed from ``state`` (do not modify it)."""
        words = self._states.get(state)
        if words is MISSING:
            words = self._states.put(state, self._new_mask(state))
        return words

    def known_mask_words(self, state: ParseState) -> np.ndarray | None:
        """The mask of ``state`` if it was computed and is still cached, else None (no work)."""
        words = self._states.get(state)
        return None if words is MISSING else words

    def _new_mask(self, state: ParseState) -> np.ndarray:
        """The mask of a state not in the whole-state cache. Many one-stack states differ only
        below the tokens' reach (a schema's keys, nested at different depths or under different
        parents): the mask computed from the stack's top frames alone holds for all of them,
        unless some token pops into what lies below, which the sweep of the cut stack reports
        (then None is kept for those tops, and the next depth is tried, then the whole stack)."""
        heads = state.heads
        if len(heads) == 1:  # several stacks: their tops rarely recur together
            for frames in TOP_FRAMES:
                key = _top_key(heads[0], frames, state.accepting)
                words = self._tops.get(key)
                if words is MISSING:
                    words = self._compute(state, frames)
                    words = self._tops.put(key, None if words is None else _shared(words))
                if words is not None:
                    return words
        return _shared(self._compute(state))

    def _compute(self, state: ParseState, frames: int = 0) -> np.ndarray | None:
        words = self._runner.mask(state, frames)
        if words is None:
            return None
        if self._token_refs:
            for head in state.heads:
                for ref, _ in self.rules.token_edges[head.state]:
                    np.bitwise_or(words, self._token_refs[ref].words, out=words)
        if state.accepting:
            np.bitwise_or(words, self._eos_words, out=words)
        return words

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
            tokens = self._jumps.put(key, tokens)
        return tokens

    def tokens_to_finish(self, state: ParseState) -> float:
        """An upper bound on the tokens ``state`` needs to become complete: its shortest
        completion spelled one byte per token (``inf`` when this vocabulary cannot spell one)."""
        return completion_cost(state, self._costs())

    def finishing_tokens(self, state: ParseState) -> list[int]:
        """Tokens that start one shortest completion of ``state``: after any of them
        :meth:`tokens_to_finish` is at least one lower (the text tokens spelling a prefix of
        its first bytes, or the tokens of the token reference it starts with). End-of-sequence
        ids when ``state`` is complete; empty when it cannot be completed. Sorted by id."""
        if state.accepting:
            return sorted(self.vocabulary.eos_ids)
        vocab, trie = self.vocabulary, self._trie
        found: list[int] = []
        node = 0  # the token-trie node of the bytes so far: steps go on while some token spells them
        for is_byte, value in shortest_steps(state, self._costs(), self._spellable_bytes()):
            if not is_byte:
                if node == 0:
                    bits = np.unpackbits(self._token_refs[value].words.view(np.uint8), bitorder="little")
                    return np.flatnonzero(bits[: vocab.size]).tolist()
                break
            lo, hi = int(trie.child_lo[node]), int(trie.child_hi[node])
            at = lo + int(np.searchsorted(trie.byte[lo:hi], value))
            if at == hi or trie.byte[at] != value:
                break
            node = at
            found += vocab.text_ids[trie.row_lo[node] : trie.end_hi[node]].tolist()
        return sorted(found)

    def _costs(self) -> list[float]:
        costs = self._completion_costs
        if costs is None:
            costs = self._completion_costs = rule_completion_costs(self.rules, self._spellable_bytes())
        return costs

    def _spellable_bytes(self) -> np.ndarray:
        """The bytes some single-byte text token spells, found on first use (only completion
        reads them: compiling for the first mask does not pay for it; threads may race: same result)."""
        spellable = self._spellable
        if spellable is None:
            vocab = self.vocabulary
            spellable = self._spellable = spellable_bytes(vocab.byte_matrix, vocab.lengths)
        return spellable

    def advance_token(self, state: ParseState, token_id: int) -> ParseState | None:
        """The state after a non-end-of-sequence token: its bytes, or a token reference
        (cached in :attr:`table`: speculative decoding steps along each draft token twice,
        drafting and verifying, and forced tokens recur)."""
        table = self.table
        while True:
            epoch = table.epoch
            after, _, following = table.follow(table.number(state), token_id, epoch, self._advance_token)
            if after != STALE:  # else another thread started an epoch meanwhile: number the state again
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


_MASKS: dict[int, weakref.ref] = {}
"""Masks held by some compiled grammar's cache, by a 64-bit digest of their words (length
included): equal masks share one array while any cache holds it. An entry goes when its array
is freed (a plain dict of weak references: ``WeakValueDictionary`` costs microseconds a call).
No lock: each dict operation is atomic, and two threads racing on one key can only leave an
equal mask unshared; a shared array is always checked word for word."""


def _shared(words: np.ndarray) -> np.ndarray:
    """The array already held with the same words as ``words``, else ``words`` (now held and
    read-only: the caches and every matcher share it, and some trust its identity). Two
    different masks with one digest are both kept, the second unshared."""
    words.flags.writeable = False
    key = words_digest(words)
    ref = _MASKS.get(key)
    held = None if ref is None else ref()
    if held is None:
        _MASKS[key] = weakref.ref(words, partial(_forget, key))
        return words
    return held if same_words(held, words) else words


def _forget(key: int, ref: weakref.ref) -> None:
    """Drop a freed mask's entry (unless another array took the key since); runs where the array
    is freed."""
    if _MASKS.get(key) is ref:
        _MASKS.pop(key, None)


_EOS_WORDS: BoundedCache[tuple[str, int], np.ndarray] = BoundedCache(max_entries=8)
"""The end-of-sequence mask words of the vocabularies compiled for lately, by fingerprint: one
array per vocabulary, made once (every compiled grammar of a vocabulary adds them to its masks)."""


def _eos_words(vocabulary: Vocabulary, n_words: int) -> np.ndarray:
    key = (vocabulary.fingerprint, n_words)
    words = _EOS_WORDS.get(key)
    if words is MISSING:
        words = _EOS_WORDS.put(key, _shared(_words_of(vocabulary.eos_ids, n_words)))
    return words


def _mask_bytes(_state: ParseState, words: np.ndarray) -> int:
    """A mask's full size, although equal masks share one array: the cache's byte bound is
    then an upper bound on what its masks hold."""
    return words.nbytes + 2 * OBJECT_BYTES


def _top_key(head: Frame, frames: int, accepting: bool) -> tuple[tuple[int, ...], bool, bool]:
    """The automaton states of the top ``frames`` frames of a stack, whether more lie below
    them, and whether the state accepts: what a sweep of the stack cut there reads."""
    states = []
    for _ in range(frames):
        if head is None:
            break
        states.append(head.state)
        head = head.parent
    return tuple(states), head is not None, accepting


def _top_bytes(_key: tuple[tuple[int, ...], bool, bool], words: np.ndarray | None) -> int:
    """A top mask counted in full (see _mask_bytes)."""
    return 2 * OBJECT_BYTES if words is None else _mask_bytes(None, words)


def _tokens_bytes(key: tuple[ParseState, bytes], tokens: list[int] | None) -> int:
    return 2 * OBJECT_BYTES + len(key[1]) + (0 if tokens is None else (POINTER_BYTES + 32) * len(tokens))


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


_COMPILED: WeakValueDictionary[tuple[int, str], CompiledGrammar] = WeakValueDictionary()
"""Compiled grammars in use, by (grammar id, vocabulary fingerprint). Held weakly: an entry
lives as long as someone holds its compiled grammar, which holds its grammar, so the id in
the key cannot be reused meanwhile; nothing here keeps a grammar alive."""
_COMPILED_LOCK = threading.Lock()


def compile(grammar: Grammar | StructuralTag, tokenizer_or_vocabulary) -> CompiledGrammar:
    """Bind ``grammar`` (or a structural tag's grammar) to a tokenizer (or
    :class:`~structspec.Vocabulary`). While a compiled grammar is in use, compiling the same pair
    again returns it (with the masks it has computed); once nothing holds it, it is freed."""
    if isinstance(grammar, StructuralTag):
        grammar = grammar.grammar
    vocabulary = (
        tokenizer_or_vocabulary
        if isinstance(tokenizer_or_vocabulary, Vocabulary)
        else Vocabulary.from_tokenizer(tokenizer_or_vocabulary)
    )
    key = (id(grammar), vocabulary.fingerprint)
    with _COMPILED_LOCK:
        compiled = _COMPILED.get(key)
        if compiled is None or compiled.grammar is not grammar:
            compiled = _COMPILED[key] = CompiledGrammar(grammar, vocabulary)
    return compiled
