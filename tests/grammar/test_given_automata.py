"""Rules given as byte automata: GBNF names them, ``Grammar.from_gbnf(text, automata=...)``
defines them, the compiler takes them as they are, the rule checks see a stand-in of the
right nullability, and printing says what they are."""

from __future__ import annotations

import json
import pickle

import pytest

from structspec import Grammar, GrammarError
from structspec.ir.spans import spans, spell
from structspec.ir.suffix import SuffixAutomaton
from structspec.jsonschema.encoding import json_spelling

TEXT = 'Ada "the Countess" Lovelace\n1815–1852 ✓'


def _spans(text: str = TEXT, high: int | None = None):
    from structspec.ir.spans import restrict_lengths

    chars = spans(SuffixAutomaton(text), lambda c: json_spelling(c) is not None)
    if high is not None:
        chars = restrict_lengths(chars, 1, high, 10**6)
    return spell(chars, json_spelling, "a span of the test text", 10**6)


def _quoted(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def test_a_given_rule_is_called_like_any_rule() -> None:
    g = Grammar.from_gbnf('root ::= "[" span "|" span "]"\nspan ::= "\\"" text "\\""', automata={"text": _spans()})
    assert g.matches('["Ada"|"Lovelace\\n1815–1852 ✓"]')
    assert g.matches('[""|"\\"the Countess\\""]')
    assert not g.matches('["Ada"|"Lovelace 1815"]')
    assert not g.matches('["Ada "|"✓ "]')
    state = g.initial_state().advance('["Ada "')
    assert state is not None and state.allowed_bytes() == frozenset(b'|')
    state = g.initial_state().advance('["1815')
    assert state.allowed_bytes() == frozenset({0xE2, ord('"')})  # the en dash's first byte, or the end


def test_a_given_rule_can_be_the_root() -> None:
    g = Grammar.from_gbnf("", root="text", automata={"text": _spans(high=3)})
    assert g.matches("Ada") and g.matches("✓") and not g.matches("") and not g.matches("Ada ")


def test_printing_names_the_given_rule_and_parses_back_with_it() -> None:
    automaton = _spans()
    g = Grammar.from_gbnf('root ::= "<" text ">"', automata={"text": automaton})
    printed = g.to_gbnf()
    assert printed.startswith('root ::= "<" text ">"\n')
    assert "# text ::= (given as a deterministic byte automaton of" in printed
    assert "a span of the test text" in printed
    with pytest.raises(GrammarError) as info:
        Grammar.from_gbnf(printed)
    assert info.value.code == "E101" and "'text'" in info.value.message
    again = Grammar.from_gbnf(printed, automata=g.automata)
    for probe in ("<Ada>", "<>", "<Ada!>", "<Lovelace\\n18>"):
        assert again.matches(probe) == g.matches(probe)


def test_errors_name_what_is_wrong() -> None:
    with pytest.raises(GrammarError) as info:
        Grammar.from_gbnf('root ::= text\ntext ::= "x"', automata={"text": _spans()})
    assert info.value.code == "E103" and info.value.line == 2
    with pytest.raises(ValueError, match="not a rule name"):
        Grammar.from_gbnf("root ::= x", automata={"a b": _spans()})
    with pytest.raises(TypeError, match="ByteAutomaton"):
        Grammar.from_gbnf("root ::= x", automata={"x": "abc"})  # type: ignore[dict-item]


def test_the_stand_in_is_nullable_exactly_when_the_automaton_accepts_empty() -> None:
    # An empty-able given rule in front of a recursion is left recursion; a non-empty one is not.
    with pytest.raises(GrammarError) as info:
        Grammar.from_gbnf('root ::= text root | "."', automata={"text": _spans()})
    assert info.value.code == "E104"
    g = Grammar.from_gbnf('root ::= text root | "."', automata={"text": _spans(high=2)})
    assert g.matches("Ada.") and g.matches(".") and not g.matches("Adz.")


def test_a_pickled_grammar_keeps_its_given_automata() -> None:
    """The server compiles grammars in child processes and pickles them back."""
    g = Grammar.from_gbnf('root ::= "\\"" text "\\""', automata={"text": _spans()})
    copy = pickle.loads(pickle.dumps(g))
    assert set(copy.automata) == {"text"}
    assert copy.to_gbnf() == g.to_gbnf()
    assert copy.matches('"the Countess"') and not copy.matches('"the Count ess"')
