"""The compiler's rule automata built in C (``ir/_byte_automata.pyx``) against an oracle: the
generic NFA construction and subset construction of ``ir/nfa.py`` over a byte alphabet written
here, its labels split by brute force (one byte at a time). The same automaton up to the
numbering of states (acceptance, byte moves, rule calls and token references), the same
limits, and byte classes that are exactly the distinct columns of moves, numbered by lowest
byte."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from structspec.ir._byte_automata import AutomatonLimit, cut_per_state, rule_automaton

from structspec.grammar.utf8 import utf8_sequences
from structspec.ir.charset import CharSet
from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Ref, Rep, Rule, Seq, TokenRef
from structspec.ir.nfa import NFA, Determinized, determinize

ALPHABET = "ab\u00e9\u0800\U0001f600"  # one to four UTF-8 bytes
CALLEES = ("x", "y", "z")
TABLE = {"x": Rule("x", Lit("x")), "y": Rule("y", Alt((Lit("y"), Ref("x")))), "z": Rule("z", Lit("z"))}
INLINE = {"x", "y"}  # built in place; z is called

leaves = st.one_of(
    st.text(ALPHABET, max_size=3).map(Lit),
    st.sets(st.sampled_from(ALPHABET), min_size=1).map(lambda cs: Chars(CharSet.chars("".join(cs)))),
    st.tuples(st.lists(st.tuples(st.integers(0, 0x300), st.integers(0, 8)), max_size=3), st.booleans()).map(
        lambda c: CharClass(tuple((lo, lo + n) for lo, n in c[0]), c[1])
    ),
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


Sequences = Callable[[tuple[tuple[int, int], ...]], tuple[tuple[tuple[int, int], ...], ...]]


def _one_byte(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Characters 0-255 as the byte of the same value: ranges up to the last byte, which UTF-8
    never uses."""
    return tuple(((lo, hi),) for lo, hi in ranges)


class _Bytes:
    """The oracle's alphabet: a label is a byte range ``(lo, hi)``."""

    def __init__(self, sequences: Sequences) -> None:
        self.sequences = sequences

    def literal(self, text: str) -> list[tuple[int, int]]:
        return [(b, b) for b in text.encode("utf-8")]

    def chars(self, ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[tuple[int, int], ...], ...]:
        return self.sequences(ranges)


class _OracleNFA(NFA[tuple[int, int]]):
    def __init__(self, limit: int, sequences: Sequences) -> None:
        super().__init__(_Bytes(sequences), limit, lambda: AutomatonLimit("nfa"))

    def leaf(self, expr: Expr, start: int, end: int) -> None:
        if isinstance(expr, Ref) and expr.name in INLINE:
            self.build(TABLE[expr.name].body, start, end)
        elif isinstance(expr, Ref):
            self.symbol(start, expr.name, end)
        elif isinstance(expr, TokenRef):
            self.symbol(start, expr, end)
        else:
            super().leaf(expr, start, end)


def _by_byte(edges: Sequence[tuple[tuple[int, int], int]]) -> list[tuple[frozenset[int], Collection[int]]]:
    """The oracle's split: every byte on its own, bytes with equal targets grouped."""
    groups: dict[frozenset[int], set[int]] = {}
    for b in range(256):
        targets = frozenset(t for (lo, hi), t in edges if lo <= b <= hi)
        if targets:
            groups.setdefault(targets, set()).add(b)
    return [(frozenset(members), targets) for targets, members in groups.items()]


def _outcome(build):  # the automaton, or the stage whose limit it passed
    try:
        return build()
    except AutomatonLimit as exc:
        return exc.stage


def _both(
    expr: Expr, nfa_limit: int = 400_000, dfa_limit: int = 100_000, sequences: Sequences = utf8_sequences
) -> tuple:
    def oracle() -> Determinized:
        nfa = _OracleNFA(nfa_limit, sequences)
        start, end = nfa.state(), nfa.state()
        nfa.build(expr, start, end)
        initial = nfa.closure([start])
        return determinize(nfa, _by_byte, initial, lambda s: end in s, dfa_limit, lambda: AutomatonLimit("dfa"))

    native = _outcome(lambda: rule_automaton(expr, TABLE, INLINE, sequences, nfa_limit, dfa_limit))
    return _outcome(oracle), native


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
def test_the_native_automaton_is_the_oracles(expr: Expr) -> None:
    oracle, native = _both(expr)
    assert isinstance(oracle, Determinized) and isinstance(native, tuple)
    _assert_same(oracle, native)
    _assert_classes(native[0], native[1])


byte_expressions = st.recursive(
    st.tuples(st.integers(0, 255), st.integers(0, 255)).map(
        lambda r: Chars(CharSet.of(((min(r), max(r)),)))
    ) | st.sampled_from(CALLEES).map(Ref),
    _combine,
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(byte_expressions)
@example(Rep(Chars(CharSet.of(((0, 255),))), 0, None))
@example(Seq((Alt((Chars(CharSet.of(((250, 255),))), Chars(CharSet.of(((255, 255),))))), Chars(CharSet.of(((0, 0),))))))
def test_byte_ranges_up_to_the_last_byte_are_the_oracles(expr: Expr) -> None:
    """Ranges ending at byte 255 (no edge end is marked past it) and starting at byte 0."""
    oracle, native = _both(expr, sequences=_one_byte)
    assert isinstance(oracle, Determinized) and isinstance(native, tuple)
    _assert_same(oracle, native)
    _assert_classes(native[0], native[1])


@settings(max_examples=150, deadline=None)
@given(expressions, st.integers(2, 40), st.integers(1, 12))
def test_the_limits_are_the_oracles(expr: Expr, nfa_limit: int, dfa_limit: int) -> None:
    oracle, native = _both(expr, nfa_limit, dfa_limit)
    if isinstance(oracle, str):
        assert native == oracle
    else:
        _assert_same(oracle, native)


def test_a_deep_chain_of_inlined_rules_builds_without_recursion() -> None:
    """The work list keeps no C or Python frame per level: 20,000 nested groups build."""
    expr: Expr = Lit("a")
    for _ in range(20_000):
        expr = Seq((expr, Lit("")))
    _, moves, _, _, accept = rule_automaton(expr, {}, set(), utf8_sequences, 400_000, 100)
    assert len(accept) == 2 and accept[1] and moves[0].max() == 1


def test_an_unknown_node_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="cannot build an automaton"):
        rule_automaton(Rule("r", Lit("a")), {}, set(), utf8_sequences, 100, 100)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 8), st.integers(0, 3), st.integers(0, 3)), max_size=12), st.booleans())
def test_cutting_pairs_per_state_is_grouping_them_or_a_value_error(pairs, share: bool) -> None:
    """``cut_per_state`` (sorted states) gives each state the tuple of its pairs in order, and
    refuses a state outside the list rather than writing past it."""
    pairs.sort(key=lambda pair: pair[0])
    at, first, second = (np.array([pair[i] for pair in pairs], dtype=np.int64) for i in range(3))
    out: list[tuple] = [()] * 6
    if any(not 0 <= state < 6 for state, _, _ in pairs):
        with pytest.raises(ValueError, match="outside the 6 states"):
            cut_per_state(out, at, first, second, share)
        return
    cut_per_state(out, at, first, second, share)
    assert out == [tuple((a, b) for state, a, b in pairs if state == q) for q in range(6)]
    with pytest.raises(ValueError, match="pair ends"):
        cut_per_state([()] * 6, at, first[:-1] if len(first) else np.zeros(1, dtype=np.int64), second, share)
