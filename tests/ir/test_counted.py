"""``emit_counted`` (``ir/counted.py``): on random small graphs, with free moves and cycles,
each form of the count accepts exactly the words of at most ``limit`` links that the graph
accepts (brute force over every word)."""

from __future__ import annotations

import itertools
from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

import structspec.ir.counted as counted
from structspec.grammar import Grammar
from structspec.ir.expr import EMPTY, Lit, MaybeExpr
from structspec.jsonschema.builder import GrammarBuilder

LETTERS = "ab"


graphs = st.lists(
    st.tuples(st.integers(0, 4), st.sampled_from([*LETTERS, ""]), st.integers(0, 4)), max_size=10
).map(lambda links: {q: [(Lit(c) if c else EMPTY, t) for p, c, t in links if p == q] for q in range(5)})


def accepts(edges: dict[int, list[tuple[MaybeExpr, int]]], accept: set[int], word: str) -> bool:
    def closure(states: set[int]) -> set[int]:
        todo = list(states)
        while todo:
            for label, t in edges[todo.pop()]:
                if label == EMPTY and t not in states:
                    states.add(t)
                    todo.append(t)
        return states

    states = closure({0})
    for char in word:
        states = closure({t for q in states for label, t in edges[q] if label == Lit(char)})
    return bool(states & accept)


def language(edges: dict[int, list[tuple[MaybeExpr, int]]], accept: set[int], limit: int) -> list[bool] | None:
    """The verdict of the emitted grammar on every word up to ``limit + 1`` letters."""
    builder = GrammarBuilder()  # a rule sink that drops references to rules that match nothing
    root = counted.emit_counted(edges, accept, 0, limit, builder, "r")
    builder.define("root", root)
    finished = builder.finish("root")
    if finished is None:
        return None
    grammar = Grammar.from_gbnf(finished[1])
    return [grammar.matches(w) for w in _words(limit + 1)]


def _words(most: int) -> list[str]:
    return ["".join(w) for n in range(most + 1) for w in itertools.product(LETTERS, repeat=n)]


@settings(max_examples=300, deadline=None)
@given(edges=graphs, accept=st.sets(st.integers(0, 4)), limit=st.integers(0, 6))
def test_every_form_of_the_count_has_the_language_of_the_graph(edges: Any, accept: set[int], limit: int) -> None:
    expected = [len(w) <= limit and accepts(edges, accept, w) for w in _words(limit + 1)]
    for unroll, repeat in ((counted.UNROLL_LIMIT, counted.MAX_REPEAT), (0, 2)):
        with patch.object(counted, "UNROLL_LIMIT", unroll), patch.object(counted, "MAX_REPEAT", repeat):
            got = language(edges, accept, limit)
        assert got == (None if not any(expected) else expected)
