"""Tests for ``structspec lint``: golden outputs, exit codes, positions, and properties.

Golden files: each ``tests/lint_golden/NAME.gbnf`` has its expected ``NAME.txt`` (text output)
and ``NAME.json`` (``--format json``). After an intended change to messages, regenerate them
with ``STRUCTSPEC_UPDATE_GOLDEN=1 python -m pytest tests/grammar/test_lint.py`` and review the diff.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import structspec.grammar.compiler
from structspec import Grammar, GrammarError
from structspec.cli import main
from structspec.grammar.gbnf.diagnostics import CODES, ERROR
from structspec.grammar.lint import lint_source
from structspec.ir.charset import merge_ranges

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "lint_golden"
CASES = sorted(path.stem for path in GOLDEN.glob("*.gbnf"))
UPDATE = os.environ.get("STRUCTSPEC_UPDATE_GOLDEN") == "1"
CLEAN = (GOLDEN / "clean.gbnf").read_text()
WARNINGS_ONLY = 'root ::= "a" | "a"\n'


def lint(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["lint", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def codes(text: str, root: str = "root") -> list[str]:
    return [finding.code for finding in lint_source(text, root)]


def where(text: str, code: str) -> list[tuple[int, int]]:
    return [(f.line, f.column) for f in lint_source(text) if f.code == code]


# -- golden outputs ------------------------------------------------------------------------------
@pytest.mark.parametrize("output_format", ["text", "json"])
@pytest.mark.parametrize("case", CASES)
def test_golden_output(case: str, output_format: str, capsys, monkeypatch) -> None:
    monkeypatch.chdir(GOLDEN)
    status, out, _ = lint(capsys, "--format", output_format, f"{case}.gbnf")
    expected = GOLDEN / f"{case}.{'txt' if output_format == 'text' else 'json'}"
    if UPDATE:
        expected.write_text(out)
    assert out == expected.read_text()
    has_errors = any(CODES[code][0] == ERROR for code in codes((GOLDEN / f"{case}.gbnf").read_text()))
    assert status == (1 if has_errors else 0)


def test_golden_inputs_cover_every_lint_code() -> None:
    found = {record["code"] for case in CASES for record in json.loads((GOLDEN / f"{case}.json").read_text())}
    not_lint = {"E108", "E109", "E110"}  # compile limits (tested below) and tokenizer-time errors
    assert found == set(CODES) - not_lint


def test_json_records_have_the_documented_fields(capsys, monkeypatch) -> None:
    monkeypatch.chdir(GOLDEN)
    _, out, _ = lint(capsys, "--format", "json", "classes.gbnf", "warnings.gbnf")
    records = json.loads(out)
    assert {record["file"] for record in records} == {"classes.gbnf", "warnings.gbnf"}
    for record in records:
        assert set(record) == {"file", "line", "column", "code", "severity", "message"}
        assert record["severity"] == CODES[record["code"]][0]


# -- positions and follow-on noise ---------------------------------------------------------------
def test_findings_point_at_the_offending_expression() -> None:
    assert where('root ::= "a" missing', "E101") == [(1, 14)]
    assert where('root ::= x\nx ::= "(" x ")"', "E107") == [(1, 10), (2, 11)]
    assert where('root ::= "a" b\nb ::= "c" ("d"?)*', "W202") == [(2, 12)]
    assert where('root ::= "a" | "b" | "a"', "W203") == [(1, 22)]
    assert where('root ::= "x" [0-9a-f1]', "W204") == [(1, 14)]
    assert where('root ::= "{" [ \\t]+ "}"', "W206") == [(1, 14)]


def test_left_recursion_points_at_the_reference_that_closes_the_cycle() -> None:
    findings = lint_source('root ::= a\na ::= b "x" | "y"\nb ::= "z"? a')
    assert [(f.code, f.line, f.column) for f in findings] == [("E104", 2, 7)]
    assert "a -> b -> a" in findings[0].message and "can be empty" in findings[0].message


def test_a_rule_with_a_syntax_error_is_not_also_undefined_or_its_callees_unused() -> None:
    text = 'root ::= value\nvalue ::= "[" item ("," item\nitem ::= "x"\n'
    assert codes(text) == ["E001"]


def test_an_unclosed_group_does_not_swallow_the_next_rule() -> None:
    findings = lint_source('root ::= a b\na ::= ("x"\nb ::= "y"\n')
    assert [(f.code, f.line, f.column, f.message) for f in findings] == [
        ("E001", 2, 7, "unclosed '(' (opened here)")
    ]


def test_an_empty_class_is_not_also_a_rule_that_never_finishes() -> None:
    assert codes('root ::= a\na ::= "x" []') == ["E105"]


def test_undefined_rules_are_not_also_rules_that_never_finish() -> None:
    assert codes('root ::= "a" undefined') == ["E101"]


def test_unused_rules_are_not_reported_without_a_start_rule() -> None:
    assert codes('start ::= "a"\nother ::= "b"') == ["E102"]


def test_unused_rules_are_not_reported_past_a_misspelt_reference() -> None:
    findings = lint_source('root ::= "a" valeu\nvalue ::= item\nitem ::= "x"')
    assert [(f.code, f.message) for f in findings] == [("E101", "undefined rule 'valeu' (did you mean 'value'?)")]


def test_another_start_rule() -> None:
    assert codes('start ::= "a" helper\nhelper ::= "b"', root="start") == []
    assert codes('start ::= "a" helper\nhelper ::= "b"\nroot ::= "c"', root="start") == ["W201"]


def test_too_large_to_compile_is_reported_when_nothing_else_is_wrong(monkeypatch) -> None:
    monkeypatch.setattr(structspec.grammar.compiler, "DFA_LIMIT", 8)
    assert codes('root ::= "abcdefghijklmnop"') == ["E108"]
    assert codes('root ::= "abcdefghijklmnop" undefined') == ["E101"]
    assert codes('root ::= "x"{200000}') == ["E108"]


def test_whitespace_only_recursion_and_repetitions_of_whitespace_rules() -> None:
    assert codes('root ::= "x" ws\nws ::= (" " ws)?') == ["W206"]
    assert codes('root ::= "x" ws+\nws ::= [ \\n]{1,3}') == ["W206"]
    assert codes('root ::= "x" ws+ "y"\nws ::= [ \\n] | "z"') == []
    assert codes('root ::= "x" [^a]* [\\t ]{0,9}') == []


# -- properties ---------------------------------------------------------------------------------
GBNF_CHARS = st.sampled_from([*'abxyz09 \t\n"\\[]()|*+?{},-^.#:=', "::=", "root", "ws", "value"])


@st.composite
def mutated_clean_grammar(draw: st.DrawFn) -> str:
    """The clean golden grammar with a few random deletions and insertions."""
    text = CLEAN
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:at] + text[at + draw(st.integers(1, 8)):]
        else:
            text = text[:at] + draw(GBNF_CHARS) + text[at:]
    return text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_clean_grammar())
def test_lint_errors_agree_with_the_compiler(text: str) -> None:
    findings = lint_source(text)
    assert findings == sorted(findings, key=lambda f: (f.line, f.column, f.code, f.message))
    assert all(f.code in CODES and 1 <= f.line <= text.count("\n") + 1 and f.column >= 1 for f in findings)
    has_errors = any(f.severity == ERROR for f in findings)
    try:
        grammar = Grammar.from_gbnf(text)
    except GrammarError as exc:
        assert has_errors, f"the compiler raised {exc.code} but lint found no error"
        return
    assert not has_errors
    assert ("W205" in [f.code for f in findings]) == grammar.matches(b"")


def _class_item(code: int) -> str:
    return chr(code) if chr(code).isalnum() else f"\\x{code:02X}"


@given(st.lists(st.tuples(st.integers(0x20, 0x7E), st.integers(0, 5)), min_size=1, max_size=5))
def test_overlapping_class_ranges_against_brute_force(items: list[tuple[int, int]]) -> None:
    ranges = [(low, min(low + width, 0x7E)) for low, width in items]
    body = "".join(_class_item(lo) if lo == hi else f"{_class_item(lo)}-{_class_item(hi)}" for lo, hi in ranges)
    overlapping = sum(hi - lo + 1 for lo, hi in ranges) > sum(hi - lo + 1 for lo, hi in merge_ranges(ranges))
    assert ("W204" in codes(f'root ::= "x" [{body}]')) == overlapping


@given(st.lists(st.sampled_from(['"a"', '"b"', "[ab]", '"a" "b"', '"ab"', "x", "x?"]), min_size=2, max_size=6))
def test_duplicate_alternatives_against_brute_force(alternatives: list[str]) -> None:
    text = f'root ::= "<" ({" | ".join(alternatives)}) ">"\nx ::= "x"'
    duplicates = len(alternatives) - len(set(alternatives))
    assert codes(text).count("W203") == duplicates


# -- the command line ----------------------------------------------------------------------------
def test_exit_status_and_summary(capsys, tmp_path) -> None:
    clean, warned = tmp_path / "clean.gbnf", tmp_path / "warned.gbnf"
    clean.write_text(CLEAN)
    warned.write_text(WARNINGS_ONLY)
    assert lint(capsys, str(clean)) == (0, "", "no problems in 1 file\n")
    status, out, err = lint(capsys, str(clean), str(warned))
    assert (status, err) == (0, "0 errors, 1 warning in 2 files\n")
    assert out == f"{warned}:1:16: W203 duplicate alternative `\"a\"` (already at 1:10)\n"
    assert lint(capsys, "--strict", str(warned))[0] == 1
    assert lint(capsys, "--strict", str(GOLDEN / "syntax.gbnf"))[0] == 1


def test_stdin(capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(WARNINGS_ONLY.encode())))
    status, out, _ = lint(capsys, "--strict", "-")
    assert status == 1
    assert out.startswith("<stdin>:1:16: W203 ")


@pytest.mark.parametrize("kind", ["missing", "directory", "not utf-8"])
def test_unreadable_files_exit_2_and_the_rest_is_still_linted(kind: str, capsys, tmp_path) -> None:
    bad = tmp_path / "bad.gbnf"
    if kind == "directory":
        bad.mkdir()
    elif kind == "not utf-8":
        bad.write_bytes(b'root ::= "\xff"\n')
    status, out, err = lint(capsys, str(bad), str(GOLDEN / "syntax.gbnf"))
    assert status == 2
    assert f"structspec lint: cannot read {bad}: " in err
    assert "Traceback" not in err
    assert "E002" in out


@pytest.mark.parametrize("argv", [[], ["--format", "xml", "x.gbnf"], ["--no-such-option", "x.gbnf"]])
def test_usage_errors_exit_2(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["lint", *argv])
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_root_option(capsys, tmp_path) -> None:
    path = tmp_path / "start.gbnf"
    path.write_text('start ::= "a"\n')
    assert lint(capsys, str(path))[0] == 1
    assert lint(capsys, "--root", "start", str(path))[0] == 0


def test_our_grammar_library_has_no_lint_errors(capsys) -> None:
    files = sorted(str(path) for path in (REPO / "grammars").glob("*.gbnf"))
    if not files:
        pytest.skip("no grammars/ folder")
    status, out, _ = lint(capsys, *files)
    assert status == 0, out


def test_module_entry_point_in_a_subprocess() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "structspec.cli", "lint", "--format", "json", "recursion.gbnf", "nope.gbnf"],
        cwd=GOLDEN, env=env, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 2
    assert json.loads(result.stdout) == json.loads((GOLDEN / "recursion.json").read_text())
    assert "cannot read nope.gbnf" in result.stderr
    assert "Traceback" not in result.stderr
