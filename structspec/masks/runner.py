"""Run a whole vocabulary at once through the grammar's pushdown automaton, from a lone frame.

The token-mask hot path asks, for an automaton state ``q``, which tokens are consumed while the
stack never pops below ``q``'s frame, and below which token-trie nodes ``q``'s rule may end with
bytes left. :class:`StackRunner` hands both questions to the native core
(:mod:`structspec.masks._sweep`): a lazily determinized pushdown over *run states* (parse
states rooted at a lone frame), swept depth first over the token trie with the GIL released.
This module lays the rule set and the trie out as the flat arrays that core reads, serializes
calls per runner, and turns the core's error codes into :class:`~structspec.errors.GrammarError`.
"""

from __future__ import annotations

import threading

import numpy as np

from structspec.errors import GrammarError
from structspec.grammar.parse_state import MAX_STACKS, StackLimitError
from structspec.grammar.ruleset import RuleSet
from structspec.grammar.utf8 import utf8_sequences
from structspec.tokens.trie import TokenTrie

try:
    from structspec.masks._sweep import Pushdown
except ImportError as exc:  # a source checkout that was never built
    raise ImportError("structspec's native mask core (structspec/masks/_sweep.pyx) is not built: install the "
                      "package with pip (pip install -e .) or run `python setup.py build_ext --inplace`") from exc

PROBE_AT = 256  # expansions of a run state after which its loop set is probed
MAX_FRAMES = 1 << 22  # interned stack frames per runner (E108 beyond)
MAX_RUN_STATES = 1 << 19  # run states per runner (E108 beyond)
ERR_STACKS, ERR_SIZE = -3, -4  # the core's error codes
ROOT = np.zeros(1, np.int32)  # the trie root: a sweep of the whole vocabulary


class StackRunner:
    """A lazily built DFA over lone-frame parse states for one rule set and one token trie."""

    def __init__(self, rules: RuleSet, trie: TokenTrie, row_ids: np.ndarray, n_words: int) -> None:
        self.n_words = n_words
        self._lock = threading.Lock()
        self._native = Pushdown(*_rule_arrays(rules), *_trie_arrays(trie), np.ascontiguousarray(row_ids, np.int32),
                                MAX_FRAMES, MAX_RUN_STATES, MAX_STACKS, PROBE_AT)

    @property
    def nbytes(self) -> int:
        """Bytes of the tables filled so far."""
        return self._native.nbytes

    def start(self, q: int) -> int:
        """The run state of a lone frame topped by automaton state ``q``."""
        with self._lock:
            return _checked(self._native.start(q))

    def run(self, start: int, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Run the tokens below the trie ``nodes`` (their prefixes already consumed) from run
        state ``start``.

        Returns the packed mask words of the tokens consumed to their end without popping the
        start frame, and the sorted nodes after which the start frame's rule may end while the
        tokens below have bytes left (never a start node itself: an end there is the caller's
        own closure)."""
        words = np.zeros(self.n_words, np.uint32)
        with self._lock:
            code, pending = self._native.run(start, np.ascontiguousarray(nodes, np.int32), words)
        _checked(code)
        return words, pending


def _checked(code: int) -> int:
    if code == ERR_STACKS:
        raise StackLimitError(MAX_STACKS + 1)
    if code == ERR_SIZE:
        raise GrammarError("E108", f"the grammar's token-mask tables outgrew their limits ({MAX_FRAMES} stack "
                                   f"frames, {MAX_RUN_STATES} run states)")
    return code


def _rule_arrays(rules: RuleSet) -> tuple[np.ndarray, ...]:
    """The rule set as the core reads it: the class table, byte classes, rule calls as
    offsets into (start, return) arrays, the final/movable/sink flags, and the byte classes
    of every position of the UTF-8 multi-byte sequences (for loop probes)."""
    class_table = np.ascontiguousarray(rules.class_table, np.int32)
    n_states = class_table.shape[0]
    if class_table.size and not (class_table.min() >= -1 and class_table.max() < n_states):
        raise GrammarError("E108", "the class table names automaton states that do not exist")
    byte_class = np.ascontiguousarray(rules.byte_class, np.int32)
    if len(byte_class) != 256 or byte_class.min() < 0 or byte_class.max() >= max(class_table.shape[1], 1):
        raise GrammarError("E108", "the byte classes do not fit the class table")
    counts = np.fromiter(map(len, rules.refs), np.int32, len(rules.refs))
    ref_off = np.zeros(n_states + 1, np.int32)
    np.cumsum(counts, out=ref_off[1:])
    pairs = np.array([pair for refs in rules.refs for pair in refs], np.int32).reshape(-1, 2)
    if pairs.size and not (pairs.min() >= 0 and pairs.max() < n_states):
        raise GrammarError("E108", "a rule call names automaton states that do not exist")
    flags = [np.ascontiguousarray(np.array(flag, bool).view(np.uint8)) for flag in (rules.final, rules.movable,
                                                                                   rules.sink)]
    sequences = [[np.unique(byte_class[lo: hi + 1]) for lo, hi in seq]
                 for seq in utf8_sequences(((0x80, 0x10FFFF),))]
    positions = [classes for seq in sequences for classes in seq]
    multi_seq = np.cumsum([0, *map(len, sequences)], dtype=np.int32)
    multi_pos = np.cumsum([0, *map(len, positions)], dtype=np.int32)
    multi_cls = np.concatenate(positions).astype(np.int32)
    return (class_table, byte_class, ref_off, np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1]),
            *flags, multi_seq, multi_pos, multi_cls)


def _trie_arrays(trie: TokenTrie) -> tuple[np.ndarray, ...]:
    return (trie.byte, trie.child_lo, trie.child_hi, trie.row_lo, trie.end_hi, trie.row_hi,
            np.ascontiguousarray(trie.rest_sets))
