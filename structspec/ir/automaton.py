"""Deterministic automata over Unicode characters, for what GBNF cannot say directly.

GBNF has no intersection or complement, yet JSON Schema needs both: two ``pattern``s on one
string, ``pattern`` with ``maxLength``, property names that must avoid the declared ones,
``patternProperties`` that overlap. We build a DFA (edges labelled with :class:`CharSet`, by
the automaton core of :mod:`structspec.ir.nfa` over code points), combine DFAs exactly, and
emit the result as right-linear GBNF rules.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from structspec.ir.charset import ANY, CharSet
from structspec.ir.expr import Anchor, Expr, Lit, MaybeExpr, Ref, alt, rep, seq
from structspec.ir.nfa import NFA, determinize

MAX_STATES = 4000
VECTORIZED_MOORE_CELLS = 256  # states x character pieces from which minimisation refines with numpy


class TooComplexError(ValueError):
    """An automaton would exceed :data:`MAX_STATES` states."""


@dataclass(frozen=True)
class DFA:
    """A trimmed deterministic automaton: every state is reachable and can reach acceptance.

    ``edges[q]`` lists ``(charset, target)`` with pairwise disjoint charsets. An automaton with
    no states accepts nothing. ``minimal``: known to have no two states that accept the same
    strings (made by :func:`minimize`), which lets :func:`complement` skip minimizing again.
    """

    edges: tuple[tuple[tuple[CharSet, int], ...], ...]
    accept: tuple[bool, ...]
    minimal: bool = field(default=False, compare=False, repr=False)

    @property
    def empty(self) -> bool:
        return not self.accept


# -- construction ------------------------------------------------------------------------------


class _CodePoints:
    """The alphabet of these automata: code points, an edge label being a :class:`CharSet`."""

    def literal(self, text: str) -> list[CharSet]:
        return [CharSet.chars(c) for c in text]

    def chars(self, ranges: tuple[tuple[int, int], ...]) -> list[list[CharSet]]:
        return [[CharSet.of(ranges)]]

    def split(self, edges: Iterable[tuple[CharSet, int]]) -> list[tuple[CharSet, frozenset[int]]]:
        """Group characters by the set of targets they lead to (a sweep over range ends)."""
        events: dict[int, list[tuple[int, int]]] = {}
        for charset, target in edges:
            for lo, hi in charset.ranges:
                events.setdefault(lo, []).append((target, 1))
                events.setdefault(hi + 1, []).append((target, -1))
        active: dict[int, int] = {}
        groups: dict[frozenset[int], list[tuple[int, int]]] = {}
        points = sorted(events)
        for here, nxt in itertools.pairwise(points):
            for target, delta in events[here]:
                active[target] = active.get(target, 0) + delta
                if not active[target]:
                    del active[target]
            if active:
                groups.setdefault(frozenset(active), []).append((here, nxt - 1))
        return [(CharSet.of(ranges), targets) for targets, ranges in groups.items()]


_CODE_POINTS = _CodePoints()


def _too_many_nfa_states() -> TooComplexError:
    return TooComplexError("pattern expands to too many automaton states")


class _PatternNFA(NFA[CharSet]):
    """A regex's NFA: anchors are epsilon edges guarded by ``^`` (at the start of the text) or
    ``$`` (at its end)."""

    def __init__(self) -> None:
        super().__init__(_CODE_POINTS, MAX_STATES * 8 + 1, _too_many_nfa_states)  # + 1: the start marker

    def leaf(self, expr: Expr, start: int, end: int) -> None:
        if isinstance(expr, Anchor):
            self.guarded_epsilon(start, "^" if expr.start else "$", end)
        else:
            super().leaf(expr, start, end)


def dfa_from_regex(expr: Expr | None, *, search: bool) -> DFA:
    """The DFA of a parsed regex; ``search``: JSON Schema's unanchored ``pattern`` semantics."""
    if expr is None:
        return DFA((), ())
    nfa = _PatternNFA()
    start, final = nfa.state(), nfa.state()
    nfa.build(expr, start, final)
    if search:
        prefix, suffix = nfa.state(), nfa.state()
        nfa.edges[prefix].append((ANY, prefix))
        nfa.eps[prefix].append(start)
        nfa.eps[final].append(suffix)
        nfa.edges[suffix].append((ANY, suffix))
        start, final = prefix, suffix
    # The start set carries a state of its own, with no edges: ``^`` holds only there, and the
    # start is never merged with a later state that has the same NFA states.
    at_start = nfa.state()

    def accepting(states: frozenset[int]) -> bool:
        return final in nfa.closure(states, ("^", "$") if at_start in states else ("$",))

    def too_large() -> TooComplexError:
        return TooComplexError("pattern needs too many automaton states")

    found = determinize(
        nfa, _CODE_POINTS.split, nfa.closure([start], ("^",)) | {at_start}, accepting, MAX_STATES, too_large
    )
    return minimize(DFA(tuple(map(tuple, found.edges)), tuple(found.accept)))


def dfa_from_strings(strings: Iterable[str]) -> DFA:
    """The minimal DFA accepting exactly ``strings``, the one :func:`minimize` makes of their
    trie. A trie is acyclic and trimmed, so its states are merged bottom up instead: two states
    accept the same strings exactly when they agree on acceptance and each character leads them
    to merged states; children come after their parent, so one backward pass finds every
    state's block. The blocks are then numbered and the edges merged as :func:`minimize` does."""
    trie: list[dict[str, int]] = [{}]
    accept = [False]
    for s in strings:
        node = 0
        for c in s:
            children = trie[node]
            if c not in children:
                children[c] = len(trie)
                trie.append({})
                accept.append(False)
            node = children[c]
        accept[node] = True
    n = len(trie)
    if n == 1 and not accept[0]:
        return DFA((), ())
    block = [0] * n
    signatures: dict[tuple, int] = {}
    for q in range(n - 1, -1, -1):
        moves = sorted((c, block[t]) for c, t in trie[q].items())
        block[q] = signatures.setdefault((accept[q], *moves), len(signatures))
    remap: dict[int, int] = {}
    for b in block:
        remap.setdefault(b, len(remap))
    merged_accept = [False] * len(remap)
    rows: list[dict[int, CharSet] | None] = [None] * len(remap)
    for q in range(n):
        b = remap[block[q]]
        if rows[b] is not None:
            continue
        merged_accept[b] = accept[q]
        row: dict[int, CharSet] = {}
        for c, t in trie[q].items():
            tb = remap[block[t]]
            row[tb] = row[tb] | CharSet.chars(c) if tb in row else CharSet.chars(c)
        rows[b] = row
    edges = tuple(tuple((cs, t) for t, cs in row.items()) for row in rows if row is not None)
    return DFA(edges, tuple(merged_accept), minimal=True)


def dfa_length(low: int, high: int | None, charset: CharSet = ANY) -> DFA:
    """Strings of ``charset`` characters whose length lies in ``[low, high]``; one state per
    length up to the larger bound, so past :data:`MAX_STATES` it raises :class:`TooComplexError`."""
    last = low if high is None else high
    if last >= MAX_STATES:
        raise TooComplexError(f"a length bound of {last} needs more than {MAX_STATES} automaton states")
    edges = []
    for i in range(last + 1):
        if i < last:
            edges.append(((charset, i + 1),))
        elif high is None:
            edges.append(((charset, i),))
        else:
            edges.append(())
    accept = tuple(i >= low for i in range(last + 1))
    return minimize(DFA(tuple(edges), accept))


# -- operations --------------------------------------------------------------------------------


def intersect(a: DFA, b: DFA) -> DFA:
    """Strings accepted by both."""
    if a.empty or b.empty:
        return DFA((), ())
    index = {(0, 0): 0}
    order = [(0, 0)]
    edges: list[tuple[tuple[CharSet, int], ...]] = []
    accept: list[bool] = []
    while len(edges) < len(order):
        p, q = order[len(edges)]
        accept.append(a.accept[p] and b.accept[q])
        out = []
        for cs1, t1 in a.edges[p]:
            for cs2, t2 in b.edges[q]:
                both = cs1 & cs2
                if not both:
                    continue
                key = (t1, t2)
                if key not in index:
                    if len(order) >= MAX_STATES:
                        raise TooComplexError("combined constraints need too many automaton states")
                    index[key] = len(order)
                    order.append(key)
                out.append((both, index[key]))
        edges.append(tuple(out))
    return minimize(DFA(tuple(edges), tuple(accept)))


def complement(a: DFA) -> DFA:
    """Strings ``a`` rejects. The complement of a minimal automaton is minimal once trimmed:
    its states' languages are those of ``a``'s states complemented, all distinct, and the new
    sink's (every string) differs from each of them, since each of ``a``'s states accepts
    something."""
    if a.empty:
        return DFA((((ANY, 0),),), (True,), minimal=True)
    dead = len(a.accept)
    edges = []
    for out in a.edges:
        covered = CharSet()
        for cs, _ in out:
            covered = covered | cs
        rest = ANY - covered
        edges.append(out + (((rest, dead),) if rest else ()))
    edges.append(((ANY, dead),))
    accept = (*(not x for x in a.accept), True)
    if a.minimal:
        return replace(_trim(DFA(tuple(edges), accept)), minimal=True)
    return minimize(DFA(tuple(edges), accept))


def difference(a: DFA, b: DFA) -> DFA:
    return intersect(a, complement(b))


def union(a: DFA, b: DFA) -> DFA:
    return complement(intersect(complement(a), complement(b)))


def minimize(a: DFA) -> DFA:
    """Trim unreachable and dead states, then merge equivalent ones (Moore's algorithm)."""
    a = _trim(a)
    n = len(a.accept)
    if n == 0:
        return a
    pieces = _atoms(a)
    starts = [p.ranges[0][0] for p in pieces]
    table = []
    for out in a.edges:
        row = [-1] * len(pieces)
        for cs, t in out:
            for lo, hi in cs.ranges:
                i = bisect.bisect_left(starts, lo)
                while i < len(starts) and starts[i] <= hi:
                    row[i] = t
                    i += 1
        table.append(row)
    block = _equivalence_blocks(table, a.accept)
    # renumber so the start state's block comes first
    remap: dict[int, int] = {block[0]: 0}
    for b in block:
        remap.setdefault(b, len(remap))
    m = len(remap)
    accept = [False] * m
    rows: list[dict[int, CharSet]] = [dict() for _ in range(m)]
    done = set()
    for q in range(n):
        b = remap[block[q]]
        accept[b] = a.accept[q]
        if b in done:
            continue
        done.add(b)
        for cs, t in a.edges[q]:
            tb = remap[block[t]]
            rows[b][tb] = rows[b][tb] | cs if tb in rows[b] else cs
    edges = tuple(tuple((cs, t) for t, cs in row.items()) for row in rows)
    return DFA(edges, tuple(accept), minimal=True)


def _equivalence_blocks(table: list[list[int]], accept: tuple[bool, ...]) -> list[int]:
    """Moore's refinement: states in one block accept the same strings. ``table[q][atom]`` is
    the move (-1: none). Small tables are refined in Python; large ones with numpy, a whole
    round at a time, after merging atoms that move every state alike into one column."""
    if len(table) * len(table[0]) < VECTORIZED_MOORE_CELLS:
        block = [1 if acc else 0 for acc in accept]
        while True:
            signatures: dict[tuple[int, ...], int] = {}
            new_block = [
                signatures.setdefault((block[q], *[block[t] if t >= 0 else -1 for t in row]), len(signatures))
                for q, row in enumerate(table)
            ]
            if len(signatures) == len(set(block)):
                return new_block
            block = new_block
    moves = np.unique(np.array(table, dtype=np.int64), axis=1)
    blocks = np.array(accept, dtype=np.int64)
    count = len(np.unique(blocks))
    while True:
        signatures = np.column_stack([blocks, np.where(moves >= 0, blocks[moves], -1)])
        order = np.lexsort(signatures.T[::-1])
        ordered = signatures[order]
        starts = np.concatenate(([0], np.any(ordered[1:] != ordered[:-1], axis=1)))
        blocks = np.empty_like(blocks)
        blocks[order] = np.cumsum(starts)
        new_count = int(starts.sum()) + 1
        if new_count == count:
            return blocks.tolist()
        count = new_count


def _atoms(a: DFA) -> list[CharSet]:
    """Elementary character pieces no edge of ``a`` splits (each given by one range)."""
    points: set[int] = set()
    for out in a.edges:
        for cs, _ in out:
            for lo, hi in cs.ranges:
                points.add(lo)
                points.add(hi + 1)
    bounds = sorted(points)
    return [CharSet(((lo, nxt - 1),)) for lo, nxt in itertools.pairwise(bounds)]


def _trim(a: DFA) -> DFA:
    n = len(a.accept)
    if n == 0:
        return a
    reach = {0}
    stack = [0]
    while stack:
        q = stack.pop()
        for _, t in a.edges[q]:
            if t not in reach:
                reach.add(t)
                stack.append(t)
    preds: list[set[int]] = [set() for _ in range(n)]
    for q in range(n):
        for _, t in a.edges[q]:
            preds[t].add(q)
    alive = {q for q in range(n) if a.accept[q]}
    stack = list(alive)
    while stack:
        q = stack.pop()
        for p in preds[q]:
            if p not in alive:
                alive.add(p)
                stack.append(p)
    keep = [q for q in range(n) if q in reach and q in alive]
    if 0 not in alive:
        return DFA((), ())
    new = {q: i for i, q in enumerate(keep)}
    edges = tuple(tuple((cs, new[t]) for cs, t in a.edges[q] if t in new) for q in keep)
    return DFA(edges, tuple(a.accept[q] for q in keep))


def length_bounds(a: DFA) -> tuple[int, int | None]:
    """Shortest and longest accepted length (``None``: unbounded). ``a`` must be non-empty."""
    dist = {0: 0}
    frontier = [0]
    while frontier:
        nxt = []
        for q in frontier:
            for _, t in a.edges[q]:
                if t not in dist:
                    dist[t] = dist[q] + 1
                    nxt.append(t)
        frontier = nxt
    shortest = min(d for q, d in dist.items() if a.accept[q])
    longest = _longest_path(a)
    return shortest, longest


def _longest_path(a: DFA) -> int | None:
    """Longest accepted length from the start, ``None`` when a cycle makes it unbounded."""
    n = len(a.accept)
    state = [0] * n  # 0 new, 1 on stack, 2 done
    longest = [0] * n
    stack: list[tuple[int, int]] = [(0, 0)]
    state[0] = 1
    while stack:
        q, i = stack.pop()
        if i < len(a.edges[q]):
            stack.append((q, i + 1))
            t = a.edges[q][i][1]
            if state[t] == 1:
                return None
            if state[t] == 0:
                state[t] = 1
                stack.append((t, 0))
            continue
        best = 0 if a.accept[q] else -1
        for _, t in a.edges[q]:
            best = max(best, longest[t] + 1)
        longest[q] = best
        state[q] = 2
    return longest[0]


def accepts(a: DFA, text: str) -> bool:
    """Whether ``a`` accepts ``text`` (used by tests and by finite-set checks)."""
    if a.empty:
        return False
    q = 0
    for c in text:
        for cs, t in a.edges[q]:
            if ord(c) in cs:
                q = t
                break
        else:
            return False
    return a.accept[q]


# -- emission ------------------------------------------------------------------------------------


class RuleSink(Protocol):
    """Where emitted rules go: ``fresh`` reserves an unused name, ``define`` adds the rule."""

    def fresh(self, hint: str) -> str: ...

    def define(self, name: str, expr: Expr) -> None: ...


def emit_dfa(a: DFA, encode: Callable[[CharSet], MaybeExpr], sink: RuleSink, base: str) -> MaybeExpr:
    """GBNF for ``a`` (see :func:`emit_graph`); ``encode`` turns an edge label into an
    expression."""
    if a.empty:
        return None
    edges = {q: [(encode(cs), t) for cs, t in out] for q, out in enumerate(a.edges)}
    accept = {q for q, ok in enumerate(a.accept) if ok}
    return emit_graph(edges, accept, 0, sink, base)


MAX_INLINE_DEPTH = 24


def emit_graph(
    edges: dict[Any, list[tuple[MaybeExpr, Any]]],
    accept: set[Any],
    start: Any,
    sink: RuleSink,
    base: str,
    preset: dict[Any, str] | None = None,
) -> MaybeExpr:
    """GBNF for a graph whose edges are labelled with expressions (a regular structure).

    States entered from several places (or from a cycle through the start) become
    right-linear rules named after ``base``; the others are inlined into their only
    predecessor, up to :data:`MAX_INLINE_DEPTH` levels; ``preset`` names states that must be
    rules. Parallel edges merge into one alternation and a self-loop becomes ``label*``.
    """
    merged: dict[Any, dict[Any, MaybeExpr]] = {}
    for state, out in edges.items():
        targets: dict[Any, MaybeExpr] = {}
        for label, target in out:
            if label is None:
                continue
            targets[target] = alt(targets[target], label) if target in targets else label
        merged[state] = targets
    indegree: dict[Any, int] = {}
    for state, targets in merged.items():
        for target in targets:
            if target != state:
                indegree[target] = indegree.get(target, 0) + 1
    named = [s for s in merged if (indegree.get(s, 0) >= 2 and merged[s]) or (s == start and indegree.get(s, 0))]
    names: dict[Any, str] = dict(preset or {})
    for s in named:
        if s not in names:
            names[s] = sink.fresh(f"{base}-{len(names) + 1}")
    bodies: dict[Any, MaybeExpr] = {s: (Lit("") if s in accept else None) for s, t in merged.items() if not t}
    depth: dict[Any, int] = dict.fromkeys(bodies, 0)
    order: list[Any] = []
    stack = list(dict.fromkeys([start, *names]))
    seen = set(stack)
    while stack:
        state = stack.pop()
        order.append(state)
        for target in merged.get(state, {}):
            if target not in seen and target not in names:
                seen.add(target)
                stack.append(target)
    for state in reversed(order):
        if not merged.get(state) and state not in names:
            continue
        loop = None
        branches: list[MaybeExpr] = [Lit("")] if state in accept else []
        height = 0
        for target, label in merged.get(state, {}).items():
            if target == state:
                loop = label
                continue
            if target not in names and depth.get(target, 0) >= MAX_INLINE_DEPTH:
                names[target] = sink.fresh(f"{base}-{len(names) + 1}")
            if target in names:
                branches.append(seq(label, Ref(names[target])))
            else:
                branches.append(seq(label, bodies[target]))
                height = max(height, depth.get(target, 0) + 1)
        bodies[state] = seq(rep(loop, 0, None), alt(*branches))
        depth[state] = height
    for state, name in names.items():
        body = bodies.get(state)
        if body is not None:
            sink.define(name, body)
    return Ref(names[start]) if start in names else bodies[start]
