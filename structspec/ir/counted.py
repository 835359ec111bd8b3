"""GBNF for the paths of a labelled graph that take at most ``limit`` counted links.

A link labelled :data:`~structspec.ir.expr.EMPTY` is a free move; every other link counts
one. The graph is first made deterministic over its labels (each label an opaque symbol),
stripped of states that cannot reach acceptance and minimized: its *shapes*. A shape is
*passing* without a self-loop, a *sink* when self-loops are all that leave it, and *guessing*
otherwise (a self-loop beside links to other shapes). The count is then written one of two ways:

* *Doubled*: a passing shape takes one link; a sink ends in at most ``R`` self-loops, written
  as blocks of about ``sqrt(R)`` loops counted in one rule (one parse stack per level, as the
  compiler's own blocks); from a guessing shape, "exactly ``2**j`` links from ``s`` to ``t``"
  is two of the level below and "at most ``R`` links" follows the binary digits of ``R``:
  ``O(shapes**2 * log(limit))`` rules whatever the limit. A parser guesses, at each level, the
  shape where a half ends, so its parse stacks grow with the levels and the guessing shapes a
  path passes (:func:`_guesses`).
* *Unrolled*: one state per shape and count, emitted by :func:`~structspec.ir.automaton.emit_graph`
  (a parser follows one path; compiling costs a few milliseconds per state).

Counts that guess are unrolled up to :data:`UNROLL_LIMIT` states, doubled while the parse
stacks stay under :data:`MAX_GUESSES`, else unrolled up to :data:`MAX_UNROLLED` states; past
that :class:`~structspec.ir.automaton.TooComplexError` says so.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from structspec.budget import check
from structspec.ir.automaton import RuleSink, TooComplexError, emit_graph
from structspec.ir.expr import EMPTY, MaybeExpr, Ref, alt, rep, seq

UNROLL_LIMIT = 256  # (shape, count) states up to which a count that guesses is unrolled
MAX_UNROLLED = 4_096  # (shape, count) states past which a count that guesses too much is refused
MAX_GUESSES = 1_000  # bound on the parse stacks the doubled form may make a parser hold
MAX_REPEAT = 16  # self-loops written as one counted repetition (longer runs are doubled rules)
MAX_BLOCKS = 256  # blocks of self-loops counted in one repetition
MAX_LIMIT = 2**64  # counts past this are refused (their rules would nest past Python's recursion)


@dataclass(frozen=True)
class Shapes:
    """A deterministic graph: ``moves[s]`` maps each target to the label (alternation) that
    leads there from ``s``; state 0 starts; every state can reach an accepting one."""

    moves: list[dict[int, MaybeExpr]]
    accept: list[bool]

    def loop(self, s: int) -> MaybeExpr:
        return self.moves[s].get(s)

    def is_sink(self, s: int) -> bool:
        """Only self-loops (or nothing) leave ``s``, which is then accepting."""
        return all(t == s for t in self.moves[s])


def emit_counted(
    edges: dict[Any, list[tuple[MaybeExpr, Any]]],
    accept: set[Any],
    start: Any,
    limit: int,
    sink: RuleSink,
    base: str,
) -> MaybeExpr:
    """GBNF for the paths from ``start`` to ``accept`` that take at most ``limit`` links not
    labelled ``EMPTY`` (see the module docstring); ``None`` when there is none."""
    shapes = _shapes_of(edges, accept, start)
    if shapes is None or limit < 0:
        return None
    if limit > MAX_LIMIT:
        raise TooComplexError(f"counting up to {limit} is past the limit of 2**64")
    unrolled = _unrolled_size(shapes, limit)
    guessing = _guessing_states(shapes)
    if guessing and unrolled <= UNROLL_LIMIT:
        return _unrolled(shapes, limit, sink, base)
    guesses = None if guessing is None else _guesses(limit, guessing)
    if guesses is not None and guesses <= MAX_GUESSES:
        return _Doubled(shapes, sink, base).at_most(limit, 0)
    if unrolled <= MAX_UNROLLED:
        return _unrolled(shapes, limit, sink, base)
    compact = "cannot be written compactly" if guesses is None else f"about {guesses} parse stacks written compactly"
    raise TooComplexError(
        f"counting up to {limit} needs {unrolled} automaton states (limit {MAX_UNROLLED}) "
        f"or {compact} (limit {MAX_GUESSES})"
    )


def _shapes_of(edges: dict[Any, list[tuple[MaybeExpr, Any]]], accept: set[Any], start: Any) -> Shapes | None:
    """The graph made deterministic over its labels (``EMPTY`` links as free moves), without
    states that cannot reach acceptance, minimized; ``None`` when nothing is accepted."""
    index: dict[Hashable, int] = {}
    order: list[Any] = []

    def number(state: Any) -> int:
        if state not in index:
            index[state] = len(order)
            order.append(state)
        return index[state]

    def closure(states: list[int]) -> frozenset[int]:
        found, todo = set(states), list(states)
        while todo:
            for label, target in edges.get(order[todo.pop()], []):
                if label == EMPTY and number(target) not in found:
                    found.add(index[target])
                    todo.append(index[target])
        return frozenset(found)

    first = closure([number(start)])
    subsets, todo = {first: 0}, [first]
    moves: list[dict[MaybeExpr, int]] = [{}]
    finals: list[bool] = [False]
    while todo:
        check()
        subset = todo.pop()
        here = subsets[subset]
        finals[here] = any(order[q] in accept for q in subset)
        by_label: dict[MaybeExpr, list[int]] = {}
        for q in sorted(subset):
            for label, target in edges.get(order[q], []):
                if label is not None and label != EMPTY:
                    by_label.setdefault(label, []).append(number(target))
        for label, targets in by_label.items():
            after = closure(targets)
            if after not in subsets:
                subsets[after] = len(moves)
                moves.append({})
                finals.append(False)
                todo.append(after)
            moves[here][label] = subsets[after]
    return _minimized(moves, finals)


def _minimized(moves: list[dict[MaybeExpr, int]], finals: list[bool]) -> Shapes | None:
    """The states that reach acceptance, equivalent ones merged (partition refinement), with
    the start first and the labels between two states as one alternation."""
    live = set(q for q, ok in enumerate(finals) if ok)
    grew = True
    while grew:
        grew = False
        for q, out in enumerate(moves):
            if q not in live and any(t in live for t in out.values()):
                live.add(q)
                grew = True
    if 0 not in live:
        return None
    block = {q: int(finals[q]) for q in live}
    while True:
        check()
        signatures: dict[tuple, int] = {}
        refined = {}
        for q in sorted(live):
            key = (block[q], frozenset((label, block[t]) for label, t in moves[q].items() if t in live))
            refined[q] = signatures.setdefault(key, len(signatures))
        if len(signatures) == len(set(block.values())):
            break
        block = refined
    ids: dict[int, int] = {}
    for q in sorted(live, key=lambda q: (q != 0, q)):  # the start first
        ids.setdefault(block[q], len(ids))
    merged: list[dict[int, MaybeExpr]] = [{} for _ in ids]
    accept = [False] * len(ids)
    for q in live:
        s = ids[block[q]]
        accept[s] = finals[q]
        for label, t in moves[q].items():
            if t in live:
                target = ids[block[t]]
                merged[s][target] = alt(merged[s].get(target), label)
    return Shapes(merged, accept)


def _unrolled_size(shapes: Shapes, limit: int) -> int:
    """An upper bound on the (shape, count) states of the unrolled form."""
    distance, frontier = {0: 0}, [0]
    while frontier:
        nxt = []
        for s in frontier:
            for t in shapes.moves[s]:
                if t not in distance:
                    distance[t] = distance[s] + 1
                    nxt.append(t)
        frontier = nxt
    return sum(max(limit + 1 - d, 0) for d in distance.values())


def _unrolled(shapes: Shapes, limit: int, sink: RuleSink, base: str) -> MaybeExpr:
    """One state per shape and count (deterministic)."""
    edges: dict[Any, list[tuple[MaybeExpr, Any]]] = {}
    accept: set[Any] = set()
    todo = [(0, 0)]
    while todo:
        check()
        state = todo.pop()
        if state in edges:
            continue
        s, used = state
        edges[state] = []
        if shapes.accept[s]:
            accept.add(state)
        if used < limit:
            for t, label in shapes.moves[s].items():
                edges[state].append((label, (t, used + 1)))
                todo.append((t, used + 1))
    return emit_graph(edges, accept, (0, 0), sink, base)


def _guesses(limit: int, guessing: int) -> int:
    """About the most parse stacks the doubled form holds (measured: 120 for one guessing
    state and a limit of 22,217; 452 for two)."""
    return math.comb(limit.bit_length() + guessing + 1, guessing + 1)


def _guessing_states(shapes: Shapes) -> int | None:
    """The most states on one path where the doubled form guesses (a self-loop beside other
    links); ``None`` when the shapes have a cycle longer than a self-loop."""
    most: dict[int, int] = {}
    on_path: set[int] = set()

    def visit(s: int) -> int | None:
        if s not in most:
            on_path.add(s)
            best = 0
            for t in shapes.moves[s]:
                if t in on_path and t != s:
                    return None
                below = 0 if t == s else visit(t)
                if below is None:
                    return None
                best = max(best, below)
            on_path.discard(s)
            most[s] = best + (shapes.loop(s) is not None and not shapes.is_sink(s))
        return most[s]

    return visit(0)


class _Doubled:
    """The doubled form (see the module docstring), each piece memoized as a rule."""

    def __init__(self, shapes: Shapes, sink: RuleSink, base: str) -> None:
        self.shapes = shapes
        self.sink = sink
        self.base = base
        self.memo: dict[tuple[Any, ...], Any] = {}

    def rule(self, hint: str, body: MaybeExpr) -> MaybeExpr:
        if body is None:
            return None
        name = self.sink.fresh(f"{self.base}-{hint}")
        self.sink.define(name, body)
        return Ref(name)

    def at_most(self, limit: int, s: int) -> MaybeExpr:
        """At most ``limit`` links from ``s`` to acceptance."""
        key = ("at_most", limit, s)
        if key not in self.memo:
            check()
            shapes = self.shapes
            if shapes.is_sink(s):
                result = self.loops(s, limit)
            elif shapes.loop(s) is None:  # a passing state: take one link
                steps = [seq(label, self.at_most(limit - 1, t)) for t, label in shapes.moves[s].items() if limit]
                result = alt(EMPTY if shapes.accept[s] else None, *steps)
            elif (limit + 1) & limit == 0:
                result = self.fewer_than(limit.bit_length(), s)
            else:
                j = limit.bit_length() - 1
                longer = [seq(head, self.at_most(limit - 2**j, m)) for m, head in self.paths(j, s).items()]
                result = self.rule(f"le{limit}", alt(self.fewer_than(j, s), *longer))
            self.memo[key] = result
        return self.memo[key]

    def fewer_than(self, j: int, s: int) -> MaybeExpr:
        """Fewer than ``2**j`` links from ``s`` to acceptance."""
        key = ("fewer_than", j, s)
        if key not in self.memo:
            if j == 0:
                result = EMPTY if self.shapes.accept[s] else None
            elif self.shapes.loop(s) is None or self.shapes.is_sink(s):
                result = self.at_most(2**j - 1, s)
            else:
                longer = [seq(head, self.fewer_than(j - 1, m)) for m, head in self.paths(j - 1, s).items()]
                result = self.rule(f"lt{j}", alt(self.fewer_than(j - 1, s), *longer))
            self.memo[key] = result
        return self.memo[key]

    def paths(self, j: int, s: int) -> dict[int, MaybeExpr]:
        """Exactly ``2**j`` links from ``s``, by the shape where they end."""
        key = ("paths", j, s)
        if key not in self.memo:
            check()
            if j == 0:
                found = dict(self.shapes.moves[s])
            else:
                halves: dict[int, MaybeExpr] = {}
                for m, first in self.paths(j - 1, s).items():
                    for t, second in self.paths(j - 1, m).items():
                        if not m == t == s:
                            halves[t] = alt(halves.get(t), seq(first, second))
                found = {t: self.rule(f"{j}", body) for t, body in halves.items()}
                if self.shapes.loop(s) is not None:  # acyclic but for self-loops: only the loop returns
                    found[s] = self.run(j, s)
            self.memo[key] = found
        return self.memo[key]

    def run(self, j: int, s: int) -> MaybeExpr:
        """Exactly ``2**j`` self-loops of ``s``: a rule from :data:`MAX_REPEAT` of them on."""
        if 2**j < MAX_REPEAT:
            return rep(self.shapes.loop(s), 2**j, 2**j)
        key = ("run", j, self.shapes.loop(s))  # by the loop: shapes that loop alike share runs
        if key not in self.memo:
            half = self.run(j - 1, s)
            body = seq(half, half) if 2**j > MAX_REPEAT else rep(self.shapes.loop(s), 2**j, 2**j)
            self.memo[key] = self.rule(f"x{j}", body)
        return self.memo[key]

    def loops(self, s: int, limit: int) -> MaybeExpr:
        """At most ``limit`` self-loops of ``s``: past :data:`MAX_REPEAT`, up to
        :data:`MAX_BLOCKS` blocks of at least ``sqrt(limit)`` loops counted in one rule
        (a parser follows them on one stack, as the compiler's own blocks)."""
        if limit <= MAX_REPEAT:
            return rep(self.shapes.loop(s), 0, limit)
        key = ("loops", limit, self.shapes.loop(s))
        if key not in self.memo:
            bits = limit.bit_length()
            j = max((bits + 1) // 2, bits - MAX_BLOCKS.bit_length() + 1, MAX_REPEAT.bit_length() - 1)
            block, (q, r) = self.run(j, s), divmod(limit, 2**j)
            full = seq(rep(block, 0, q - 1), self.loops(s, 2**j - 1))
            self.memo[key] = self.rule(f"up{limit}", alt(full, seq(rep(block, q, q), self.loops(s, r))))
        return self.memo[key]
