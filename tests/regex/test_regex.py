"""Regex front end, character sets and automata, checked against Python's ``re`` and brute force."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structspec.grammar import Grammar
from structspec.ir import automaton as regex_automaton
from structspec.ir.automaton import (
    DFA,
    accepts,
    complement,
    dfa_from_regex,
    dfa_from_strings,
    dfa_length,
    difference,
    intersect,
    length_bounds,
    minimize,
    union,
)
from structspec.ir.charset import ANY, CharSet
from structspec.regex.convert import RegexError, pattern_language, regex_to_gbnf
from structspec.regex.parse import parse_regex

# Patterns whose ECMAScript and Python readings agree on the test alphabet (no newlines).
PATTERNS = [
    "^[a-c]+$",
    "abc",
    "^(ab|c)*$",
    "a.c",
    "^a{2,3}b?$",
    "^\\d{1,3}(-\\d+)?$",
    "[^a]b",
    "^$",
    "x|^y",
    "(^a|b$)",
    "^(a|b)c{0,2}$|^c$",
    "\\w\\s",
    "^(?:[ab]{2})+$",
    "a+?b*?",
    "^\\x61\\u0062$",
    "[-a]b[c-]",
]
ALPHABET = "abcxy12- _"
SAMPLES = ["".join(p) for n in range(5) for p in itertools.product("abc1- ", repeat=n)]


def _grammar(pattern: str) -> Grammar:
    return Grammar.from_gbnf(regex_to_gbnf(pattern))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_full_match_grammar_agrees_with_python(pattern: str) -> None:
    grammar = _grammar(pattern)
    for text in SAMPLES:
        assert grammar.matches(text) == bool(re.fullmatch(pattern, text)), text


@pytest.mark.parametrize("pattern", PATTERNS)
def test_search_language_agrees_with_python(pattern: str) -> None:
    dfa = pattern_language(pattern).dfa()
    for text in SAMPLES:
        assert accepts(dfa, text) == bool(re.search(pattern, text)), text


@pytest.mark.parametrize("pattern", [p for p in PATTERNS if pattern_language(p).expr is not None])
def test_anchor_free_expression_equals_automaton(pattern: str) -> None:
    language = pattern_language(pattern)
    direct = dfa_from_regex(language.expr, search=False)
    for text in SAMPLES:
        assert accepts(direct, text) == accepts(language.dfa(), text), text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=ALPHABET, max_size=8))
def test_grammar_never_accepts_what_python_rejects(text: str) -> None:
    for pattern in PATTERNS[:6]:
        if _cached(pattern).matches(text):
            assert re.fullmatch(pattern, text)


_GRAMMARS: dict[str, Grammar] = {}


def _cached(pattern: str) -> Grammar:
    if pattern not in _GRAMMARS:
        _GRAMMARS[pattern] = _grammar(pattern)
    return _GRAMMARS[pattern]


def test_unicode_classes_are_the_intersection_of_both_engines() -> None:
    digits = _grammar("^\\d$")
    assert digits.matches("7")
    assert not digits.matches("\u0663")  # Arabic-Indic three: \d in Python, not in ECMAScript
    non_word = _grammar("^\\W$")
    assert non_word.matches("!")
    assert not non_word.matches("é")  # \W in ECMAScript, but a word character for Python
    space = _grammar("^\\s$")
    assert space.matches(" ")
    assert not space.matches("\ufeff")  # ECMAScript space, not Python's
    dot = _grammar("^.$")
    assert not dot.matches("\r") and not dot.matches("\u2028")


@pytest.mark.parametrize(
    ("pattern", "position"),
    [("a(?=b)", 1), ("(a)\\1", 3), ("a\\bc", 1), ("x(?<!y)", 1), ("[]a]", 0), ("a{,3}", 1)],
)
def test_unsupported_syntax_names_the_position(pattern: str, position: int) -> None:
    with pytest.raises(RegexError) as info:
        regex_to_gbnf(pattern)
    assert info.value.position == position
    assert str(position) in str(info.value)


def test_pattern_matching_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="matches nothing"):
        regex_to_gbnf("[^\\s\\S]")


def test_empty_pattern_matches_only_the_empty_string() -> None:
    grammar = _grammar("")
    assert grammar.matches("") and not grammar.matches("a")


# -- character sets -------------------------------------------------------------------------

ranges_st = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=5).map(
    lambda pairs: CharSet.of((min(a, b), max(a, b)) for a, b in pairs)
)


@given(ranges_st, ranges_st)
def test_charset_algebra_matches_python_sets(a: CharSet, b: CharSet) -> None:
    def members(cs: CharSet) -> set[int]:
        return {c for c in range(45) if c in cs}

    assert members(a | b) == members(a) | members(b)
    assert members(a & b) == members(a) & members(b)
    assert members(a - b) == members(a) - members(b)
    assert members(a.complement()) == set(range(45)) - members(a)


def test_charset_excludes_surrogates() -> None:
    assert 0xD800 not in ANY and 0xDFFF not in ANY and 0xE000 in ANY
    assert not CharSet.of([(0xD800, 0xDFFF)])


# -- automata -------------------------------------------------------------------------------

WORDS = ["".join(p) for n in range(4) for p in itertools.product("ab", repeat=n)]


def _language(expr: str) -> set[str]:
    return {w for w in WORDS if re.fullmatch(expr, w)}


@pytest.mark.parametrize(("left", "right"), [("a*", "(ab)*"), ("a.*", ".*b"), ("(a|b)b", "ab?")])
def test_dfa_operations_match_set_operations(left: str, right: str) -> None:
    a = dfa_from_regex(parse_regex(left), search=False)
    b = dfa_from_regex(parse_regex(right), search=False)
    la, lb = _language(left), _language(right)
    words = set(WORDS)
    cases = {
        "intersect": (intersect(a, b), la & lb),
        "union": (union(a, b), la | lb),
        "difference": (difference(a, b), la - lb),
        "complement": (complement(a), words - la),
    }
    for name, (dfa, expected) in cases.items():
        assert {w for w in WORDS if accepts(dfa, w)} == expected, name


def test_trie_and_length_automata() -> None:
    names = dfa_from_strings(["ab", "abc", "b"])
    assert [w for w in ["", "a", "ab", "abc", "b", "ba"] if accepts(names, w)] == ["ab", "abc", "b"]
    other = complement(names)
    assert accepts(other, "a") and not accepts(other, "abc")
    assert length_bounds(dfa_length(2, 5)) == (2, 5)
    assert length_bounds(dfa_length(3, None)) == (3, None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(PATTERNS), min_size=2, max_size=4),
    st.sampled_from(["intersect", "union", "difference"]),
)
def test_vectorized_minimization_equals_the_scalar_one(patterns: list[str], operation: str) -> None:
    """Minimisation refines large tables with numpy and small ones in Python: both must build
    the same minimal automaton, state numbering included (converted grammars are reproducible)."""
    dfas = [dfa_from_regex(parse_regex(p), search=True) for p in patterns]
    combine = {"intersect": intersect, "union": union, "difference": difference}[operation]
    joined = dfas[0]
    for dfa in dfas[1:]:
        joined = combine(joined, dfa)
    # Two copies of the minimal automaton, each moving into the other: same language, twice the states.
    n = len(joined.accept)
    doubled = DFA(
        tuple(tuple((cs, (t + n) % (2 * n) if q < n else t) for cs, t in joined.edges[q % n]) for q in range(2 * n)),
        joined.accept * 2,
    )
    saved = regex_automaton.VECTORIZED_MOORE_CELLS
    try:
        regex_automaton.VECTORIZED_MOORE_CELLS = 0
        vectorized = minimize(doubled)
        regex_automaton.VECTORIZED_MOORE_CELLS = 10**9
        scalar = minimize(doubled)
    finally:
        regex_automaton.VECTORIZED_MOORE_CELLS = saved
    assert vectorized == scalar
    assert len(vectorized.accept) == n
    assert [w for w in SAMPLES if accepts(vectorized, w)] == [w for w in SAMPLES if accepts(joined, w)]
