"""Rule automata are shared across grammars through a process-wide cache: a cached automaton
must be exactly the one a fresh compilation builds, whatever grammar compiled it first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

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
        [rules.byte_next[q] for q in range(n)],
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
        assert rules.byte_next[q] == {b: int(t) for b, t in enumerate(dense) if t >= 0}
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


def test_wide_alternation_refines_once_per_distinct_byte_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2,000-way alternation of literals (an enum) leaves the start state by 2,000 edges on
    the same byte: determinizing groups them by mask, so the pieces are refined once per
    distinct mask leaving a state (about two per value here) rather than once per edge of the
    NFA subset (about six per value: the subsets near the start hold every alternative), which
    made a 48,000-value enum take a minute."""
    calls = []
    refine = compiler._refine

    def counting(pieces, mask, targets):
        calls.append(mask)
        return refine(pieces, mask, targets)

    monkeypatch.setattr(compiler, "_refine", counting)
    alternatives = " | ".join(f'"\\"v{i}\\""' for i in range(2000))
    grammar = Grammar.from_gbnf(f"root ::= {alternatives}")
    assert grammar.matches('"v1999"') and not grammar.matches('"v2000"')
    assert 0 < len(calls) < 3 * 2000


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
