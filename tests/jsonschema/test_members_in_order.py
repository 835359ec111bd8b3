"""``_in_order`` (``jsonschema/objects.py``): an object's members in the common shape (declared
properties in order, no witness, no ``maxProperties``, ``minProperties`` at most 1), written
directly, accept exactly what the general member automaton (``_members``) accepts, both as
automata, and what the definition says (brute force over every short member list), with and
without the chain kept apart for members after entries alone (``SPLIT_CHAIN``) and with its
runs cut into rules every few levels; and wide objects stay within the parser's nesting limit."""

from __future__ import annotations

import itertools
import json
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.grammar import Grammar
from structspec.ir.automaton import DFA, accepts, complement, dfa_from_regex, intersect
from structspec.ir.expr import Lit, MaybeExpr, Ref, substitute
from structspec.jsonschema import objects
from structspec.jsonschema.builder import GrammarBuilder
from structspec.jsonschema.objects import _in_order, _members

SEP = Lit(",")
EXTRA = "x"
Entries = list[tuple[MaybeExpr, bool, MaybeExpr]]


@st.composite
def shapes(draw: st.DrawFn) -> tuple[Entries, bool, int, int, int]:
    """Entries ``a``, ``b``... (optional, required, or without a value: never written), whether
    extra members ``x`` may appear, ``minProperties``, the entries past which the chain after
    entries alone is kept apart, and the levels of it written in place before a rule."""
    entries: Entries = []
    for j in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["optional", "required", "no value"]))
        member = None if kind == "no value" else Lit("abcde"[j])
        entries.append((member, kind == "required", member))
    split = draw(st.sampled_from([0, 2, objects.SPLIT_CHAIN]))
    return entries, draw(st.booleans()), draw(st.integers(0, 1)), split, draw(st.sampled_from([2, 3, 24]))


def language(build: object, entries: Entries, extra: bool, min_p: int) -> DFA:
    """The members' language, their rules written in place (they do not recur)."""
    builder = GrammarBuilder()
    args = (builder, entries, Lit(EXTRA) if extra else None)
    if build is _in_order:
        expr = _in_order(*args, min_p, SEP, "obj")
    else:
        expr = _members(*args, None, False, min_p, None, SEP, "obj", None)

    def inline(ref: Ref) -> MaybeExpr:
        return substitute(builder.rules[ref.name], inline)

    return dfa_from_regex(substitute(expr, inline) if expr is not None else None, search=False)


def same(a: DFA, b: DFA) -> bool:
    return intersect(a, complement(b)).empty and intersect(b, complement(a)).empty


def allowed(entries: Entries, extra: bool, min_p: int, written: tuple[str, ...]) -> bool:
    """The definition: declared members in order, each at most once, the required ones present,
    extra members anywhere when allowed, at least ``min_p`` members."""
    declared = [m.text for m, _, _ in entries if m is not None]  # type: ignore[union-attr]
    order = [declared.index(w) for w in written if w != EXTRA]
    if (any(w == EXTRA for w in written) and not extra) or len(written) < min_p:
        return False
    needed = {m.text for m, needed, _ in entries if needed}  # type: ignore[union-attr]
    return order == sorted(set(order)) and needed <= set(written)


@settings(max_examples=300, deadline=None)
@given(shapes())
def test_in_order_members_match_the_member_automaton(shape: tuple[Entries, bool, int, int, int]) -> None:
    entries, extra, min_p, split, depth = shape
    with patch.object(objects, "SPLIT_CHAIN", split), patch.object(objects, "MAX_INLINE_DEPTH", depth):
        direct = language(_in_order, entries, extra, min_p)
    assert same(direct, language(_members, entries, extra, min_p))
    tokens = [m.text for m, _, _ in entries if m is not None] + [EXTRA]  # type: ignore[union-attr]
    for size in range(len(tokens) + 1):
        for written in itertools.product(tokens, repeat=size):
            assert accepts(direct, ",".join(written)) == allowed(entries, extra, min_p, written), written
    if not direct.empty:
        assert not accepts(direct, "," + ",".join(tokens))  # no leading separator


@pytest.mark.parametrize(
    ("schema", "direct"),
    [
        ({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["b"]}, True),
        ({"type": "object", "properties": {"a": {}}, "minProperties": 1}, True),
        ({"type": "object", "properties": {"a": {}, "b": {}}, "maxProperties": 1}, False),
        ({"type": "object", "properties": {"a": {}}, "minProperties": 2}, False),
    ],
)
def test_the_common_shape_takes_the_direct_path(schema: dict, direct: bool) -> None:
    with patch.object(objects, "_members", side_effect=AssertionError("the member automaton")) as general:
        try:
            Grammar.from_json_schema(schema)
        except AssertionError:
            assert not direct
    assert general.called != direct


@pytest.mark.parametrize("required", [[], ["p0"], ["p100"], ["p199"], ["p0", "p199"]])
@pytest.mark.parametrize("extra", [True, False])
def test_wide_objects_stay_within_the_nesting_limit(required: list[str], extra: bool) -> None:
    """200 declared properties (the required ones first is a second order, with a long run
    after them): the grammar compiles, and reads what the schema says."""
    properties = {f"p{i}": {"type": "integer"} for i in range(200)}
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": extra}
    grammar = Grammar.from_json_schema(schema)
    written = dict.fromkeys(["p0", "p7", "p100", "p150", "p199"], 1)
    assert grammar.matches(json.dumps(written, separators=(",", ":")))
    assert grammar.matches(json.dumps({"x": 1, **written}, separators=(",", ":"))) == extra
    assert not grammar.matches(json.dumps({"p7": 1, "p0": 1, "p199": 1}, separators=(",", ":")))
