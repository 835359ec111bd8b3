"""``height`` (``ir/expr.py``), counted level by level, is the nesting depth the GBNF parser
counts: checked against the recursive definition on random expressions, empty sequences and
alternatives included; a rule's references, repetitions and size are those of ``walk``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.ir.expr import Alt, Expr, Lit, Ref, Rep, Rule, Seq, height, walk

leaves = st.sampled_from([Lit("a"), Lit(""), Ref("r"), Ref("s")])
expressions = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: Seq(tuple(items))),
        st.lists(inner, max_size=3).map(lambda items: Alt(tuple(items))),
        st.tuples(inner, st.integers(0, 2)).map(lambda pair: Rep(pair[0], pair[1], None)),
    ),
    max_leaves=30,
)


def nesting(expr: Expr) -> int:
    if isinstance(expr, (Seq, Alt)):
        return 1 + max((nesting(item) for item in expr.items), default=0)
    if isinstance(expr, Rep):
        return 1 + nesting(expr.item)
    return 0


@settings(max_examples=400, deadline=None)
@given(expressions)
def test_height_is_the_nesting_depth(expr: Expr) -> None:
    assert height(expr) == nesting(expr)


def test_deep_chains() -> None:
    expr: Expr = Lit("x")
    for depth in range(1, 300):
        expr = Seq((Lit("a"), expr)) if depth % 2 else Rep(expr, 0, None)
    assert height(expr) == 299


@settings(max_examples=300, deadline=None)
@given(expressions)
def test_rule_parts_are_those_of_the_walk(expr: Expr) -> None:
    nodes = walk(expr)
    rule = Rule("r", expr)
    assert rule.refs == tuple(n for n in nodes if type(n) is Ref)
    assert rule.reps == tuple(n for n in nodes if type(n) is Rep)
    assert rule.size == len(nodes)
