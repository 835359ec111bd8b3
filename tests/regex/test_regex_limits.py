"""Regex input that Python's ``re`` warns about or that nests too deeply: a clear RegexError,
never a leaked warning or a RecursionError."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from structspec.budget import MAX_REGEX_NESTING
from structspec.errors import SchemaError
from structspec.grammar import Grammar
from structspec.jsonschema import schema_to_gbnf
from structspec.regex.convert import RegexError, regex_to_gbnf

HALF = MAX_REGEX_NESTING // 2


@pytest.mark.parametrize(
    ("pattern", "position", "fragment"),
    [
        ("[[:alpha:]]+", 1, "nested set"),
        ("x[^[a]", 3, "nested set"),
        ("[a--z]", 2, "'--'"),
        ("[a&&b]", 2, "'&&'"),
        ("[a||b]", 2, "'||'"),
        ("[a~~b]", 2, "'~~'"),
    ],
)
def test_syntax_python_warns_about_is_refused(pattern: str, position: int, fragment: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RegexError) as caught:
            regex_to_gbnf(pattern)
    assert caught.value.position == position and fragment in caught.value.message


def test_escaped_brackets_and_single_operators_still_work() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Grammar.from_gbnf(regex_to_gbnf(r"[\[:alpha:]]+")).matches(":]]")
        assert Grammar.from_gbnf(regex_to_gbnf("[a|&~-]")).matches("~")


def test_cli_prints_an_error_and_no_warning() -> None:
    # a fresh process: Python's re warns only the first time it compiles a pattern
    done = subprocess.run(
        [sys.executable, "-m", "structspec.cli", "convert", "--regex", "[[:alpha:]]+"],
        capture_output=True, text=True, check=False, env={**os.environ, "PYTHONWARNINGS": "default"},
    )
    assert done.returncode == 2 and not done.stdout
    assert "nested set" in done.stderr and "Warning" not in done.stderr


def test_schema_pattern_gets_a_schema_error_without_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(SchemaError, match="nested set") as caught:
            schema_to_gbnf({"type": "string", "pattern": "^[[:digit:]]+$"})
    assert caught.value.pointer == "/pattern"


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("(" * MAX_REGEX_NESTING + "a" + ")" * MAX_REGEX_NESTING, "a"),
        ("(?:x|y" * MAX_REGEX_NESTING + "a" + "*)" * MAX_REGEX_NESTING, "yyyx"),  # three grammar levels per group
        ("(?:a|(?:" * HALF + "b" + ")c)" * HALF, "b" + "c" * HALF),
    ],
)
def test_groups_up_to_the_limit_convert(pattern: str, text: str) -> None:
    assert Grammar.from_gbnf(regex_to_gbnf(pattern)).matches(text)
    schema = {"type": "string", "pattern": f"^{pattern}$"}
    assert Grammar.from_json_schema(schema).matches(f'"{text}"')


def test_group_nesting_limit() -> None:
    for depth in (MAX_REGEX_NESTING + 1, 5000):
        with pytest.raises(RegexError, match=f"nest deeper than {MAX_REGEX_NESTING}") as caught:
            regex_to_gbnf("(?:" * depth + "a" + ")" * depth)
        assert caught.value.position == 3 * MAX_REGEX_NESTING


@pytest.mark.parametrize(
    ("pattern", "position"),
    [("a{0,111111111111100}b", 1), ("(?:x|){2222222222222222222222222222,5}z?", 6), ("x{4294967296}", 1)],
)
def test_counts_too_large_for_re_are_a_regex_error(pattern: str, position: int) -> None:
    with pytest.raises(RegexError, match="too large for Python's re") as caught:  # was OverflowError from re
        regex_to_gbnf(pattern)
    assert caught.value.position == position
