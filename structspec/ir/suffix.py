"""The suffix automaton of a text: the smallest deterministic automaton of its substrings.

A state stands for the substrings that end at the same positions of the text; the automaton
has at most ``2n - 1`` states and ``3n - 4`` moves for a text of ``n`` characters and is built
online, one character at a time, in linear time (Blumer et al., 1985), in C over flat arrays
(``_suffix.pyx``: about 40 ns a character). Every state accepts (every prefix of a substring
is a substring), and there are no cycles: a move leads to a state whose longest string is
longer.
"""

from __future__ import annotations

import numpy as np

from structspec.ir._suffix import build


def code_points(text: str) -> np.ndarray:
    """The characters of ``text`` as uint32 code points (lone surrogates included)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


class SuffixAutomaton:
    """The suffix automaton of ``text``; state 0 is the empty string.

    State ``q`` moves on the code points ``code[start[q]:start[q + 1]]`` to the states
    ``dst[start[q]:start[q + 1]]``; ``length[q]`` is the length of its longest string and
    ``link[q]`` its suffix link (``-1`` for state 0). Arrays, never modified.
    """

    __slots__ = ("code", "dst", "length", "link", "start", "text")

    def __init__(self, text: str) -> None:
        self.length, self.link, self.start, self.code, self.dst = build(code_points(text))
        self.text = text
        for array in (self.length, self.link, self.start, self.code, self.dst):
            array.flags.writeable = False

    @property
    def n_states(self) -> int:
        return len(self.length)

    @property
    def n_moves(self) -> int:
        return len(self.code)

    def accepts(self, text: str) -> bool:
        """Whether ``text`` is a substring of the automaton's text."""
        q = 0
        for code in code_points(text).tolist():
            lo, hi = int(self.start[q]), int(self.start[q + 1])
            found = np.flatnonzero(self.code[lo:hi] == code)
            if not len(found):
                return False
            q = int(self.dst[lo + found[0]])
        return True
