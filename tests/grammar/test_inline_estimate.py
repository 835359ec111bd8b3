"""``inline_estimate`` (``ir/_byte_automata.pyx``), the inlining choice's size estimate, counts
what its definition says: checked against that definition written out in Python on random
expressions (classes as written and as sets, inlined and called rules, tokens, repetitions
whose copies multiply past 64 bits, which saturate)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from structspec.ir._byte_automata import SATURATED, inline_estimate

from structspec.grammar.utf8 import utf8_sequences
from structspec.ir.charset import CharSet
from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Ref, Rep, Seq, TokenRef

ESTIMATES = {"small": 7, "big": 390}

leaves = st.one_of(
    st.text(max_size=4).map(Lit),
    st.sampled_from([Ref("small"), Ref("big"), Ref("called"), TokenRef(5), TokenRef("<x>", negated=True)]),
    st.lists(st.tuples(st.integers(0, 0x10FFFF), st.integers(0, 3000)), min_size=1, max_size=3).flatmap(
        lambda pairs: st.sampled_from([
            CharClass(tuple((lo, min(lo + span, 0x10FFFF)) for lo, span in pairs), negated=False),
            CharClass(tuple((lo, min(lo + span, 0x10FFFF)) for lo, span in pairs), negated=True),
            Chars(CharSet.of([(lo, min(lo + span, 0x10FFFF)) for lo, span in pairs])),
        ])
    ),
)
expressions = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: Seq(tuple(items))),
        st.lists(inner, max_size=3).map(lambda items: Alt(tuple(items))),
        st.tuples(inner, st.integers(0, 10**7), st.one_of(st.none(), st.integers(0, 10**7))).map(
            lambda t: Rep(t[0], t[1], t[2])),
    ),
    max_leaves=25,
)


def defined(node: Expr, inline: set[str]) -> int:
    if isinstance(node, (Seq, Alt)):
        return 2 + sum(defined(child, inline) for child in node.items)
    if isinstance(node, Ref):
        return ESTIMATES[node.name] if node.name in inline else 1
    if isinstance(node, Lit):
        return len(node.text.encode("utf-8")) + 1
    if isinstance(node, (CharClass, Chars)):
        ranges = node.code_points() if isinstance(node, CharClass) else node.charset.ranges
        return sum(len(seq) for seq in utf8_sequences(ranges)) + 1
    if isinstance(node, TokenRef):
        return 1
    assert isinstance(node, Rep)
    copies = max(node.low, 1) if node.high is None else max(node.high, 1)
    return defined(node.item, inline) * copies + 2


@settings(max_examples=400, deadline=None)
@given(expressions, st.sets(st.sampled_from(sorted(ESTIMATES))))
def test_the_estimate_is_its_definition(expr: Expr, inline: set[str]) -> None:
    assert inline_estimate(expr, inline, dict(ESTIMATES), utf8_sequences) == min(defined(expr, inline), SATURATED)
