"""Deeply nested GBNF: E108 with line and column from the parser and the linter, never a
RecursionError, and everything up to the limit compiles and prints back."""

from __future__ import annotations

import pytest

from structspec import Grammar, GrammarError
from structspec.budget import MAX_GBNF_NESTING
from structspec.grammar.lint import lint_source

N = MAX_GBNF_NESTING


@pytest.mark.parametrize(
    ("source", "column", "fragment"),
    [
        ("root ::= " + "(" * 5000 + '"a"' + ")" * 5000, 10 + N, "parentheses nest deeper"),
        ('root ::= "x"\n' + "other ::= " + "(" * (N + 1) + '"a"' + ")" * (N + 1), 11 + N, "parentheses nest deeper"),
        ('root ::= "a"' + "?" * 5000, 10, "expression nests deeper"),
        # two levels per group (a choice, then a sequence): the sequence holding 129 starts at "y"
        ("root ::= " + '("x" | "y" ' * (N // 2 + 1) + '"a"' + ")" * (N // 2 + 1), 17, "expression nests deeper"),
    ],
)
def test_too_deep_is_e108_with_a_position(source: str, column: int, fragment: str) -> None:
    line = source.count("\n") + 1
    with pytest.raises(GrammarError) as caught:
        Grammar.from_gbnf(source)
    error = caught.value
    assert (error.code, error.line, error.column) == ("E108", line, column) and fragment in error.message
    findings = [d for d in lint_source(source) if d.code == "E108"]
    assert [(d.line, d.column) for d in findings] == [(line, column)]


@pytest.mark.parametrize(
    "source",
    [
        "root ::= " + "(" * N + '"a" "b" | "c"' + ")" * N,
        'root ::= "a"' + "?" * N,
        "root ::= " + '("x" ' * (N - 1) + '"a"' + ")" * (N - 1),
        "root ::= " + '("x" | "y" ' * (N // 3) + '"a"' + ")*" * (N // 3),
    ],
)
def test_nesting_up_to_the_limit_compiles(source: str) -> None:
    grammar = Grammar.from_gbnf(source)
    assert Grammar.from_gbnf(grammar.to_gbnf()).matches("a") == grammar.matches("a")
    assert not [d for d in lint_source(source) if d.code.startswith("E")]
