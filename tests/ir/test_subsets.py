"""The subset construction over bytes in C (``ir/_subsets.pyx``) against the generic one of
``ir/nfa.py`` as the oracle, its byte labels split by brute force (one byte at a time): the same
automaton up to the numbering of states, the same acceptance and symbol moves, the same limit,
and byte classes that are exactly the distinct columns of moves, numbered by lowest byte."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from structspec.ir._subsets import byte_subsets

from structspec.grammar.compiler import _RuleNFA
from structspec.ir.charset import CharSet
from structspec.ir.expr import Alt, Chars, Expr, Lit, Ref, Rep, Rule, Seq, TokenRef
from structspec.ir.nfa import Determinized, determinize

ALPHABET = "ab\u00e9\u0800\U0001f600"  # one to four UTF-8 bytes
CALLEES = ("x", "y")
TABLE = {name: Rule(name, Lit(name)) for name in CALLEES}

leaves = st.one_of(
    st.text(ALPHABET, max_size=3).map(Lit),
    st.sets(st.sampled_from(ALPHABET), min_size=1).map(lambda cs: Chars(CharSet.chars("".join(cs)))),
    st.tuples(st.integers(0x20, 0x10FFFF), st.integers(0, 0x3000)).map(
        lambda r: Chars(CharSet.of(((r[0], min(r[0] + r[1], 0x10FFFF)),)))
    ),
    st.sampled_from(CALLEES).map(Ref),
    st.integers(0, 3).map(lambda token: TokenRef(token=token, negated=False)),
)


def _combine(child: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    bounds = st.tuples(st.integers(0, 2), st.one_of(st.none(), st.integers(0, 2))).map(
        lambda b: (b[0], None if b[1] is None else b[0] + b[1])
    )
    return st.one_of(
        st.lists(child, min_size=2, max_size=4).map(lambda items: Seq(tuple(items))),
        st.lists(child, min_size=2, max_size=4).map(lambda items: Alt(tuple(items))),
        st.tuples(child, bounds).map(lambda t: Rep(t[0], *t[1])),
    )


expressions = st.recursive(leaves, _combine, max_leaves=10)


def _by_byte(edges: Sequence[tuple[tuple[int, int], int]]) -> list[tuple[frozenset[int], Collection[int]]]:
    """The oracle's split: every byte on its own, bytes with equal targets grouped."""
    groups: dict[frozenset[int], set[int]] = {}
    for b in range(256):
        targets = frozenset(t for (lo, hi), t in edges if lo <= b <= hi)
        if targets:
            groups.setdefault(targets, set()).add(b)
    return [(frozenset(members), targets) for targets, members in groups.items()]


def _both(expr: Expr, limit: int = 100_000) -> tuple[Determinized | None, tuple | None]:
    nfa = _RuleNFA(TABLE, set(), Rule("root", expr))
    start, end = nfa.state(), nfa.state()
    nfa.build(expr, start, end)

    class Over(Exception):
        pass

    try:
        oracle = determinize(nfa, _by_byte, nfa.closure([start]), lambda subset: end in subset, limit, Over)
    except Over:
        oracle = None
    return oracle, byte_subsets(nfa.eps, nfa.edges, nfa.symbols, start, end, limit)


def _assert_same(oracle: Determinized, native: tuple) -> None:
    byte_class, table, calls, symbols, accept = native
    assert len(accept) == len(oracle.accept) == len(table)
    moves: list[dict[Hashable, int]] = [{} for _ in accept]
    for q, s, t in zip(*(column.tolist() for column in calls), strict=True):
        moves[q][symbols[s]] = t
    mapping = {0: 0}  # oracle state -> native state
    todo = [0]
    while todo:
        p = todo.pop()
        q = mapping[p]
        assert oracle.accept[p] == accept[q]
        expected = {b: t for label, t in oracle.edges[p] for b in label}
        pairs = [(expected.get(b, -1), int(table[q, byte_class[b]])) for b in range(256)]
        pairs += [(t, moves[q].get(symbol, -1)) for symbol, t in oracle.moves[p].items()]
        assert len(moves[q]) == len(oracle.moves[p])
        for mine, theirs in pairs:
            assert (mine < 0) == (theirs < 0)
            if mine >= 0:
                if mine not in mapping:
                    assert theirs not in mapping.values()
                    mapping[mine] = theirs
                    todo.append(mine)
                assert mapping[mine] == theirs
    assert len(mapping) == len(accept)


def _assert_classes(byte_class: np.ndarray, table: np.ndarray) -> None:
    columns = [tuple(table[:, c].tolist()) for c in range(table.shape[1])]
    assert len(set(columns)) == len(columns)  # classes move differently
    assert sorted(set(byte_class.tolist())) == list(range(table.shape[1]))
    lowest = [int(np.flatnonzero(byte_class == c)[0]) for c in range(table.shape[1])]
    assert lowest == sorted(lowest)


@settings(max_examples=300, deadline=None)
@given(expressions)
@example(Alt(tuple(Lit(f'"v{i}"') for i in range(2000))))  # an enum: 2,000 edges on one byte
@example(Lit(""))
@example(Rep(Chars(CharSet.of(((0, 0x10FFFF),))), 0, None))
def test_the_native_subset_construction_is_the_oracles(expr: Expr) -> None:
    oracle, native = _both(expr)
    assert oracle is not None and native is not None
    _assert_same(oracle, native)
    _assert_classes(native[0], native[1])


@settings(max_examples=100, deadline=None)
@given(expressions, st.integers(1, 12))
def test_the_limit_is_the_oracles(expr: Expr, limit: int) -> None:
    oracle, native = _both(expr, limit)
    assert (oracle is None) == (native is None)
    if oracle is not None:
        _assert_same(oracle, native)
