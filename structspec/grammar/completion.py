"""Shortest completions: how many tokens a parse state needs, at most, to become complete.

Generation keeps every output finishable within ``max_new_tokens`` with it (see
``structspec.generation.budget``), and :func:`shortest_steps` says how a shortest completion
begins, so that the budget guard can always name a token that keeps it. The bound spells the
shortest completion one byte per token, so it holds for any vocabulary that has the bytes it
needs as single tokens (every byte-level BPE and every SentencePiece vocabulary with byte
fallback); bytes the vocabulary cannot spell alone are treated as unusable, which keeps the
bound an upper bound.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence

import numpy as np

from structspec.grammar.parse_state import ParseState
from structspec.grammar.ruleset import RuleSet


def spellable_bytes(byte_matrix: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Bool ``[256]``: the bytes some single-byte text token spells."""
    spellable = np.zeros(256, dtype=bool)
    spellable[byte_matrix[lengths == 1, 0]] = True
    return spellable


def rule_completion_costs(rules: RuleSet, spellable: np.ndarray) -> list[float]:
    """``cost[q]``: the fewest steps from automaton state ``q`` to the end of its rule, a step
    being one spellable byte or one token reference (``inf`` where the rule cannot end).

    Knuth's generalization of Dijkstra's algorithm: a rule reference costs the referenced
    rule's cost from its start plus the cost from the return state, and states are settled
    in order of cost, each once.
    """
    n = rules.n_states
    classes = np.unique(rules.byte_class[spellable])
    table = rules.class_table(classes)
    src, col = np.nonzero(table >= 0)
    keys = [table[src, col].astype(np.int64) * n + src]  # successor * n + predecessor
    token_keys = [target * n + q for q, moves in enumerate(rules.token_edges) for _, target in moves]
    if token_keys:
        keys.append(np.array(token_keys, dtype=np.int64))
    edges = np.unique(np.concatenate(keys))  # sorted by successor, duplicates gone
    bounds = np.searchsorted(edges // n, np.arange(n + 1)).tolist()
    predecessors = (edges % n).tolist()

    by_start: dict[int, list[tuple[int, int]]] = {}
    by_return: dict[int, list[tuple[int, int]]] = {}
    for q, refs in enumerate(rules.refs):
        for start, step in refs:
            ret = q + step
            by_start.setdefault(start, []).append((q, ret))
            by_return.setdefault(ret, []).append((q, start))

    cost = [math.inf] * n
    heap = [(0.0, q) for q in range(n) if rules.final[q]]
    while heap:
        d, q = heapq.heappop(heap)
        if cost[q] != math.inf:
            continue
        cost[q] = d
        for p in predecessors[bounds[q] : bounds[q + 1]]:
            if cost[p] == math.inf:
                heapq.heappush(heap, (d + 1, p))
        for p, ret in by_start.get(q, ()):
            if cost[p] == math.inf and cost[ret] != math.inf:
                heapq.heappush(heap, (d + cost[ret], p))
        for p, start in by_return.get(q, ()):
            if cost[p] == math.inf and cost[start] != math.inf:
                heapq.heappush(heap, (cost[start] + d, p))
    return cost


def completion_cost(state: ParseState, costs: Sequence[float]) -> float:
    """Steps (see :func:`rule_completion_costs`) from ``state`` to a complete text: 0 when it
    is complete, else the cheapest stack's sum of its frames' costs (each frame finishes its
    rule, then the caller's frame below resumes)."""
    if state.accepting:
        return 0.0
    best = math.inf
    for head in state.heads:
        total, frame = 0.0, head
        while frame is not None and total < best:
            total += costs[frame.state]
            frame = frame.parent
        best = min(best, total)
    return best


def shortest_steps(state: ParseState, costs: Sequence[float], spellable: np.ndarray) -> Iterator[tuple[bool, int]]:
    """The steps of one shortest completion of ``state``, lazily: ``(True, byte)`` for a
    spellable byte, ``(False, index)`` for a token reference (the last step yielded). Each step
    lowers :func:`completion_cost` by one; nothing is yielded once the state is complete or
    when it cannot be completed."""
    current: ParseState | None = state
    while current is not None:
        step = _cheapest_step(current, costs, spellable)
        if step is None:
            return
        yield step
        is_byte, value = step
        if not is_byte:
            return
        current = current.advance_byte(value)


def _cheapest_step(state: ParseState, costs: Sequence[float], spellable: np.ndarray) -> tuple[bool, int] | None:
    """``(True, byte)`` or ``(False, token reference index)``: a first step of a shortest
    completion of ``state``, None when it is complete or cannot be completed.

    A stack of the cheapest total whose top can step to a state one cheaper is such a step.
    One always exists: where the top's own shortest way out starts by calling a rule, or by
    ending its rule, the closure holds the stack with the callee (or the caller) on top at the
    same total."""
    best = completion_cost(state, costs)
    if best == 0.0 or best == math.inf:
        return None
    rules = state.rules
    for head in state.heads:
        total, frame = 0.0, head
        while frame is not None:
            total += costs[frame.state]
            frame = frame.parent
        q = head.state
        if total != best or costs[q] < 1:
            continue
        cheaper = costs[q] - 1
        for b, target in rules.byte_moves.of(q).items():
            if spellable[b] and costs[target] == cheaper:
                return True, b
        for ref, target in rules.token_edges[q]:
            if costs[target] == cheaper:
                return False, ref
    return None
