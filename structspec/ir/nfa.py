"""Automata from expressions: the NFA construction and the subset construction, generic over
an alphabet.

The converters' DFAs are built here, over code points (a label is a
:class:`~structspec.ir.charset.CharSet`). An :class:`Alphabet` says how characters become
labels; the rest is alphabet-free: states and epsilon edges, symbol edges (moves of their own),
guarded epsilon edges, the repeat expansion and the size limits; :func:`determinize` is given
how the labelled edges leaving a set of states split into disjoint ones. The grammar compiler's
rule automata over bytes are built the same way in C (:mod:`structspec.ir._byte_automata`),
which its tests check against this construction over a byte alphabet.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import Generic, NamedTuple, Protocol, TypeVar

from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Rep, Seq

Label = TypeVar("Label")
Ranges = tuple[tuple[int, int], ...]


class Alphabet(Protocol[Label]):
    """What edges are labelled with."""

    def literal(self, text: str) -> Sequence[Label]:
        """The labels spelling ``text``, one edge each."""
        ...

    def chars(self, ranges: Ranges) -> Iterable[Sequence[Label]]:
        """Label sequences, one path each, that together match one character of ``ranges``
        (sorted, merged code point ranges)."""
        ...


class NFA(Generic[Label]):
    """An epsilon-NFA under construction; states are numbered from 0 in creation order.

    ``build`` handles characters, concatenation, alternation and repetition; any other leaf
    goes to :meth:`leaf`, which a user overrides (rule calls and token references become
    symbol edges, regex anchors guarded epsilon edges).
    """

    def __init__(self, alphabet: Alphabet[Label], limit: int, too_large: Callable[[], Exception]) -> None:
        self.alphabet = alphabet
        self.limit = limit
        self.too_large = too_large
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[Label, int]]] = []
        self.symbols: dict[int, list[tuple[Hashable, int]]] = {}  # state -> (symbol, target)
        self.guarded: dict[int, list[tuple[Hashable, int]]] = {}  # state -> (guard, target)

    def state(self) -> int:
        """A new state; past ``limit`` states, raises ``too_large()``."""
        if len(self.eps) >= self.limit:
            raise self.too_large()
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def symbol(self, start: int, symbol: Hashable, end: int) -> None:
        """An edge taken by ``symbol`` rather than by a character."""
        self.symbols.setdefault(start, []).append((symbol, end))

    def guarded_epsilon(self, start: int, guard: Hashable, end: int) -> None:
        """An epsilon edge that :meth:`closure` follows only where ``guard`` holds."""
        self.guarded.setdefault(start, []).append((guard, end))

    def build(self, expr: Expr, start: int, end: int) -> None:
        """Add states and edges so that ``expr`` leads from ``start`` to ``end``."""
        if isinstance(expr, Lit):
            self.chain(start, end, self.alphabet.literal(expr.text))
        elif isinstance(expr, (Chars, CharClass)):
            ranges = expr.charset.ranges if isinstance(expr, Chars) else expr.code_points()
            for labels in self.alphabet.chars(ranges):
                self.chain(start, end, labels)
        elif isinstance(expr, Seq):
            current = start
            for i, item in enumerate(expr.items):
                following = end if i == len(expr.items) - 1 else self.state()
                self.build(item, current, following)
                current = following
            if not expr.items:
                self.eps[start].append(end)
        elif isinstance(expr, Alt):
            for item in expr.items:
                self.build(item, start, end)
        elif isinstance(expr, Rep):
            self.repeat(expr.item, expr.low, expr.high, start, end)
        else:
            self.leaf(expr, start, end)

    def leaf(self, expr: Expr, start: int, end: int) -> None:
        """A node that is not a character, a literal or a combination of others."""
        raise TypeError(f"cannot build an automaton for {expr!r}")

    def chain(self, start: int, end: int, labels: Sequence[Label]) -> None:
        """``labels`` one after the other from ``start`` to ``end`` (epsilon when empty)."""
        if not labels:
            self.eps[start].append(end)
            return
        current = start
        last = len(labels) - 1
        for i, label in enumerate(labels):
            following = end if i == last else self.state()
            self.edges[current].append((label, following))
            current = following

    def repeat(self, item: Expr, low: int, high: int | None, start: int, end: int) -> None:
        """``item{low,high}``: ``low`` copies in a row, then ``high - low`` optional ones, or a
        loop when unbounded."""
        current = start
        for _ in range(low):
            following = self.state()
            self.build(item, current, following)
            current = following
        if high is None:
            loop = self.state()
            self.eps[current].append(loop)
            body_end = self.state()
            self.build(item, loop, body_end)
            self.eps[body_end].append(loop)
            self.eps[loop].append(end)
            return
        for _ in range(high - low):
            following = self.state()
            self.eps[current].append(end)
            self.build(item, current, following)
            current = following
        self.eps[current].append(end)

    def closure(self, states: Collection[int], guards: Collection[Hashable] = ()) -> frozenset[int]:
        """``states`` and every state their epsilon edges reach, following the guarded ones
        whose guard is in ``guards``."""
        eps, guarded = self.eps, self.guarded
        seen = set(states)
        todo = list(states)
        while todo:
            q = todo.pop()
            targets = eps[q]
            if guarded and q in guarded:
                targets = targets + [target for guard, target in guarded[q] if guard in guards]
            for target in targets:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return frozenset(seen)


class Determinized(NamedTuple, Generic[Label]):
    """A deterministic automaton with states numbered in discovery order (0 is the start):
    ``edges[q]`` its disjoint labelled moves, ``moves[q]`` its symbol moves."""

    edges: list[list[tuple[Label, int]]]
    moves: list[dict[Hashable, int]]
    accept: list[bool]


def determinize(
    nfa: NFA[Label],
    split: Callable[[Sequence[tuple[Label, int]]], Iterable[tuple[Label, Collection[int]]]],
    initial: frozenset[int],
    accepting: Callable[[frozenset[int]], bool],
    limit: int,
    too_large: Callable[[], Exception],
) -> Determinized[Label]:
    """The subset construction from the state set ``initial``; ``split`` gives the disjoint
    labels covering a set of labelled edges, each with the targets it leads to. The sets
    reached are closed with ``nfa.closure`` (no guard holds). Past ``limit`` states, raises
    ``too_large()``."""
    single: dict[int, frozenset[int]] = {}  # closures of one state (most moves lead to one), kept

    def closure(targets: Collection[int]) -> frozenset[int]:
        if len(targets) != 1:
            return nfa.closure(targets)
        (q,) = targets
        found = single.get(q)
        if found is None:
            found = single[q] = nfa.closure(targets)
        return found

    result: Determinized[Label] = Determinized([], [], [])
    ids: dict[frozenset[int], int] = {}
    queue: list[frozenset[int]] = []

    def state_id(subset: frozenset[int]) -> int:
        found = ids.get(subset)
        if found is None:
            if len(ids) >= limit:
                raise too_large()
            found = ids[subset] = len(ids)
            queue.append(subset)
            result.edges.append([])
            result.moves.append({})
            result.accept.append(accepting(subset))
        return found

    state_id(initial)
    done = 0
    while done < len(queue):
        subset = queue[done]
        current = done
        done += 1
        edges: list[tuple[Label, int]] = []
        symbols: dict[Hashable, set[int]] = {}
        for s in subset:
            edges += nfa.edges[s]
            for symbol, target in nfa.symbols.get(s, ()):
                symbols.setdefault(symbol, set()).add(target)
        result.edges[current] = [(label, state_id(closure(targets))) for label, targets in split(edges)]
        result.moves[current] = {symbol: state_id(closure(targets)) for symbol, targets in symbols.items()}
    return result
