"""The spans of a source text as automata: over characters, narrowed, then spelled in bytes.

:func:`spans` reads the substrings of a text off its suffix automaton
(:mod:`structspec.ir.suffix`); :func:`intersect` and :func:`restrict_lengths` narrow them
exactly by a character DFA (a ``pattern``) and by length bounds; :func:`spell` turns the
result into a :class:`~structspec.ir.byte_automaton.ByteAutomaton`, each character written as
the bytes a caller chooses (JSON escapes, UTF-8), with intermediate states where a character
takes several bytes. Every automaton here is deterministic and acyclic (a span is never longer
than its text), and past ``limit`` states an operation raises :class:`SpanLimitError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, pairwise

import numpy as np

from structspec.ir.automaton import DFA
from structspec.ir.byte_automaton import ByteAutomaton
from structspec.ir.suffix import SuffixAutomaton, code_points

Spelling = Callable[[str], "tuple[bytes, bytes] | None"]
"""A character's bytes and the other bytes its last byte may be instead (``b""``: none);
``None`` for a character that has no spelling."""

_PREFIX_BITS = 40  # a character's spelling takes at most 6 bytes: its proper prefixes fit in 40 bits
_LEVEL_BITS = 3


class SpanLimitError(ValueError):
    """An automaton of spans would need more than its limit of states."""


@dataclass(frozen=True, eq=False)
class SpanAutomaton:
    """A deterministic, acyclic automaton over characters: state 0 starts, state ``q`` moves on
    the code points ``code[start[q]:start[q + 1]]`` to ``dst[start[q]:start[q + 1]]``, and
    ``accept[q]`` says whether a span may end in ``q``. Every state is reachable and leads to
    acceptance. Arrays, never modified; :attr:`moves` is the same automaton as one dict per
    state, for the narrowings that walk it state by state."""

    start: np.ndarray  # int64 [n_states + 1]
    code: np.ndarray  # uint32 [moves]
    dst: np.ndarray  # int64 [moves]
    accept: np.ndarray  # bool [n_states]

    @staticmethod
    def from_moves(moves: list[dict[str, int]], accept: Sequence[bool]) -> SpanAutomaton:
        """The automaton whose state ``q`` moves as ``moves[q]`` (character to state) says."""
        counts = np.fromiter(map(len, moves), dtype=np.int64, count=len(moves))
        start = np.zeros(len(moves) + 1, dtype=np.int64)
        np.cumsum(counts, out=start[1:])
        chars = "".join(chain.from_iterable(moves))
        found = SpanAutomaton(start, code_points(chars),
                              np.fromiter(chain.from_iterable(map(dict.values, moves)), dtype=np.int64,
                                          count=int(start[-1])),
                              np.array(accept, dtype=bool))
        found.__dict__["moves"] = moves
        return found

    @functools.cached_property
    def moves(self) -> list[dict[str, int]]:
        """``moves[q]`` maps a character to the next state."""
        chars = self.code.tobytes().decode("utf-32-le", "surrogatepass")
        targets = self.dst.tolist()
        bounds = self.start.tolist()
        return [dict(zip(chars[lo:hi], targets[lo:hi], strict=True)) for lo, hi in pairwise(bounds)]

    @property
    def n_states(self) -> int:
        return len(self.accept)

    @property
    def empty(self) -> bool:
        """Whether no span is left (the one state then neither moves nor accepts)."""
        return not self.accept[0] and self.start[1] == self.start[0]

    def accepts(self, text: str) -> bool:
        """Whether ``text`` is one of the spans."""
        q = 0
        for char in text:
            nxt = self.moves[q].get(char)
            if nxt is None:
                return False
            q = nxt
        return bool(self.accept[q])


_NOTHING = SpanAutomaton.from_moves([{}], [False])


def spans(sam: SuffixAutomaton, allowed: Callable[[str], bool]) -> SpanAutomaton:
    """The substrings of ``sam``'s text made only of characters that ``allowed`` accepts (the
    empty string included)."""
    banned = [ord(char) for char in set(sam.text) if not allowed(char)]
    accept = np.ones(sam.n_states, dtype=bool)
    found = SpanAutomaton(sam.start, sam.code, sam.dst.astype(np.int64), accept)
    if not banned:
        return found
    return _trim([{c: t for c, t in out.items() if ord(c) not in banned} for out in found.moves], accept.tolist())


def intersect(spans_of: SpanAutomaton, dfa: DFA, limit: int) -> SpanAutomaton:
    """The spans that ``dfa`` (a pattern over characters) accepts too."""
    if dfa.empty:
        return _NOTHING
    steps: list[dict[str, int]] = [{} for _ in dfa.accept]

    def step(p: int, char: str) -> int:
        found = steps[p].get(char)
        if found is None:
            code = ord(char)
            found = next((t for cs, t in dfa.edges[p] if code in cs), -1)
            steps[p][char] = found
        return found

    index = {(0, 0): 0}
    order = [(0, 0)]
    moves: list[dict[str, int]] = []
    while len(moves) < len(order):
        q, p = order[len(moves)]
        out: dict[str, int] = {}
        for char, t in spans_of.moves[q].items():
            u = step(p, char)
            if u < 0:
                continue
            key = (t, u)
            target = index.get(key)
            if target is None:
                target = index[key] = len(order)
                order.append(key)
                if len(order) > limit:
                    raise SpanLimitError(f"more than {limit:,} automaton states")
            out[char] = target
        moves.append(out)
    accepts = spans_of.accept.tolist()
    accept = [accepts[q] and dfa.accept[p] for q, p in order]
    return _trim(moves, accept)


def restrict_lengths(spans_of: SpanAutomaton, low: int, high: int | None, limit: int) -> SpanAutomaton:
    """The spans of ``low`` to ``high`` characters (``None``: no upper bound).

    A state is paired with the length written so far only while that length still matters:
    once every accepted continuation lands inside the bounds (known from each state's shortest
    and longest accepted continuation), the pair becomes the state alone, and stays so. The
    counted pairs are built a length at a time with numpy (an exact ``maxLength`` over a long
    text can need about one pair per character per allowed length).
    """
    order = _topological(spans_of.moves)
    shortest, longest = (np.array(d, dtype=np.int64) for d in _distances(spans_of, order))
    if shortest[0] < 0:
        return spans_of
    edges = _Edges(spans_of)
    big = np.iinfo(np.int64).max // 4

    def kinds(q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Which of the states ``q``, reached after ``k`` characters, are done counting, and which
        can still end inside the bounds."""
        top = big if high is None else high
        alive = (k + shortest[q] <= top) & (k + longest[q] >= low)
        free = alive & (k + shortest[q] >= low) & (k + longest[q] <= top)
        return free, alive & ~free

    free0, counted0 = kinds(np.zeros(1, dtype=np.int64), 0)
    if not (free0[0] or counted0[0]):
        return _NOTHING
    levels = [np.zeros(1, dtype=np.int64)] if counted0[0] else []  # levels[k]: counted states after k characters
    entries = [np.zeros(1, dtype=np.int64)] if free0[0] else []  # states where counting stops
    steps = []  # per level: (source index in the level, move, target kind: 1 counted / 0 free, target state)
    total = len(levels)
    while levels and len(levels[-1]) and len(steps) < len(levels):
        k = len(steps)
        index, move = edges.of(levels[k])
        target = edges.dst[move]
        free, counted = kinds(target, k + 1)
        keep = free | counted
        steps.append((index[keep], move[keep], counted[keep], target[keep]))
        entries.append(target[free])
        following = np.unique(target[counted])
        if len(following):
            levels.append(following)
            total += len(following)
            if total > limit:
                raise SpanLimitError(f"more than {limit:,} automaton states")
    reach = np.zeros(spans_of.n_states, dtype=bool)
    if entries:
        reach[np.concatenate(entries)] = True
    for q in order:  # every state after a free one is free (the automaton has no cycles)
        if reach[q]:
            for t in spans_of.moves[q].values():
                reach[t] = True
    n_free = int(reach.sum())
    if total + n_free > limit:
        raise SpanLimitError(f"more than {limit:,} automaton states")
    # Counted states first, level by level, then the free ones (when state 0 is free, nothing is counted).
    level_start = np.cumsum([0] + [len(v) for v in levels])
    free_id = np.cumsum(reach) - 1 + total
    moves: list[dict[str, int]] = [{} for _ in range(total + n_free)]
    accept = [False] * (total + n_free)
    accepts = spans_of.accept.tolist()
    for k, states in enumerate(levels):
        base = int(level_start[k])
        fits = k >= low and (high is None or k <= high)
        for i, q in enumerate(states.tolist()):
            accept[base + i] = fits and accepts[q]
        if k < len(steps):
            index, move, counted, target = steps[k]
            ids = np.where(counted, 0, free_id[target])
            if counted.any():
                ids[counted] = level_start[k + 1] + np.searchsorted(levels[k + 1], target[counted])
            for i, m, t in zip((index + base).tolist(), move.tolist(), ids.tolist(), strict=True):
                moves[i][edges.chars[m]] = t
    for q in np.flatnonzero(reach).tolist():
        own = int(free_id[q])
        accept[own] = accepts[q]
        moves[own] = {c: int(free_id[t]) for c, t in spans_of.moves[q].items()}
    # Every state is reachable, and free ones lead to acceptance; a counted one may not, where the
    # accepted lengths have gaps (after a pattern), and then the automaton is trimmed.
    alive = np.array(accept, dtype=bool)
    alive[total:] = True
    for k in reversed(range(len(steps))):
        index, move, counted, target = steps[k]
        ids = np.where(counted, 0, free_id[target])
        if counted.any():
            ids[counted] = level_start[k + 1] + np.searchsorted(levels[k + 1], target[counted])
        np.logical_or.at(alive, index + level_start[k], alive[ids])
    return SpanAutomaton.from_moves(moves, accept) if alive.all() else _trim(moves, accept)


class _Edges:
    """The moves of a span automaton as arrays, grouped by source state."""

    def __init__(self, spans_of: SpanAutomaton) -> None:
        self.counts = np.diff(spans_of.start)
        self.starts = spans_of.start[:-1]
        self.chars = spans_of.code.tobytes().decode("utf-32-le", "surrogatepass")
        self.dst = spans_of.dst

    def of(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For every move out of ``states``: the index of its state in ``states``, and the move."""
        counts = self.counts[states]
        index = np.repeat(np.arange(len(states), dtype=np.int64), counts)
        first = np.repeat(self.starts[states] - (np.cumsum(counts) - counts), counts)
        return index, first + np.arange(int(counts.sum()), dtype=np.int64)


def spell(spans_of: SpanAutomaton, spelling: Spelling, description: str, limit: int) -> ByteAutomaton:
    """The byte automaton of the spans, each character written as ``spelling`` says.

    Characters whose spellings share leading bytes from the same state share the states in
    between (several UTF-8 characters with one lead byte), so the result stays deterministic.
    Vectorized over all moves: a text of tens of thousands of characters spells in milliseconds.
    """
    n = spans_of.n_states
    if n >= 1 << (63 - _PREFIX_BITS - _LEVEL_BITS):
        raise SpanLimitError(f"{n:,} automaton states, more than {limit:,}")
    total = len(spans_of.code)
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(spans_of.start))
    dst = spans_of.dst
    alphabet, symbol = np.unique(spans_of.code, return_inverse=True)
    table = _spelling_table([chr(c) for c in alphabet.tolist()], spelling)
    width = table.width
    length = table.length[symbol]
    levels = [np.flatnonzero(length > k) for k in range(1, width)]  # moves with a byte after their k-th
    keys = [(src[e] << (_PREFIX_BITS + _LEVEL_BITS)) | (k << _PREFIX_BITS) | table.prefix[symbol[e], k]
            for k, e in enumerate(levels, start=1)]
    inner = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
    unique_keys, inverse = np.unique(inner, return_inverse=True)
    n_states = n + len(unique_keys)
    if n_states > limit:
        raise SpanLimitError(f"{n_states:,} automaton states, more than {limit:,}")
    node = np.full((width + 1, total), -1, dtype=np.int64)  # node[k, e]: the state after k bytes of move e
    node[0] = src
    at = 0
    for k, e in enumerate(levels, start=1):
        node[k, e] = n + inverse[at : at + len(e)]
        at += len(e)
    parts_src, parts_byte, parts_dst = [], [], []
    for k in range(width):
        e = np.flatnonzero(length > k)
        last = length[e] == k + 1
        following = np.where(last, dst[e], node[k + 1, e])
        parts_src.append(node[k, e])
        parts_byte.append(table.spelled[symbol[e], k])
        parts_dst.append(following)
        alternative = table.alternative[symbol[e]]
        other = last & (alternative >= 0)
        parts_src.append(node[k, e][other])
        parts_byte.append(alternative[other])
        parts_dst.append(following[other])
    final = np.zeros(n_states, dtype=bool)
    final[:n] = spans_of.accept
    return ByteAutomaton.from_moves(np.concatenate(parts_src), np.concatenate(parts_byte),
                                    np.concatenate(parts_dst), final, description)


@dataclass(frozen=True)
class _SpellingTable:
    spelled: np.ndarray  # [symbol, k]: the k-th byte
    length: np.ndarray  # [symbol]: how many bytes
    alternative: np.ndarray  # [symbol]: another last byte, -1 for none
    prefix: np.ndarray  # [symbol, k]: the first k bytes as an integer
    width: int


def _spelling_table(alphabet: list[str], spelling: Spelling) -> _SpellingTable:
    spelled_all = []
    for char in alphabet:
        found = spelling(char)
        if found is None or not found[0] or len(found[0]) > 6:
            raise ValueError(f"no spelling of one to six bytes for character {char!r}")
        spelled_all.append(found)
    width = max((len(b) for b, _ in spelled_all), default=1)
    size = len(alphabet)
    spelled = np.zeros((size, width), dtype=np.int64)
    length = np.zeros(size, dtype=np.int64)
    alternative = np.full(size, -1, dtype=np.int64)
    prefix = np.zeros((size, width), dtype=np.int64)
    for i, (data, others) in enumerate(spelled_all):
        spelled[i, : len(data)] = list(data)
        length[i] = len(data)
        if others:
            if len(others) != 1:
                raise ValueError(f"at most one other last byte for character {alphabet[i]!r}")
            alternative[i] = others[0]
        for k in range(1, len(data)):
            prefix[i, k] = int.from_bytes(data[:k], "big")
    return _SpellingTable(spelled, length, alternative, prefix, width)


def _distances(a: SpanAutomaton, order: list[int]) -> tuple[list[int], list[int]]:
    """Per state, the shortest and the longest accepted continuation (``-1``: none); ``order``
    is :func:`_topological`'s."""
    n = a.n_states
    shortest = [-1] * n
    longest = [-1] * n
    accept = a.accept.tolist()
    for q in reversed(order):
        low = 0 if accept[q] else -1
        high = low
        for t in a.moves[q].values():
            if shortest[t] >= 0:
                low = shortest[t] + 1 if low < 0 else min(low, shortest[t] + 1)
                high = max(high, longest[t] + 1)
        shortest[q], longest[q] = low, high
    return shortest, longest


def _topological(moves: list[dict[str, int]]) -> list[int]:
    """The states, each before the states it moves to (the automaton has no cycles)."""
    n = len(moves)
    indegree = [0] * n
    for out in moves:
        for t in out.values():
            indegree[t] += 1
    order = [q for q in range(n) if not indegree[q]]
    for q in order:  # grows while it is read
        for t in moves[q].values():
            indegree[t] -= 1
            if not indegree[t]:
                order.append(t)
    if len(order) != n:
        raise ValueError("a span automaton cannot have cycles")
    return order


def _trim(moves: list[dict[str, int]], accept: list[bool]) -> SpanAutomaton:
    """Only the states reachable from state 0 that lead to acceptance, renumbered in order."""
    n = len(moves)
    seen = [False] * n
    seen[0] = True
    reach = [0]
    for q in reach:  # grows while it is read
        for t in moves[q].values():
            if not seen[t]:
                seen[t] = True
                reach.append(t)
    alive = list(accept)
    for q in reversed(_topological(moves)):
        if not alive[q]:
            alive[q] = any(alive[t] for t in moves[q].values())
    if not alive[0]:
        return _NOTHING
    keep = sorted(q for q in reach if alive[q])
    if len(keep) == n:
        return SpanAutomaton.from_moves(moves, accept)
    new = {q: i for i, q in enumerate(keep)}
    return SpanAutomaton.from_moves(
        [{c: new[t] for c, t in moves[q].items() if t in new} for q in keep],
        [accept[q] for q in keep],
    )
