"""The compiled, immutable rule set shared by every parse state of a grammar.

Layout (decided once; states and masks index into it, so changing it is a breaking change):

* Every rule reachable from the root is compiled to a deterministic automaton over bytes.
  Small non-recursive rules are inlined into their callers first, so most grammars end up
  with a handful of automata; recursion stays as rule references.
* All automata share one global numbering of *states* ``0..n_states-1``. Per state:
  ``byte_next[q]`` (dict byte -> state, built on first use from ``class_table``: a large
  grammar has thousands of states and a generation visits few of them), ``refs[q]`` (tuple
  of ``(rule start state, return state)`` pairs: push the rule, continue at the return state
  once it finishes),
  ``token_edges[q]`` (tuple of ``(token ref index, state)``), ``final[q]`` (the rule may end
  here) and ``rule_of[q]``. Derived flags: ``movable[q]`` (a stack topped by ``q`` can
  consume a byte or a token), ``sink[q]`` (final with no moves at all: returning into it just
  pops, so it is never pushed — tail calls keep right-recursive stacks flat) and ``plain[q]``
  (only byte moves: advancing into it needs no closure work).
* ``byte_class`` (256 entries) groups bytes that no transition tells apart, and
  ``class_table[q, c]`` (int32, ``-1`` = no move) is the dense form of ``byte_next`` used by
  vectorized token-mask code.

Nothing here is mutated after construction; parse states only hold state numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from weakref import WeakValueDictionary

import numpy as np

from structspec.ir.expr import TokenRef


class ByteMoves(dict[int, dict[int, int]]):
    """``byte_next``: state -> (byte -> next state), read off the dense class table the first
    time a state is asked for and kept. A dict subclass so that every later lookup stays a
    plain dict lookup on the byte-by-byte hot path (under threads, two first lookups of a
    state both compute the same dict)."""

    def __init__(self, byte_class: np.ndarray, class_table: np.ndarray) -> None:
        super().__init__()
        self._byte_class = byte_class
        self._table = class_table

    def __missing__(self, q: int) -> dict[int, int]:
        moves = self._table[q][self._byte_class]
        where = np.flatnonzero(moves >= 0)
        row = self[q] = dict(zip(where.tolist(), moves[where].tolist(), strict=True))
        return row


@dataclass(frozen=True, eq=False)
class RuleSet:
    rule_names: tuple[str, ...]
    rule_start: tuple[int, ...]
    root_start: int
    byte_next: ByteMoves
    refs: tuple[tuple[tuple[int, int], ...], ...]
    token_edges: tuple[tuple[tuple[int, int], ...], ...]
    final: tuple[bool, ...]
    rule_of: tuple[int, ...]
    token_refs: tuple[TokenRef, ...]
    byte_class: np.ndarray
    class_table: np.ndarray
    movable: tuple[bool, ...]
    sink: tuple[bool, ...]
    plain: tuple[bool, ...]
    #: Intern table of stack frames (see ``parse_state.frame``); the only mutable part, a cache.
    frames: WeakValueDictionary = field(default_factory=WeakValueDictionary, repr=False)

    @property
    def n_states(self) -> int:
        return len(self.final)

    def __reduce__(self) -> tuple:
        """Pickled without its caches (``byte_next`` rows, interned frames), which refill on use."""
        parts = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("byte_next", "frames")}
        return (_unpickle, (parts,))


def _unpickle(parts: dict) -> RuleSet:
    return RuleSet(byte_next=ByteMoves(parts["byte_class"], parts["class_table"]), **parts)
