"""The suffix automaton of a text: the smallest deterministic automaton of its substrings.

A state stands for the substrings that end at the same positions of the text; the automaton
has at most ``2n - 1`` states and ``3n - 4`` moves for a text of ``n`` characters and is built
online, one character at a time, in linear time (Blumer et al., 1985). Every state accepts
(every prefix of a substring is a substring), and there are no cycles: a move leads to a state
whose longest string is longer.
"""

from __future__ import annotations


class SuffixAutomaton:
    """The suffix automaton of ``text``; state 0 is the empty string.

    ``moves[q]`` maps a character to the next state; ``length[q]`` is the length of the
    longest string of ``q`` and ``link[q]`` its suffix link (``-1`` for state 0). Never
    modified after construction.
    """

    __slots__ = ("length", "link", "moves", "text")

    def __init__(self, text: str) -> None:
        moves: list[dict[str, int]] = [{}]
        length = [0]
        link = [-1]
        add_moves, add_length, add_link = moves.append, length.append, link.append
        last = 0
        for char in text:
            current = len(length)
            add_moves({})
            add_length(length[last] + 1)
            add_link(0)
            p = last
            while p != -1:
                out = moves[p]
                if char in out:
                    break
                out[char] = current
                p = link[p]
            if p != -1:
                q = moves[p][char]
                if length[p] + 1 == length[q]:
                    link[current] = q
                else:
                    clone = len(length)
                    add_moves(moves[q].copy())
                    add_length(length[p] + 1)
                    add_link(link[q])
                    while p != -1:
                        out = moves[p]
                        if out.get(char) != q:
                            break
                        out[char] = clone
                        p = link[p]
                    link[q] = link[current] = clone
            last = current
        self.moves = moves
        self.length = length
        self.link = link
        self.text = text

    @property
    def n_states(self) -> int:
        return len(self.moves)

    def accepts(self, text: str) -> bool:
        """Whether ``text`` is a substring of the automaton's text."""
        q = 0
        for char in text:
            nxt = self.moves[q].get(char)
            if nxt is None:
                return False
            q = nxt
        return True
