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


def chain(count: int, body: str) -> str:
    """``count`` rules, each referring to the next (``{next}`` in ``body``)."""
    rules = [f"r{i} ::= " + body.format(next=f"r{i + 1}") for i in range(count)]
    return "root ::= r0\n" + "\n".join(rules) + f'\nr{count} ::= "a"\n'


def test_rule_analysis_work_is_linear_in_a_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    from structspec.grammar.gbnf import analysis

    calls = [0]
    original = analysis.productive

    def counting(node: object, productive: set[str]) -> bool:
        calls[0] += 1
        return original(node, productive)  # type: ignore[arg-type]

    monkeypatch.setattr(analysis, "productive", counting)
    count = 2000
    assert lint_source(chain(count, '"x" {next}')) == []
    assert calls[0] < 20 * count  # a pass over every rule per link of the chain before: millions


def test_a_long_left_recursive_cycle_is_searched_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from structspec.grammar.gbnf import analysis

    calls = [0]
    original = analysis._find_cycle

    def counting(start: str, edges: object) -> object:
        calls[0] += 1
        return original(start, edges)  # type: ignore[arg-type]

    monkeypatch.setattr(analysis, "_find_cycle", counting)
    count = 2000
    source = chain(count, '{next} "x"').replace(f'r{count} ::= "a"', f'r{count} ::= r0 | "a"')
    assert [d.code for d in lint_source(source)] == ["E104"]
    assert calls[0] == 1  # a breadth-first search from every rule of the cycle before
    assert Grammar.from_gbnf(chain(count, '{next} "x"')).matches("a" + "x" * count)
