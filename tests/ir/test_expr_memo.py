"""What expression nodes and rules remember: a node's hash (the same value as computed afresh,
never pickled) and a rule's references and repetitions (the same as a walk of its body)."""

from __future__ import annotations

import copy
import pickle

from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.ir.charset import CharSet
from structspec.ir.expr import Alt, Chars, Expr, Lit, Ref, Rep, Rule, Seq, TokenRef, walk

leaves = st.one_of(
    st.text("ab\u00e9", max_size=3).map(Lit),
    st.sets(st.sampled_from("xyz"), min_size=1).map(lambda cs: Chars(CharSet.chars("".join(cs)))),
    st.sampled_from("pqr").map(Ref),
    st.integers(0, 3).map(lambda token: TokenRef(token=token)),
)


def _combine(child: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.lists(child, min_size=2, max_size=4).map(lambda items: Seq(tuple(items))),
        st.lists(child, min_size=2, max_size=4).map(lambda items: Alt(tuple(items))),
        st.tuples(child, st.integers(0, 2), st.one_of(st.none(), st.integers(2, 300))).map(lambda t: Rep(*t)),
    )


expressions = st.recursive(leaves, _combine, max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(expressions)
def test_remembered_hash_is_the_computed_one(expr: Expr) -> None:
    fresh = copy.deepcopy(expr)  # built again: nothing remembered yet
    assert "_hash" not in getattr(fresh, "__dict__", {})
    first = hash(expr)
    assert hash(expr) == first == hash(fresh) and expr == fresh
    again = pickle.loads(pickle.dumps(expr))
    assert "_hash" not in getattr(again, "__dict__", {})  # string hashes differ between processes
    assert again == expr and hash(again) == first
    assert {expr: 1}[fresh] == 1


@settings(max_examples=200, deadline=None)
@given(expressions)
def test_rule_references_and_repetitions_are_its_walk(expr: Expr) -> None:
    rule = Rule("r", expr)
    nodes = walk(expr)
    assert rule.refs == tuple(n for n in nodes if isinstance(n, Ref))
    assert rule.reps == tuple(n for n in nodes if isinstance(n, Rep))
    assert rule.refs is rule.refs  # found once
    assert rule == Rule("r", copy.deepcopy(expr)) and hash(rule) == hash(Rule("r", expr))
    assert pickle.loads(pickle.dumps(rule)).refs == rule.refs
