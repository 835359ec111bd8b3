"""``dfa_from_strings`` merges its trie bottom up: the result is, state for state, what the
general minimization makes of the trie."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.ir.automaton import DFA, accepts, dfa_from_strings, minimize
from structspec.ir.charset import CharSet


def _trie_minimized(strings: list[str]) -> DFA:
    trie: list[dict[str, int]] = [{}]
    accept = [False]
    for s in strings:
        node = 0
        for c in s:
            if c not in trie[node]:
                trie.append({})
                accept.append(False)
                trie[node][c] = len(trie) - 1
            node = trie[node][c]
        accept[node] = True
    edges = tuple(tuple((CharSet.chars(c), t) for c, t in children.items()) for children in trie)
    return minimize(DFA(edges, tuple(accept)))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text("abc\u00e9\"", max_size=5), max_size=8))
def test_same_automaton_as_minimizing_the_trie(strings: list[str]) -> None:
    fast = dfa_from_strings(strings)
    assert fast == _trie_minimized(strings)
    assert fast.minimal or fast.empty
    for text in {*strings, "", "ab", "abc", "b\u00e9"}:
        assert accepts(fast, text) == (text in strings)


def test_nothing_and_the_empty_string() -> None:
    assert dfa_from_strings([]).empty
    assert dfa_from_strings([""]) == DFA(((),), (True,))
    assert dfa_from_strings(iter(["ab", "b"])) == _trie_minimized(["ab", "b"])
