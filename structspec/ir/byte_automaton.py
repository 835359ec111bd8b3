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
    """A deterministic automaton over bytes as its list of moves: state 0 starts, ``src[i]
    --byte[i]--> dst[i]`` (sorted by state, then byte; one move per state and byte), ``final[q]``
    whether the rule may end in ``q``. ``description`` says in words what it accepts. Built by
    :meth:`from_moves`; never modified. The compiler writes the moves straight into its rule
    set's table, so a big automaton costs its moves, not states times bytes."""

    src: np.ndarray  # int32 [moves]
    byte: np.ndarray  # uint8 [moves]
    dst: np.ndarray  # int32 [moves]
    final: np.ndarray  # bool [n_states]
    description: str

    @staticmethod
    def from_moves(src: np.ndarray, byte: np.ndarray, dst: np.ndarray, final: np.ndarray,
                   description: str) -> ByteAutomaton:
        """The automaton with moves ``src[i] --byte[i]--> dst[i]`` (repeated moves are fine;
        two different targets for one state and byte are an error, and so are states that do
        not exist)."""
        final = np.asarray(final, dtype=bool)
        src, byte, dst = (np.asarray(a, dtype=np.int64) for a in (src, byte, dst))
        n = len(final)
        if len(src) and not (src.min() >= 0 and src.max() < n and dst.min() >= 0 and dst.max() < n
                             and byte.min() >= 0 and byte.max() < 256):
            raise ValueError("a move names a state that does not exist or a value that is not a byte")
        key = (src << 8) | byte
        order = np.argsort(key, kind="stable")
        key, dst = key[order], dst[order]
        again = key[1:] == key[:-1]
        if (dst[1:][again] != dst[:-1][again]).any():
            raise ValueError("the moves are not deterministic")
        keep = np.concatenate((np.ones(min(len(key), 1), dtype=bool), ~again))
        key, dst = key[keep], dst[keep]
        return ByteAutomaton((key >> 8).astype(np.int32), (key & 0xFF).astype(np.uint8), dst.astype(np.int32),
                             final, description)

    @property
    def n_states(self) -> int:
        return len(self.final)

    def accepts(self, data: bytes) -> bool:
        """Whether the automaton accepts exactly ``data``."""
        keys = (self.src.astype(np.int64) << 8) | self.byte
        q = 0
        for b in data:
            i = int(np.searchsorted(keys, (q << 8) | b))
            if i == len(keys) or keys[i] != (q << 8) | b:
                return False
            q = int(self.dst[i])
        return bool(self.final[q])

    def comment(self, name: str) -> str:
        """The GBNF comment line that stands for rule ``name`` given as this automaton."""
        return (f"# {name} ::= (given as a deterministic byte automaton of {self.n_states:,} states, "
                f"not as GBNF: {self.description})\n")
