"""Rule automata are shared across grammars through a process-wide cache: a cached automaton
must be exactly the one a fresh compilation builds, whatever grammar compiled it first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structspec import Grammar
from structspec.grammar import compiler
from structspec.grammar.ruleset import RuleSet

GRAMMARS = sorted((Path(__file__).resolve().parents[2] / "grammars").glob("*.gbnf"))


def layout(rules: RuleSet) -> tuple:
    n = rules.n_states
    return (
        rules.rule_names,
        rules.rule_start,
        rules.root_start,
        rules.refs,
        rules.token_edges,
        rules.final,
        [rules.byte_moves.of(q) for q in range(n)],
        rules.class_table()[:, rules.byte_class].tolist(),  # moves per byte, whatever the class numbering
    )


def fresh(text: str) -> RuleSet:
    compiler._DFA_CACHE.clear()
    return Grammar.from_gbnf(text).ruleset


@pytest.mark.parametrize("path", GRAMMARS, ids=lambda p: p.stem)
def test_warm_cache_builds_the_same_rule_set(path: Path) -> None:
    for other in GRAMMARS:  # warm the cache with every other grammar first
        Grammar.from_gbnf(other.read_text(encoding="utf-8"))
    text = path.read_text(encoding="utf-8")
    warm = Grammar.from_gbnf(text).ruleset
    assert layout(warm) == layout(fresh(text))


def test_same_rule_text_with_different_inlined_callees_is_not_shared() -> None:
    first = Grammar.from_gbnf('root ::= item item\nitem ::= "a"\n')
    second = Grammar.from_gbnf('root ::= item item\nitem ::= "b"\n')
    assert first.matches("aa") and not first.matches("bb")
    assert second.matches("bb") and not second.matches("aa")


def test_cache_stays_within_its_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = 8 * compiler.DFA_KEY_BYTES
    monkeypatch.setattr(compiler._DFA_CACHE, "max_bytes", budget)
    compiler._DFA_CACHE.clear()  # else earlier tests may have cached every automaton: no put, no eviction
    for path in GRAMMARS:
        Grammar.from_gbnf(path.read_text(encoding="utf-8"))
        cache = compiler._DFA_CACHE
        held = sum(compiler._dfa_bytes(None, d) for d in cache.values())
        assert held == cache.nbytes
        assert held <= budget or len(cache) == 1


def test_byte_moves_match_the_class_table() -> None:
    rules = Grammar.from_gbnf(GRAMMARS[0].read_text(encoding="utf-8")).ruleset
    table = rules.class_table()
    for q in range(rules.n_states):
        dense = table[q][rules.byte_class]
        expected = {b: int(t) for b, t in enumerate(dense) if t >= 0}
        assert rules.byte_moves.of(q) == expected
    assert np.all(table < rules.n_states)


@pytest.mark.parametrize("path", GRAMMARS, ids=lambda p: p.stem)
def test_byte_classes_are_the_coarsest_partition(path: Path) -> None:
    """Bytes in one class move every state alike, and any two classes are told apart by some
    state (the classes are the common refinement of the rules' own, nothing coarser or finer)."""
    rules = Grammar.from_gbnf(path.read_text(encoding="utf-8")).ruleset
    table = rules.class_table()
    assert sorted(set(rules.byte_class.tolist())) == list(range(table.shape[1]))
    distinct_columns = {tuple(table[:, c].tolist()) for c in range(table.shape[1])}
    assert len(distinct_columns) == table.shape[1]
    lowest = [int(np.flatnonzero(rules.byte_class == c)[0]) for c in range(table.shape[1])]
    assert lowest == sorted(lowest)


def test_cached_automata_hold_no_syntax_nodes_nor_per_state_objects() -> None:
    """Keys are flat tuples of strings and numbers and values arrays: a process-wide cache of
    thousands of rules adds next to nothing for the garbage collector to walk."""
    compiler._DFA_CACHE.clear()
    for path in GRAMMARS:
        Grammar.from_gbnf(path.read_text(encoding="utf-8"))
    atoms = (str, int, bool, type(None))
    for key, dfa in zip(compiler._DFA_CACHE.keys(), compiler._DFA_CACHE.values(), strict=True):
        assert isinstance(key, tuple) and all(isinstance(atom, atoms) for atom in key)
        assert all(isinstance(part, np.ndarray) for part in (dfa.byte_class, dfa.table, dfa.final, dfa.has_bytes))


def test_equal_rules_share_one_cached_automaton_however_their_classes_are_written() -> None:
    compiler._DFA_CACHE.clear()
    Grammar.from_gbnf('root ::= [a-c] "x"')
    Grammar.from_gbnf('root ::= [abc] "x"')
    assert len(compiler._DFA_CACHE) == 1


def test_rules_that_differ_only_in_the_names_they_call_share_one_automaton() -> None:
    """``a`` and ``b`` have one shape (a literal, then a call): one cached automaton serves
    both, and each grammar rule still calls its own callee."""
    compiler._DFA_CACHE.clear()
    text = 'root ::= a "," b\na ::= "x" c\nb ::= "x" d\nc ::= "y" | "{" a "}"\nd ::= "z" | "{" b "}"\n'
    grammar = Grammar.from_gbnf(text)
    assert len(compiler._DFA_CACHE) == 4  # root, a and b, c, d
    assert grammar.matches("xy,xz") and grammar.matches("x{xy},x{x{xz}}")
    assert not grammar.matches("xz,xy") and not grammar.matches("x{xz},xz")
    assert layout(grammar.ruleset) == layout(fresh(text))


def _body(names: list[str]) -> st.SearchStrategy[str]:
    """GBNF bodies over literals, classes and references to ``names``."""
    leaf = st.one_of(
        st.sampled_from(['"a"', '"bc"', "[0-9]", "[^x]", '"\\""']),
        st.sampled_from(names),
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=3).map(" ".join),
            st.lists(inner, min_size=2, max_size=3).map(lambda items: "(" + " | ".join(items) + ")"),
            st.tuples(inner, st.sampled_from(["*", "?", "+", "{2}", "{1,3}"])).map(lambda p: f"({p[0]}){p[1]}"),
        ),
        max_leaves=6,
    )


@st.composite
def _grammars(draw: st.DrawFn) -> list[tuple[str, str]]:
    """Rules ``r0 .. rn``, each referring only to later ones (plus a recursive one), so some
    are inlined and some called."""
    count = draw(st.integers(2, 5))
    rules = []
    for i in range(count):
        later = [f"r{j}" for j in range(i + 1, count)] or ['"z"']
        rules.append((f"r{i}", draw(_body(later))))
    rules.append(("loop", f'"(" (loop | {rules[-1][0]}) ")" | "."'))
    rules[0] = ("r0", f"{rules[0][1]} loop")
    return rules


@settings(max_examples=60, deadline=None)
@given(_grammars(), st.sampled_from(["p", "q-x", "zz"]))
def test_renamed_copies_take_cached_automata_that_equal_fresh_ones(rules: list[tuple[str, str]], prefix: str) -> None:
    """A grammar compiled after another whose rules are the same up to names takes every
    automaton from the cache, renamed; the rule set equals the one a cold cache builds."""
    text = "".join(f"{name} ::= {body}\n" for name, body in [("root", "r0"), *rules])
    renamed = text
    for name, _ in sorted(rules, key=lambda rule: -len(rule[0])):
        renamed = renamed.replace(name, f"{prefix}-{name}")
    compiler._DFA_CACHE.clear()
    Grammar.from_gbnf(text)
    cached = len(compiler._DFA_CACHE)
    warm = Grammar.from_gbnf(renamed).ruleset
    assert len(compiler._DFA_CACHE) == cached  # every automaton came from the cache
    assert layout(warm) == layout(fresh(renamed))


@pytest.mark.parametrize("length", [100, 126, 127, 128, 300, 40_000])
def test_narrow_cached_tables_build_the_same_rule_set_as_wide_ones(
    length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule automata are cached in the narrowest integer type that holds their states (a
    literal of ``length`` bytes has ``length + 1``): the rule set is the one int32 tables give."""
    text = f'root ::= "{"ab" * (length // 2)}" tail\ntail ::= [0-9]+ | "x" root\n'
    narrow = fresh(text)
    for dfa in compiler._DFA_CACHE.values():
        fits = [t for t in (np.int8, np.int16, np.int32) if len(dfa.table) <= np.iinfo(t).max]
        assert dfa.table.dtype == fits[0]
    monkeypatch.setattr(compiler, "_smallest", lambda table: table)
    wide = fresh(text)
    assert {dfa.table.dtype for dfa in compiler._DFA_CACHE.values()} == {np.dtype(np.int32)}
    assert layout(narrow) == layout(wide)


def test_rule_calls_are_relative_and_shared_by_inlined_copies() -> None:
    text = 'root ::= pair "," pair "," pair\npair ::= "(" item ")"\nitem ::= "[" item "]" | "v"\n'
    grammar = Grammar.from_gbnf(text)
    rules = grammar.ruleset
    in_root = [q for q in range(rules.rule_start[1]) if rules.refs[q]]
    assert len(in_root) == 3  # pair inlined three times, each calling item
    assert len({id(rules.refs[q]) for q in in_root}) == 1
    for q in range(rules.n_states):
        for start, step in rules.refs[q]:
            assert start in rules.rule_start and 0 <= q + step < rules.n_states
    assert grammar.matches("([v]),(v),([[v]])") and not grammar.matches("([v]),(v)")
