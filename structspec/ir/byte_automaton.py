"""Deterministic automata over bytes, built outside GBNF and given to the grammar compiler.

Some languages have a small automaton but no small grammar: the spans of a source text are
recognised by its suffix automaton (linear in the text), yet as GBNF they are an alternation
of quadratically many substrings. Such a language is handed to the compiler as a named rule
whose automaton is given (``Grammar.from_gbnf(text, automata={name: automaton})``); GBNF text
refers to it by name like any rule and prints it as a comment (:meth:`ByteAutomaton.comment`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class ByteAutomaton:
    """A deterministic automaton over bytes in the compiler's dense layout: state 0 starts,
    ``table[q, byte_class[b]]`` is the move on byte ``b`` (``-1``: none), ``final[q]`` whether
    the rule may end in ``q``. ``description`` says in words what it accepts. Never modified."""

    byte_class: np.ndarray  # int32 [256]
    table: np.ndarray  # int32 [n_states, n_classes]
    final: np.ndarray  # bool [n_states]
    description: str

    @staticmethod
    def from_moves(src: np.ndarray, byte: np.ndarray, dst: np.ndarray, final: np.ndarray,
                   description: str) -> ByteAutomaton:
        """The automaton with moves ``src[i] --byte[i]--> dst[i]`` (repeated moves are fine;
        two different targets for one state and byte are an error)."""
        used = np.unique(byte)
        byte_class = np.zeros(256, dtype=np.int32)  # class 0: bytes without any move
        byte_class[used] = np.arange(1, len(used) + 1, dtype=np.int32)
        table = np.full((len(final), len(used) + 1), -1, dtype=np.int32)
        column = byte_class[byte]
        table[src, column] = dst
        if not np.array_equal(table[src, column], dst):
            raise ValueError("the moves are not deterministic")
        return ByteAutomaton(byte_class, table, np.asarray(final, dtype=bool), description)

    @property
    def n_states(self) -> int:
        return len(self.final)

    def accepts(self, data: bytes) -> bool:
        """Whether the automaton accepts exactly ``data``."""
        q = 0
        for b in data:
            q = int(self.table[q, self.byte_class[b]])
            if q < 0:
                return False
        return bool(self.final[q])

    def comment(self, name: str) -> str:
        """The GBNF comment line that stands for rule ``name`` given as this automaton."""
        return (f"# {name} ::= (given as a deterministic byte automaton of {self.n_states:,} states, "
                f"not as GBNF: {self.description})\n")
