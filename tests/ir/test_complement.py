"""``complement`` of a minimal automaton skips minimizing again: the result is the one the full
minimization gives (the complement of the same automaton not marked minimal), state for state."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.ir.automaton import (
    DFA,
    accepts,
    complement,
    dfa_from_regex,
    dfa_from_strings,
    intersect,
    union,
)
from structspec.ir.charset import ANY, CharSet
from structspec.ir.expr import Alt, Chars, Expr, Lit, Rep, Seq

ALPHABET = "ab\u00e9"
TEXTS = ["".join(t) for n in range(4) for t in itertools.product(ALPHABET + "c", repeat=n)]

leaves = st.one_of(
    st.text(ALPHABET, max_size=2).map(Lit),
    st.sets(st.sampled_from(ALPHABET), min_size=1).map(lambda cs: Chars(CharSet.chars("".join(cs)))),
    st.just(Chars(ANY)),
)
expressions = st.recursive(
    leaves,
    lambda child: st.one_of(
        st.lists(child, min_size=2, max_size=3).map(lambda items: Seq(tuple(items))),
        st.lists(child, min_size=2, max_size=3).map(lambda items: Alt(tuple(items))),
        st.tuples(child, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 2))).map(
            lambda t: Rep(t[0], t[1], None if t[2] is None else t[1] + t[2])
        ),
    ),
    max_leaves=6,
)


def _minimized_complement(a: DFA) -> DFA:
    """The oracle: the same completion, then the full minimization (``a`` not marked minimal)."""
    return complement(replace(a, minimal=False))


@settings(max_examples=300, deadline=None)
@given(expressions, st.lists(st.text(ALPHABET, max_size=3), max_size=4))
def test_complement_of_a_minimal_automaton_is_the_minimized_one(expr: Expr, words: list[str]) -> None:
    for a in (dfa_from_regex(expr, search=False), dfa_from_regex(expr, search=True), dfa_from_strings(words)):
        assert a.minimal or a.empty
        found = complement(a)
        assert found == _minimized_complement(a) and found.minimal
        twice = complement(found)
        assert all(accepts(twice, w) == accepts(a, w) != accepts(found, w) for w in TEXTS)
        assert union(a, found) == complement(DFA((), ()))  # every string
        assert intersect(a, found).empty
