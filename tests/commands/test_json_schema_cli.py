"""``structspec convert``: GBNF on stdout, clear one-line errors on stderr with exit status 2."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from structspec.cli import main
from structspec.grammar import Grammar


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["convert", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_schema_file_to_gbnf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}}}))
    status, out, err = run([str(path), "--whitespace", "flexible"], capsys)
    assert status == 0 and not err
    assert out.startswith("root ::=") and "root-n" in out
    assert Grammar.from_gbnf(out).matches('{ "n": 7 }')


def test_any_property_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "null"}}}))
    status, out, err = run([str(path), "--property-order", "any"], capsys)
    assert status == 0 and not err
    assert Grammar.from_gbnf(out).matches('{"b":null,"a":1}') and not Grammar.from_gbnf(out).matches('{"a":1,"a":2}')
    _, schema_order, _ = run([str(path)], capsys)
    assert not Grammar.from_gbnf(schema_order).matches('{"b":null,"a":1}')


def test_unsupported_schema_names_pointer_and_keyword(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"properties": {"t": {"type": "array", "uniqueItems": True}}}))
    status, out, err = run([str(path)], capsys)
    assert status == 2 and not out
    assert "#/properties/t/uniqueItems (uniqueItems)" in err and "Traceback" not in err
    status, out, err = run([str(path), "--no-strict"], capsys)
    assert status == 0 and out and "uniqueItems" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--regex", "(a)\\1"], "backreferences"),
        (["missing.json"], "missing.json"),
        (["--pydantic", "nomodule"], "MODULE:CLASS"),
        (["--pydantic", "json:JSONDecoder"], "BaseModel"),
    ],
)
def test_bad_input_exits_2_without_traceback(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(args, capsys)
    assert status == 2 and not out
    assert message in err and "Traceback" not in err


def test_unreadable_files_are_named_with_their_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = tmp_path / "s.json"
    schema.write_text('{"type": "string"}')
    status, out, err = run([str(schema), "--source", str(tmp_path / "gone.txt")], capsys)
    assert (status, out) == (2, "")
    assert err == f"structspec: error: cannot read source {tmp_path / 'gone.txt'}: No such file or directory\n"
    status, out, err = run([str(tmp_path / "gone.json")], capsys)
    assert (status, out) == (2, "")
    assert err == f"structspec: error: cannot read schema {tmp_path / 'gone.json'}: No such file or directory\n"


def test_regex_and_pydantic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, out, _ = run(["--regex", "^[a-c]{2}$"], capsys)
    assert status == 0 and Grammar.from_gbnf(out).matches("ab")
    module = tmp_path / "cli_models.py"
    module.write_text(
        textwrap.dedent("""
        from pydantic import BaseModel
        class Item(BaseModel):
            name: str
            count: int = 0
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    status, out, _ = run(["--pydantic", "cli_models:Item"], capsys)
    assert status == 0 and Grammar.from_gbnf(out).matches('{"name":"x","count":2}')
    sys.modules.pop("cli_models", None)


def test_pydantic_module_in_the_current_directory_as_for_extract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cwd_models.py").write_text("from pydantic import BaseModel\nclass Pet(BaseModel):\n    name: str\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_models", raising=False)
    status, out, err = run(["--pydantic", "cwd_models:Pet"], capsys)
    sys.modules.pop("cwd_models", None)
    assert status == 0 and not err and Grammar.from_gbnf(out).matches('{"name":"Rex"}')
    status, out, err = run(["--pydantic", "cwd_models:Cat"], capsys)
    assert status == 2 and not out
    assert err == "structspec: error: --pydantic cwd_models:Cat: module 'cwd_models' has no attribute 'Cat'\n"


def test_grounded_schema_prints_the_given_rule_as_a_comment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema, source = tmp_path / "s.json", tmp_path / "doc.txt"
    schema.write_text(json.dumps({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}))
    source.write_text('Ada "the Countess" Lovelace\n', encoding="utf-8")
    status, out, err = run([str(schema), "--source", str(source), "--grounded"], capsys)
    assert status == 0 and not err
    assert 'root-name ::= "\\"" source-span "\\""' in out
    assert "# source-span ::= (given as a deterministic byte automaton of" in out and "(28 characters)" in out
    status, out, err = run([str(schema), "--grounded"], capsys)
    assert status == 2 and not out and "--grounded needs --source" in err
    schema.write_text(json.dumps({"type": "object", "properties": {"name": {"type": "string", "x-grounded": True}}}))
    status, out, err = run([str(schema)], capsys)
    assert status == 2 and "#/properties/name/x-grounded (x-grounded): " in err and "--source" in err
