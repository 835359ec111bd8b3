"""``structspec extract`` / ``generate`` / ``serve`` on the command line: output, stats, progress and
clear errors (exit 2, naming the file and the JSON pointer or line:column) instead of tracebacks.

Generation runs on the real stories260K model (``--model`` with its folder)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
from tiny_models import one_thread, stories_dir

from structspec.cli import main
from structspec.commands.progress import step
from structspec.grammar import Grammar

__all__ = ["one_thread"]

# Imported before any test captures output, so that transformers' log handler keeps a live stream.
pytest.importorskip("transformers")

PERSON = {
    "type": "object",
    "properties": {"name": {"enum": ["Lily", "Tom"]}, "age": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
COLOR = 'root ::= "red" | "green" | "blue"\n'
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "schema": tmp_path / "person.json",
        "text": tmp_path / "story.txt",
        "grammar": tmp_path / "color.gbnf",
    }
    paths["schema"].write_text(json.dumps(PERSON))
    paths["text"].write_text("Lily was 5 years old. She liked her red ball.")
    paths["grammar"].write_text(COLOR)
    return paths


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    out, err = capsys.readouterr()
    return status, out, err


def model_args() -> list[str]:
    return ["--model", str(stories_dir()), "--max-tokens", "48"]


def test_extract_prints_json_following_the_schema(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        ["extract", "--schema", str(files["schema"]), "--text", str(files["text"]), *model_args(), "--stats"], capsys
    )
    assert status == 0, err
    jsonschema.validate(json.loads(out), PERSON)
    assert "structspec: stats:" in err and "tokens/s" in err and "draft acceptance" in err
    # Off a terminal stderr holds only short structspec lines: no progress bars, no tracebacks.
    assert all(line.startswith("structspec: ") for line in err.splitlines()), err


@pytest.mark.skipif(not (REPO / "structspec/models/target/model.safetensors").is_file(),
                    reason="bundled demo weights not found in structspec/models/target")
def test_readme_main_job_on_the_bundled_models(capsys: pytest.CaptureFixture[str]) -> None:
    examples = REPO / "examples"
    status, out, err = run(["extract", "--schema", str(examples / "invoice.schema.json"),
                            "--text", str(examples / "invoice.txt"), "--stats"], capsys)
    assert status == 0, err
    jsonschema.validate(json.loads(out), json.loads((examples / "invoice.schema.json").read_text()))
    assert "draft acceptance" in err and "branches taken" in err


def test_extract_grounded_copies_spans_of_the_text(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    properties = {"toy": {"type": "string"}, "who": {"type": "string", "x-grounded": True}}
    schema = {"type": "object", "properties": properties, "required": ["toy", "who"], "additionalProperties": False}
    files["schema"].write_text(json.dumps(schema))
    text = files["text"].read_text()
    status, out, err = run(["extract", "--schema", str(files["schema"]), "--text", str(files["text"]), "--grounded",
                            *model_args()], capsys)
    assert status == 0, err
    value = json.loads(out)
    assert value["toy"] in text and value["who"] in text
    files["schema"].write_text(json.dumps({**schema, "properties": {"who": {"type": "string", "x-grounded": 1}}}))
    status, out, err = run(["extract", "--schema", str(files["schema"]), "--text", str(files["text"])], capsys)
    assert status == 2 and f"{files['schema']}#/properties/who/x-grounded (x-grounded): " in err


def test_extract_from_stdin_compact(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", open(files["text"], encoding="utf-8"))  # noqa: SIM115 - closed by pytest
    status, out, _ = run(["extract", "--schema", str(files["schema"]), "--compact", *model_args()], capsys)
    assert status == 0 and out.count("\n") == 1
    jsonschema.validate(json.loads(out), PERSON)


def test_extract_pydantic(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cli_people.py").write_text(textwrap.dedent("""
        from typing import Literal
        from pydantic import BaseModel, ConfigDict
        class Kid(BaseModel):
            model_config = ConfigDict(extra="forbid")
            name: Literal["Lily", "Tom"]
            happy: bool
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    status, out, err = run(["extract", "--pydantic", "cli_people:Kid", "--text", str(files["text"]), *model_args()],
                           capsys)
    sys.modules.pop("cli_people", None)
    assert status == 0, err
    assert set(json.loads(out)) == {"name", "happy"}


def test_extract_out_of_tokens_exits_1(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["schema"].write_text(json.dumps({"type": "object", "properties": {"story": {"type": "string"}},
                                           "required": ["story"]}))
    status, out, err = run(
        ["extract", "--schema", str(files["schema"]), "--text", str(files["text"]), *model_args(), "--max-tokens", "3"],
        capsys,
    )
    assert status == 1 and not out and "--max-tokens" in err and "up to 12 tokens" in err


def test_extract_closes_a_long_answer_in_time(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    schema = {"type": "object", "properties": {"story": {"type": "string"}}, "required": ["story"],
              "additionalProperties": False}
    files["schema"].write_text(json.dumps(schema))
    status, out, err = run(
        ["extract", "--schema", str(files["schema"]), "--text", str(files["text"]), *model_args(), "--max-tokens", "12",
         "--compact"],
        capsys,
    )
    assert status == 0, err
    assert set(json.loads(out)) == {"story"}
    assert "closed early to fit in --max-tokens 12" in err


def test_generate_streams_grammar_text(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        ["generate", "--grammar", str(files["grammar"]), "--prompt", "The ball was", *model_args(), "--stats"], capsys
    )
    assert status == 0, err
    assert Grammar.from_gbnf(COLOR).matches(out.rstrip("\n"))
    assert "stop: " in err


def test_generate_out_of_tokens_exits_1(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["grammar"].write_text('root ::= "Once upon a time there was a little girl named Lily."\n')
    status, out, err = run(["generate", "--grammar", str(files["grammar"]), "--prompt", "x", *model_args(),
                            "--max-tokens", "2"], capsys)
    assert status == 1 and "Once upon a time".startswith(out.strip()) and "--max-tokens" in err


def test_generate_chat_prompt_file_is_deterministic(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["text"].write_text("Pick a color.")
    args = ["generate", "--grammar", str(files["grammar"]), "--prompt-file", str(files["text"]), "--chat",
            *model_args()]
    first = run(args, capsys)
    second = run([*args, "--no-speculative"], capsys)
    assert first[0] == second[0] == 0 and first[1] == second[1]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"type": "object",\n  "properties": }', "person.json:2:17: schema is not valid JSON"),
        ('["not", "an", "object"]', "person.json: a JSON Schema must be a JSON object"),
        (json.dumps({"properties": {"t": {"type": "array", "uniqueItems": True}}}),
         "person.json#/properties/t/uniqueItems (uniqueItems)"),
    ],
)
def test_bad_schema_exits_2(
    files: dict[str, Path], content: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files["schema"].write_text(content)
    status, out, err = run(["extract", "--schema", str(files["schema"]), "--text", str(files["text"])], capsys)
    assert status == 2 and not out
    assert expected in err and "Traceback" not in err


def test_bad_grammar_exits_2_with_line_and_column(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    files["grammar"].write_text('root ::= color\ncolour ::= "red"\n')
    status, out, err = run(["generate", "--grammar", str(files["grammar"]), "--prompt", "x"], capsys)
    assert status == 2 and not out
    assert f"{files['grammar']}:1:10: E101" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["extract", "--schema", "missing.json"], "cannot read schema missing.json"),
        (["extract", "--schema", "{schema}", "--text", "missing.txt"], "cannot read text missing.txt"),
        (["generate", "--grammar", "missing.gbnf", "--prompt", "x"], "cannot read grammar missing.gbnf"),
        (["extract", "--pydantic", "nomodule", "--text", "{text}"], "MODULE:CLASS"),
        (["extract", "--pydantic", "no_such_module_xyz:M", "--text", "{text}"], "no_such_module_xyz"),
        (["extract", "--pydantic", "json:JSONDecoder", "--text", "{text}"], "BaseModel"),
        (["extract", "--schema", "{schema}", "--text", "{text}", "--model", "{missing}"], "cannot load model"),
        (["generate", "--grammar", "-", "--prompt-file", "-"], "cannot both read stdin"),
    ],
)
def test_bad_input_exits_2_without_traceback(
    files: dict[str, Path], tmp_path: Path, args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    names = {"schema": files["schema"], "text": files["text"], "missing": tmp_path / "no-model-here"}
    status, out, err = run([a.format(**names) for a in args], capsys)
    assert status == 2 and not out
    assert expected in err and "Traceback" not in err


def test_usage_errors_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["extract", "--schema", "a.json", "--pydantic", "m:C"])
    assert caught.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit) as caught:
        main(["generate", "--grammar", "g.gbnf", "--prompt", "x", "--max-tokens", "0"])
    assert caught.value.code == 2 and "at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(command in out for command in ("extract", "generate", "serve", "convert", "lint"))


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines() -> None:
    quiet, terminal = io.StringIO(), Terminal()
    with step("quick step", quiet):
        pass
    with step("slow step", quiet, min_seconds=0):
        pass
    assert quiet.getvalue().startswith("structspec: slow step (") and "quick" not in quiet.getvalue()
    with pytest.raises(KeyError), step("loading", terminal, min_seconds=0):
        raise KeyError("a failed step leaves no done line")
    assert "structspec:" not in terminal.getvalue() and terminal.getvalue().endswith("\r\x1b[K")


def test_cli_import_is_light() -> None:
    code = (
        "import sys, structspec.cli as c; c.build_parser(); "
        "print(sorted(m for m in ('torch', 'transformers', 'fastapi', 'uvicorn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_generate_with_a_structural_tag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from structspec.grammar.tags import StructuralTag

    spec = {"tags": [{"begin": "<age>", "schema": {"type": "integer", "minimum": 1, "maximum": 9}, "end": "</age>"}],
            "min_segments": 1, "max_segments": 1}
    path = tmp_path / "tags.json"
    path.write_text(json.dumps(spec))
    status, out, err = run(["generate", "--tags", str(path), "--prompt", "Lily was", *model_args(),
                            "--max-tokens", "24"], capsys)
    assert status == 0, err
    (segment,) = StructuralTag.from_dict(spec).parse(out.rstrip("\n")).segments
    assert 1 <= segment.value <= 9


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"tags": [{"begin": "<a>", "gbnf": "root ::= x", "end": ""}]}, "tags.json:1:10: E101 tags[0].content:"),
        ({"tags": [{"begin": "<a>", "schema": {"uniqueItems": True}, "end": ""}]},
         "tags.json: #/uniqueItems (uniqueItems): tags[0].content:"),
        ({"tags": [{"begin": "<a>", "regex": "x", "end": ""}], "triggers": ["<b>"]}, "tags.json: tags[0].begin"),
    ],
)
def test_bad_structural_tag_exits_2(tmp_path: Path, spec: dict, expected: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tags.json"
    path.write_text(json.dumps(spec))
    status, _, err = run(["generate", "--tags", str(path), "--prompt", "x", *model_args()], capsys)
    assert status == 2 and expected in err and "Traceback" not in err, err
