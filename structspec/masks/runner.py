"""Run a whole vocabulary at once through the grammar's pushdown automaton.

The token-mask hot path asks which text tokens a parse state consumes. :class:`StackRunner`
hands that question to the native core (:mod:`structspec.masks._sweep`): a lazily determinized
pushdown over *run states* (parse states numbered on first sight), swept depth first over the
token trie with the GIL released.
This module lays the rule set and the trie out as the flat arrays that core reads, serializes
calls per runner, and turns the core's error codes into :class:`~structspec.errors.GrammarError`.
The core's tables are scratch space made by a runner's first mask: a runner that computed none
of the process's last ``IDLE_MASKS`` masks gives them back (docs/masks.md, *Memory per grammar,
third pass*).
"""

from __future__ import annotations

import itertools
import threading
import weakref

import numpy as np

from structspec.errors import GrammarError
from structspec.grammar.parse_state import MAX_STACKS, ParseState, StackLimitError
from structspec.grammar.ruleset import RuleSet, no_move
from structspec.grammar.utf8 import utf8_sequences
from structspec.tokens.trie import LoopSplit, TokenTrie, loop_split
from structspec.tokens.vocabulary import Vocabulary

try:
    from structspec.masks._sweep import Pushdown, Split, call_arrays
    from structspec.masks._sweep import same_words as same_words  # for the mask cache (masks.compiled)
    from structspec.masks._sweep import words_digest as words_digest
except ImportError as exc:  # a source checkout that was never built
    raise ImportError("structspec's native mask core (structspec/masks/_sweep.pyx) is not built: install the "
                      "package with pip (pip install -e .) or run `python setup.py build_ext --inplace`") from exc

PROBE_AT = 256  # expansions of a run state after which its loop set is probed
CHAINS_AFTER = 8  # expansions of a run state after which its counted chain is tried
CHAIN_HEIGHT = 32  # subtrees taller than this are expanded rather than checked along a chain
SPLIT_BITS = 64  # loop bits (of 128) of a state's uniform step from which its sweep reads a loop split
SPLIT_STEPS = 16  # loop units a split reads before a rest (see structspec.tokens.trie.LoopSplit)
TABLE_BYTES = 8 << 20  # filled tables per runner past which they are freed before the next mask (docs/masks.md)
MAX_FRAMES = 1 << 22  # interned stack frames within one mask (E108 beyond)
MAX_RUN_STATES = 1 << 19  # run states within one mask (E108 beyond)
ERR_STACKS, ERR_SIZE, ESCAPE = -3, -4, -5  # the core's error codes, and a cut sweep's stop
IDLE_MASKS = 512  # masks computed process-wide (by any runner) after which an unused runner's tables are freed
IDLE_CHECK = 64  # how often (in such masks) idle runners are looked for

_CLOCK = itertools.count(1)  # masks computed by every runner of the process (atomic under the GIL)
_RUNNERS: weakref.WeakSet[StackRunner] = weakref.WeakSet()  # runners that hold tables
_RUNNERS_LOCK = threading.Lock()
# each loop split the vocabulary's cache holds, as the native core reads it: one per split, shared by every grammar
_NATIVE_SPLITS: weakref.WeakKeyDictionary[LoopSplit, Split] = weakref.WeakKeyDictionary()


class StackRunner:
    """A lazily built DFA over parse states for one rule set and one token trie."""

    def __init__(self, rules: RuleSet, vocab: Vocabulary, trie: TokenTrie, n_words: int) -> None:
        self.n_words = n_words
        self._lock = threading.Lock()
        self._used = 0  # the process-wide mask count at this runner's last mask
        steps = SPLIT_STEPS

        def split_of(loops: bytes, utf8: bool) -> Split | None:
            split = loop_split(vocab, loops, utf8, steps)
            if split is None:
                return None
            native = _NATIVE_SPLITS.get(split)
            if native is None:
                native = _NATIVE_SPLITS[split] = Split(*_split_arrays(split))
            return native

        try:
            self._native = Pushdown(*_rule_arrays(rules), *_trie_arrays(trie),
                                    np.ascontiguousarray(vocab.text_ids, np.int32), MAX_FRAMES, MAX_RUN_STATES,
                                    MAX_STACKS, PROBE_AT, CHAINS_AFTER, CHAIN_HEIGHT, split_of, SPLIT_BITS, steps)
        except ValueError as exc:  # the token trie's arrays do not fit together
            raise GrammarError("E108", str(exc)) from exc

    @property
    def nbytes(self) -> int:
        """Bytes of the tables allocated so far."""
        return self._native.nbytes

    def mask(self, state: ParseState, frames: int = 0) -> np.ndarray | None:
        """Packed uint32 mask words of the text tokens whose bytes ``state`` consumes. With
        ``frames`` > 0, from the top ``frames`` frames of each stack only: the mask of every
        state that agrees with ``state`` there, or None where some token reaches below them."""
        words = np.zeros(self.n_words, np.uint32)
        with self._lock:
            code = self._native.mask(state.heads, state.accepting, words, TABLE_BYTES, frames)
        now = self._used = next(_CLOCK)
        if now % IDLE_CHECK == 0 or self not in _RUNNERS:
            _release_idle(self, now)
        return None if _checked(code) == ESCAPE else words

    def release(self) -> bool:
        """Free the tables unless a mask is being computed (then False): they are a scratch
        space that the next mask builds again."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._native.release()
        finally:
            self._lock.release()
        return True


def _release_idle(current: StackRunner, now: int) -> None:
    """Free the tables of every runner that computed no mask in the last IDLE_MASKS masks of
    the process: a grammar no sequence has needed a new mask of lately gives its scratch
    tables back (its mask cache stays), while the grammars in use keep theirs."""
    with _RUNNERS_LOCK:
        _RUNNERS.add(current)
        idle = [runner for runner in _RUNNERS if runner._used <= now - IDLE_MASKS]
    for runner in idle:
        if runner.release():
            with _RUNNERS_LOCK:
                _RUNNERS.discard(runner)


def _checked(code: int) -> int:
    if code == ERR_STACKS:
        raise StackLimitError(MAX_STACKS + 1)
    if code == ERR_SIZE:
        raise GrammarError("E108", f"the grammar's token-mask tables outgrew their limits ({MAX_FRAMES} stack "
                                   f"frames, {MAX_RUN_STATES} run states)")
    return code


def _rule_arrays(rules: RuleSet) -> tuple[np.ndarray, ...]:
    """The rule set as the core reads it: the shared move rows (int16 or int32) and each state's row, byte
    classes, rule calls as offsets into (start, return) arrays, the final/movable/sink/plain
    flags, and the byte classes of every position of the UTF-8 multi-byte sequences (for loop
    probes)."""
    move_rows = rules.move_rows
    if move_rows.dtype not in (np.int16, np.int32) or move_rows.ndim != 2:
        raise GrammarError("E108", "the move rows must be an int16 or int32 table")
    move_rows = np.ascontiguousarray(move_rows)
    move_row = np.ascontiguousarray(rules.move_row, np.int32)
    n_states, n_classes = len(move_row), move_rows.shape[1]
    if n_states != rules.n_states or (n_states and not (move_row.min() >= 0 and move_row.max() < len(move_rows))):
        raise GrammarError("E108", "the move rows do not fit the automaton states")
    if move_rows.size and n_states:
        moves = np.where(move_rows != no_move(move_rows), move_rows, 0).astype(np.int64)
        states = np.arange(n_states, dtype=np.int64)
        lowest, highest = moves.min(axis=1)[move_row], moves.max(axis=1)[move_row]
        if not ((states + lowest >= 0).all() and (states + highest < n_states).all()):
            raise GrammarError("E108", "the move rows name automaton states that do not exist")
    byte_class = np.ascontiguousarray(rules.byte_class, np.int32)
    if len(byte_class) != 256 or byte_class.min() < 0 or byte_class.max() >= max(n_classes, 1):
        raise GrammarError("E108", "the byte classes do not fit the move rows")
    try:
        ref_off, ref_start, ref_ret = call_arrays(tuple(rules.refs))
    except (TypeError, ValueError, OverflowError) as exc:
        raise GrammarError("E108", f"the rule calls do not fit the automaton states: {exc}") from None
    if len(ref_off) != n_states + 1:
        raise GrammarError("E108", "the rule calls do not fit the automaton states")
    flags = [np.frombuffer(flag, np.uint8) for flag in (rules.final, rules.movable, rules.sink, rules.plain)]
    if any(len(flag) != n_states or flag.max(initial=0) > 1 for flag in flags):
        raise GrammarError("E108", "the state flags do not fit the automaton states")
    # the classes of each position of the UTF-8 multi-byte sequences, in increasing order (one boolean
    # table [position, class] read row by row)
    present = np.zeros((_MULTI_POSITIONS, n_classes), bool)
    present[_MULTI_ROW, byte_class[_MULTI_BYTE]] = True
    position, multi_cls = np.nonzero(present)
    multi_pos = np.searchsorted(position, np.arange(_MULTI_POSITIONS + 1)).astype(np.int32)
    return (move_rows, move_row, byte_class, ref_off, ref_start, ref_ret, *flags, _MULTI_SEQ, multi_pos,
            multi_cls.astype(np.int32))


def _multi_byte_positions() -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """The positions of the UTF-8 multi-byte sequences, whatever the grammar: the offsets of each
    sequence's positions, their number, and each of their bytes with its position."""
    sequences = utf8_sequences(((0x80, 0x10FFFF),))
    ranges = [(lo, hi) for seq in sequences for lo, hi in seq]
    seq_off = np.cumsum([0, *map(len, sequences)], dtype=np.int32)
    rows = np.concatenate([np.full(hi + 1 - lo, r) for r, (lo, hi) in enumerate(ranges)])
    byte = np.concatenate([np.arange(lo, hi + 1) for lo, hi in ranges])
    return seq_off, len(ranges), rows, byte


_MULTI_SEQ, _MULTI_POSITIONS, _MULTI_ROW, _MULTI_BYTE = _multi_byte_positions()


def _trie_arrays(trie: TokenTrie) -> tuple[np.ndarray, ...]:
    return trie.nodes, trie.byte, trie.below_words


def _split_arrays(split: LoopSplit) -> tuple[np.ndarray | int, ...]:
    r = split.rests
    return split.unit_words, r.nodes, r.byte, r.below_words, split.rest_ids, split.steps
