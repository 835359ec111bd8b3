"""Repetitions counted past ``BLOCK_AT`` are compiled over a block rule of about sqrt(count)
copies (``grammar/compiler.py`` ``_blocked``): the language and the masks stay those of the plain
expansion, while the automaton no longer needs one state per count (the masks there:
``tests/masks/test_native.py``)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structspec import Grammar
from structspec.grammar import compiler

ITEMS = ('"ab"', "[a-c]", '("a" | "bc")', "[a-b]{1,2}", '"é"')


def test_a_count_of_100000_compiles_to_few_states_and_means_exactly_that_count() -> None:
    grammar = Grammar.from_gbnf('root ::= "x"{100000}')
    assert grammar.ruleset.n_states < 2000
    assert grammar.matches("x" * 100_000)
    assert not grammar.matches("x" * 99_999)
    assert not grammar.matches("x" * 100_001)
    ranged = Grammar.from_gbnf('root ::= [a-c]{5000,100000} "."')
    for count, ok in ((4999, False), (5000, True), (77_777, True), (100_000, True), (100_001, False)):
        assert ranged.matches("abc"[count % 3] * count + ".") is ok, count


def _compiled_with(gbnf: str, block_at: int) -> Grammar:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiler, "BLOCK_AT", block_at)
        return Grammar.from_gbnf(gbnf)


UNITS = {'"ab"': ["ab", "a"], "[a-c]": ["a", "b", "c"], '("a" | "bc")': ["a", "bc", "b"], "[a-b]{1,2}": ["a", "ab"],
         '"é"': ["é", "\xc3"]}


@settings(max_examples=60, deadline=None)
@given(item=st.sampled_from(ITEMS), low=st.integers(0, 14), span=st.none() | st.integers(0, 14),
       seed=st.integers(0, 2**16))
def test_blocked_repetition_has_the_language_of_the_plain_one(item: str, low: int, span: int | None,
                                                              seed: int) -> None:
    high = None if span is None else low + span
    count = f"{{{low},}}" if high is None else f"{{{low},{high}}}"
    gbnf = f"root ::= ({item}){count} \".\""
    blocked, plain = _compiled_with(gbnf, 3), _compiled_with(gbnf, 1 << 20)
    assert any("~" in name for name in blocked.ruleset.rule_names) == (max(low, high or 0) > 3)
    assert not any("~" in name for name in plain.ruleset.rule_names)
    rng = random.Random(seed)
    for n in range((high if high is not None else low) + 4):
        for _ in range(3):
            text = "".join(rng.choice(UNITS[item]) for _ in range(n)) + rng.choice([".", "", ".."])
            assert blocked.matches(text) is plain.matches(text), (gbnf, text)
