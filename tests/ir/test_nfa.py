"""Both automaton constructions: the grammar compiler's byte automata (built in C) and the
converters' code-point automata (``ir/nfa.py``) accept the same language, the one a direct
matcher of the expression gives, and a counted repeat costs one state per count in both."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structspec.grammar.compiler
from structspec.errors import GrammarError
from structspec.grammar import Grammar
from structspec.ir import automaton
from structspec.ir.automaton import TooComplexError, dfa_from_regex
from structspec.ir.charset import CharSet
from structspec.ir.expr import Alt, Chars, Expr, Lit, Rep, Seq
from structspec.ir.printer import format_rule

ALPHABET = "ab\u00e9\U0001f600"  # one, two and four UTF-8 bytes
TEXTS = ["".join(t) for n in range(5) for t in itertools.product(ALPHABET, repeat=n)]

leaves = st.one_of(
    st.text(ALPHABET, max_size=2).map(Lit),
    st.sets(st.sampled_from(ALPHABET), min_size=1).map(lambda cs: Chars(CharSet.chars("".join(cs)))),
)


def _combine(child: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    bounds = st.tuples(st.integers(0, 2), st.one_of(st.none(), st.integers(0, 2))).map(
        lambda b: (b[0], None if b[1] is None else b[0] + b[1])
    )
    return st.one_of(
        st.lists(child, min_size=2, max_size=3).map(lambda items: Seq(tuple(items))),
        st.lists(child, min_size=2, max_size=3).map(lambda items: Alt(tuple(items))),
        st.tuples(child, bounds).map(lambda t: Rep(t[0], *t[1])),
    )


expressions = st.recursive(leaves, _combine, max_leaves=6)


def _ends(expr: Expr, text: str, start: int) -> set[int]:
    """Where a match of ``expr`` beginning at ``start`` can end: the matcher to compare with."""
    if isinstance(expr, Lit):
        return {start + len(expr.text)} if text.startswith(expr.text, start) else set()
    if isinstance(expr, Chars):
        return {start + 1} if start < len(text) and ord(text[start]) in expr.charset else set()
    if isinstance(expr, Seq):
        here = {start}
        for item in expr.items:
            here = {end for at in here for end in _ends(item, text, at)}
        return here
    if isinstance(expr, Alt):
        return set().union(*(_ends(item, text, start) for item in expr.items))
    assert isinstance(expr, Rep)
    # Beyond ``low`` copies, only the non-empty ones matter: at most one per character left.
    most = expr.high if expr.high is not None else expr.low + len(text) - start
    found, here = set(), {start}
    for count in range(most + 1):
        if count >= expr.low:
            found |= here
        here = {end for at in here for end in _ends(expr.item, text, at)}
    return found


@settings(max_examples=150, deadline=None)
@given(expressions)
def test_bytes_and_code_points_accept_the_same_language(expr: Expr) -> None:
    grammar = Grammar.from_gbnf(format_rule("root", expr))
    dfa = dfa_from_regex(expr, search=False)
    for text in TEXTS:
        expected = len(text) in _ends(expr, text, 0)
        assert grammar.matches(text) == expected, text
        assert automaton.accepts(dfa, text) == expected, text


def test_a_counted_repeat_takes_one_state_per_count_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(structspec.grammar.compiler, "DFA_LIMIT", 10)
    monkeypatch.setattr(automaton, "MAX_STATES", 10)
    assert Grammar.from_gbnf('root ::= "x"{9}').matches("x" * 9)  # ten states: the cap
    assert automaton.accepts(dfa_from_regex(Rep(Lit("x"), 9, 9), search=False), "x" * 9)
    with pytest.raises(GrammarError, match="E108 rule 'root' needs more than 10 automaton states"):
        Grammar.from_gbnf('root ::= "x"{10}')
    with pytest.raises(TooComplexError):
        dfa_from_regex(Rep(Lit("x"), 10, 10), search=False)
