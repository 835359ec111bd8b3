"""The command line's sampling flags, ``--version`` (also through ``python -m structspec``), and
the input checks made before any decoding: an empty text, and a prompt that does not fit the
model's context (exit 2, one clear line). Generation runs on the real stories260K model (a
512-token context)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from tiny_models import one_thread, stories_dir

import structspec
from structspec.cli import main
from structspec.generation.sampling import MAX_SEED, OptionError, Sampling

__all__ = ["one_thread"]

pytest.importorskip("transformers")

SCHEMA = '{"type": "object", "properties": {"name": {"enum": ["Lily", "Tom"]}}, "required": ["name"]}'
LONG_TEXT = "Lily had a red ball and she liked to play with it in the park. " * 60  # about 900 tokens


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {"schema": tmp_path / "s.json", "grammar": tmp_path / "g.gbnf", "text": tmp_path / "t.txt"}
    paths["schema"].write_text(SCHEMA)
    paths["grammar"].write_text('root ::= "red" | "blue"\n')
    paths["text"].write_text("Lily was happy.")
    return paths


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    out, err = capsys.readouterr()
    return status, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == f"structspec {structspec.__version__}"


def test_python_dash_m_runs_the_command_line() -> None:
    done = subprocess.run([sys.executable, "-m", "structspec", "--version"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, f"structspec {structspec.__version__}")


BAD_FLAGS = [
    ("--temperature", "nan", {"temperature": math.nan}),
    ("--temperature", "inf", {"temperature": math.inf}),
    ("--temperature", "2.5", {"temperature": 2.5}),
    ("--top-p", "0", {"top_p": 0.0}),
    ("--top-p", "nan", {"top_p": math.nan}),
    ("--top-k", "-1", {"top_k": -1}),
    ("--seed", str(MAX_SEED + 1), {"seed": MAX_SEED + 1}),
    ("--seed", "-1", {"seed": -1}),
    ("--max-tokens", "0", {"max_new_tokens": 0}),
]


@pytest.mark.parametrize(
    ("command", "flag", "value", "option"),
    # serve's --max-tokens is a server limit (checked by Limits); its sampling flags are request defaults.
    [(command, *bad) for command in ("generate", "extract", "serve") for bad in BAD_FLAGS
     if (command, bad[0]) != ("serve", "--max-tokens")],
)
def test_bad_sampling_flags_get_the_library_message(
    files: dict[str, Path], command: str, flag: str, value: str, option: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"generate": ["generate", "--grammar", str(files["grammar"]), "--prompt", "x"],
            "extract": ["extract", "--schema", str(files["schema"]), "--text", str(files["text"])],
            "serve": ["serve"]}[command]
    with pytest.raises(OptionError) as expected:
        Sampling(**option)
    with pytest.raises(SystemExit) as caught:
        main([*base, f"{flag}={value}"])
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert f"argument {flag}: {expected.value.problem}" in err and "Traceback" not in err


def test_a_non_number_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "--grammar", "g", "--prompt", "x", "--temperature", "warm"])
    assert "argument --temperature: must be a number, got 'warm'" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["", " \n\t\n"])
def test_extract_from_an_empty_text_exits_2_before_loading_a_model(
    files: dict[str, Path], tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    files["text"].write_text(text)
    # A model folder that does not exist: the empty text must be found before any model loads.
    status, out, err = run(["extract", "--schema", str(files["schema"]), "--text", str(files["text"]),
                            "--model", str(tmp_path / "no-model")], capsys)
    assert status == 2 and not out
    assert f"{files['text']}: the text is empty" in err and "cannot load" not in err


def test_extract_from_a_text_longer_than_the_context_exits_2(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files["text"].write_text(LONG_TEXT)
    status, out, err = run(["extract", "--schema", str(files["schema"]), "--text", str(files["text"]),
                            "--model", str(stories_dir()), "--max-tokens", "32"], capsys)
    assert status == 2 and not out
    assert "the text is too long for the model" in err and "context of 512 tokens" in err
    assert "--max-tokens" in err and "Traceback" not in err


def test_generate_past_the_context_exits_2(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    # The prompt fits, but not with the tokens asked for.
    status, out, err = run(["generate", "--grammar", str(files["grammar"]), "--prompt", "Once upon a time",
                            "--model", str(stories_dir()), "--max-tokens", "600"], capsys)
    assert status == 2 and not out
    assert "the prompt is too long for the model" in err and "600 more may be generated" in err


def test_every_64_bit_seed_samples_reproducibly(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["generate", "--grammar", str(files["grammar"]), "--prompt", "The ball was", "--model", str(stories_dir()),
            "--temperature", "2", "--top-k", "50", "--top-p", "0.95", "--seed", str(MAX_SEED), "--max-tokens", "8"]
    first, second = run(args, capsys), run(args, capsys)
    assert first[0] == 0, first[2]
    assert first[1] == second[1] and first[1].strip() in {"red", "blue"}
