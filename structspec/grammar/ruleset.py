"""The compiled, immutable rule set shared by every parse state of a grammar.

Layout (decided once; states and masks index into it, so changing it is a breaking change):

* Every rule reachable from the root is compiled to a deterministic automaton over bytes.
  Small non-recursive rules are inlined into their callers first, so most grammars end up
  with a handful of automata; recursion stays as rule references.
* All automata share one global numbering of *states* ``0..n_states-1``. Per state:
  its byte moves (read off the move rows below, see :class:`ByteMoves`), ``refs[q]`` (tuple
  of ``(rule start state, return state - q)`` pairs: push the rule, continue at the return
  state once it finishes; relative, so the inlined copies of a rule share their tuples),
  ``token_edges[q]`` (tuple of ``(token ref index, state)``) and ``final[q]`` (the rule may end
  here). Derived flags: ``movable[q]`` (a stack topped by ``q`` can
  consume a byte or a token), ``sink[q]`` (final with no moves at all: returning into it just
  pops, so it is never pushed — tail calls keep right-recursive stacks flat) and ``plain[q]``
  (only byte moves: advancing into it needs no closure work). Flags are ``bytes``, one per
  state (0 or 1): read as fast as a tuple, an eighth of its size.
* ``byte_class`` (256 entries) groups bytes that no transition tells apart. The moves per
  class are kept relative to the state and shared between states: ``move_rows[move_row[q], c]``
  is ``target - q`` (:func:`no_move`: none), int16 where every move fits, else int32. The
  inlined copies of a rule (``string`` under every property) move alike up to their offset, so
  a schema grammar has a few thousand rows for tens of thousands of states.
  :meth:`RuleSet.class_table` expands them into the dense ``[state, class]`` table (-1 = no
  move) for vectorized code.

Nothing here is mutated after construction; parse states only hold state numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from weakref import WeakValueDictionary

import numpy as np

from structspec.ir._byte_automata import rule_move_rows
from structspec.ir.expr import TokenRef

NARROW_REACH = np.iinfo(np.int16).max
"""Move rows are int16 when every move stays within this many states of its source."""
SEVERAL_BYTES, NO_BYTE = -1, -2
"""``ByteMoves.only`` entries for a row that moves on several bytes, on none."""


def no_move(rows: np.ndarray) -> int:
    """The ``move_rows`` entry for no move on a class: the least value of their dtype."""
    return int(np.iinfo(rows.dtype).min)


class ByteMoves:
    """The byte moves of every state, read straight off the shared move rows: nothing is
    built or kept per state. The byte-by-byte advance reads ``rows[row_of[q], class_of[b]]``
    (``target - q``, or ``no_move``) inline: memoryviews index to plain ints without numpy's
    per-call cost."""

    __slots__ = ("_byte_class", "_move_rows", "class_of", "no_move", "only", "row_of", "rows")

    def __init__(self, byte_class: np.ndarray, move_rows: np.ndarray, move_row: np.ndarray) -> None:
        self._byte_class = byte_class
        self._move_rows = move_rows
        self.rows = memoryview(np.ascontiguousarray(move_rows))
        self.no_move = no_move(move_rows)
        self.row_of = memoryview(np.ascontiguousarray(move_row, dtype=np.int32))
        self.class_of = bytes(byte_class.astype(np.uint8))  # at most 256 classes
        # only[row]: the one byte a state of that row moves on; SEVERAL_BYTES or NO_BYTE (forced bytes)
        moving = move_rows != self.no_move
        counts = moving.astype(np.int64) @ np.bincount(byte_class, minlength=move_rows.shape[1])
        lowest = np.full(move_rows.shape[1], 256, dtype=np.int64)
        np.minimum.at(lowest, byte_class, np.arange(256))
        only = np.full(len(move_rows), SEVERAL_BYTES, dtype=np.int16)
        only[counts == 0] = NO_BYTE
        one = counts == 1
        only[one] = lowest[moving[one].argmax(axis=1)]
        self.only = memoryview(only)

    def of(self, q: int) -> dict[int, int]:
        """State ``q``'s moves, byte -> next state (built anew on each call)."""
        relative = self._move_rows[self.row_of[q]]
        where = np.flatnonzero(relative[self._byte_class] != self.no_move)
        targets = (relative.astype(np.int64) + q)[self._byte_class[where]]
        return dict(zip(where.tolist(), targets.tolist(), strict=True))


def shared_move_rows(tables: list[np.ndarray], columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(move_rows, move_row)`` of the grammar laid out from its rules' move tables
    (``tables[r]``: local targets by local class, -1 = no move; the rules' states numbered one
    after the other), ``columns[r, k]`` rule ``r``'s local class for the grammar's class ``k``:
    each distinct row of moves relative to its state once, in the order of its bytes (int16 when
    every move stays within ``NARROW_REACH`` states, else int32; :func:`no_move` for none), and
    each state's row. A dense class table is one rule whose columns are its classes."""
    return rule_move_rows(tables, np.ascontiguousarray(columns, dtype=np.int32), NARROW_REACH)


@dataclass(frozen=True, eq=False)
class RuleSet:
    rule_names: tuple[str, ...]
    rule_start: tuple[int, ...]
    root_start: int
    refs: tuple[tuple[tuple[int, int], ...], ...]
    token_edges: tuple[tuple[tuple[int, int], ...], ...]
    final: bytes
    token_refs: tuple[TokenRef, ...]
    byte_class: np.ndarray
    move_rows: np.ndarray
    move_row: np.ndarray
    movable: bytes
    sink: bytes
    plain: bytes
    #: Intern table of stack frames (see ``parse_state.frame``); the only mutable part, a cache.
    frames: WeakValueDictionary = field(default_factory=WeakValueDictionary, repr=False)

    @cached_property
    def byte_moves(self) -> ByteMoves:
        """The byte moves as :class:`ByteMoves` reads them, derived from the three arrays above
        on first use (the first mask reads the native core's copy, not this: a grammar's time to
        first mask does not pay for it)."""
        return ByteMoves(self.byte_class, self.move_rows, self.move_row)

    @property
    def n_states(self) -> int:
        return len(self.final)

    @property
    def n_classes(self) -> int:
        return self.move_rows.shape[1]

    def class_table(self, classes: np.ndarray | None = None) -> np.ndarray:
        """The dense move table, int32 ``[state, class]`` (-1 = no move), for the byte classes
        ``classes`` (all by default); built anew on each call."""
        rows = self.move_rows if classes is None else self.move_rows[:, classes]
        table = rows[self.move_row].astype(np.int32)
        moved = table != no_move(self.move_rows)
        table += np.arange(self.n_states, dtype=np.int32)[:, None] * moved
        table[~moved] = -1
        return table

    def __reduce__(self) -> tuple:
        """Pickled without its derived views (``byte_moves``) and cache (interned frames)."""
        parts = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "frames"}
        return (_unpickle, (parts,))


def _unpickle(parts: dict) -> RuleSet:
    return RuleSet(**parts)
