"""``name_exclusion`` (``jsonschema/strings.py``): the spellings of every name but the declared
ones, built from their trie, accept exactly what the automaton path (the complement of the
names' automaton, emitted by ``emit_json_dfa``) accepts, and what decoding says (brute force
over every short spelling)."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.grammar import Grammar
from structspec.ir.automaton import complement, dfa_from_strings
from structspec.ir.expr import MaybeExpr, Ref
from structspec.jsonschema.builder import GrammarBuilder
from structspec.jsonschema.encoding import free_char
from structspec.jsonschema.strings import MAX_NAME_DEPTH, emit_json_dfa, name_exclusion, plain_names

SPELLINGS = ["a", "b", "~", "é", "\\n", '\\"']  # plain, non-ASCII and escaped characters, spelled canonically


class Host:
    def __init__(self) -> None:
        self.builder = GrammarBuilder()

    def fresh(self, hint: str) -> str:
        return self.builder.fresh(hint)

    def define(self, name: str, expr: MaybeExpr) -> None:
        self.builder.define(name, expr)

    def char_rule(self) -> Ref:
        return self.builder.helper("char", free_char)

    def relax(self, pointer: str, keyword: str, message: str) -> None:
        raise AssertionError(message)


def key_grammar(build: str, names: list[str]) -> Grammar:
    host = Host()
    if build == "trie":
        body = name_exclusion(host, names, "k")
    else:
        body = emit_json_dfa(host, complement(dfa_from_strings(names)), "k")
    host.builder.define("root", body)
    finished = host.builder.finish("root")
    assert finished is not None
    return Grammar.from_gbnf(finished[1])


def spellings(most: int) -> list[str]:
    return ["".join(w) for n in range(most + 1) for w in itertools.product(SPELLINGS, repeat=n)]


@settings(max_examples=150, deadline=None)
@given(names=st.lists(st.text("ab~", max_size=3), min_size=1, max_size=5, unique=True))
def test_the_trie_accepts_what_the_complement_automaton_accepts(names: list[str]) -> None:
    trie, automaton = key_grammar("trie", names), key_grammar("automaton", names)
    for word in spellings(4):
        expected = json.loads(f'"{word}"') not in names
        assert trie.matches(word) == expected, word
        assert automaton.matches(word) == expected, word


def test_long_names_are_cut_into_rules_the_parser_reads_back() -> None:
    long = "ab" * (MAX_NAME_DEPTH + 7)
    names = [long, long[:-3] + "~", "b"]
    host = Host()
    host.builder.define("root", name_exclusion(host, names, "k"))
    finished = host.builder.finish("root")
    assert finished is not None
    rules, text = finished
    assert len(rules) > 3  # the root, the rule for "anything after", its tail, and the cut ones
    grammar = Grammar.from_gbnf(text)
    for name in names:
        assert not grammar.matches(name)
        assert grammar.matches(name + "a")
        assert grammar.matches(name[:-1])
        assert grammar.matches(name[:-1] + "é")
    assert grammar.matches("")


def test_shared_suffixes_are_spelled_once() -> None:
    """Names alike but for their first characters share the rest of their trie, as in the
    minimal automaton: the grammar grows with the names' count, not with count times length."""
    names = [f"{i:03d}" + "s" * 100 for i in range(200)]
    host = Host()
    host.builder.define("root", name_exclusion(host, names, "k"))
    finished = host.builder.finish("root")
    assert finished is not None
    assert len(finished[1]) < 40_000  # each name's own trie path: over 1.5 MB
    grammar = Grammar.from_gbnf(finished[1])
    for name in names[::37]:
        assert not grammar.matches(name)
        assert grammar.matches(name[:-1]) and grammar.matches(name + "s") and grammar.matches(name[:3] + "t")
    assert grammar.matches("200" + "s" * 100)


def test_plain_names_are_those_spelled_as_themselves() -> None:
    assert plain_names(["id", "first name", "a~b/c"])
    assert not plain_names(["id", 'say "hi"'])
    assert not plain_names(["back\\slash"])
    assert not plain_names(["tab\t"])
    assert not plain_names(["café"])

