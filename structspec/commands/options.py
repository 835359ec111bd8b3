"""Flags and helpers shared by the generating sub-commands (``extract``, ``generate``, ``serve``).

``--model`` / ``--draft-model`` take a local folder or a Hugging Face hub id; without
``--model`` the bundled demo model is used together with its bundled draft. Loading prints
progress on stderr (:mod:`structspec.commands.progress`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from structspec.commands.progress import step


class CommandError(Exception):
    """Bad input or a failed step, reported as one ``structspec: error:`` line and exit status 2."""


def fail(exc: BaseException) -> int:
    """Print ``exc`` as a one-line error on stderr; returns the exit status 2."""
    print(f"structspec: error: {exc}", file=sys.stderr)
    return 2


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--draft-model``, ``--no-draft``, ``--no-speculative``, ``--device`` and ``--dtype``."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        metavar="NAME_OR_PATH",
        help="target model: a local folder or a Hugging Face hub id (default: the bundled demo model)",
    )
    group.add_argument(
        "--draft-model",
        metavar="NAME_OR_PATH",
        help="small model proposing tokens for speculative decoding; it must share the target's "
        "tokenizer (default: the bundled demo draft when --model is not given)",
    )
    group.add_argument("--no-draft", action="store_true", help="decode without a draft model")
    group.add_argument(
        "--device", default="auto", metavar="DEVICE",
        help="auto (CUDA when available, else the CPU), cpu, cuda or cuda:N (default: auto)",
    )
    group.add_argument(
        "--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"),
        help="weights' type; auto is bfloat16 on GPUs that have it, float16 on others, float32 on the CPU "
        "(default: auto)",
    )
    group.add_argument(
        "--no-speculative",
        dest="speculative",
        action="store_false",
        help="decode one token per target forward (default: speculative, drafting from grammar-forced "
        "tokens, n-grams and the draft model; greedy output is identical either way)",
    )


def add_sampling_arguments(parser: argparse.ArgumentParser, *, max_tokens: int = 512) -> None:
    """``--max-tokens``, ``--temperature``, ``--top-p``, ``--seed`` and ``--stats``."""
    group = parser.add_argument_group("generation")
    group.add_argument(
        "--max-tokens", type=_positive_int, default=max_tokens, metavar="N",
        help=f"most tokens to generate (default: {max_tokens})",
    )
    group.add_argument(
        "--temperature", type=_temperature, default=0.0, metavar="T",
        help="sampling temperature; 0 is greedy (default: 0)",
    )
    group.add_argument(
        "--top-p", type=_top_p, default=1.0, metavar="P", help="nucleus sampling mass in (0, 1] (default: 1)"
    )
    group.add_argument("--seed", type=int, metavar="N", help="random seed, for reproducible sampling")
    group.add_argument("--stats", action="store_true", help="print speed and draft acceptance on stderr")


def load_generator(args: argparse.Namespace) -> Any:
    """The :class:`structspec.Generator` the flags describe, loading with progress on stderr."""
    from transformers.utils import logging as transformers_logging

    from structspec.generation import Generator
    from structspec.models import load

    # Our own progress line replaces transformers' progress bars and advisory warnings.
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    target_name = args.model or "demo"
    draft_name = None if args.no_draft else args.draft_model or (None if args.model else "demo-draft")
    placement = {"device": args.device, "dtype": args.dtype}
    model, tokenizer = _load(load, target_name, "model", placement)
    draft, draft_tokenizer = _load(load, draft_name, "draft model", placement) if draft_name else (None, None)
    with step("reading the vocabulary"):
        try:
            return Generator(model, tokenizer, draft_model=draft, draft_tokenizer=draft_tokenizer)
        except ValueError as exc:  # e.g. a draft model whose vocabulary differs from the target's
            raise CommandError(_first_line(exc)) from None


def prepare(generator: Any, grammar: Any) -> None:
    """Compile ``grammar`` for the generator's vocabulary now, with progress, rather than on the first token."""
    with step("compiling the grammar for the model's tokens"):
        generator.compile(grammar)


def _load(load: Any, name: str, role: str, placement: dict[str, str]) -> tuple[Any, Any]:
    with step(f"loading {role} {name}"):
        try:
            return load(name, **placement)
        except (OSError, ValueError, ImportError, RuntimeError) as exc:
            raise CommandError(f"cannot load {role} {name!r}: {_first_line(exc)}") from None


def speculative_config(args: argparse.Namespace) -> Any:
    """The :class:`~structspec.generation.SpecConfig` the flags ask for (None without speculation)."""
    from structspec.generation import SpecConfig

    return SpecConfig() if args.speculative else None


def generation_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for ``Generator.generate`` from the sampling and model flags."""
    return {
        "speculative": speculative_config(args),
        "max_new_tokens": args.max_tokens,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "seed": args.seed,
    }


def read_text(path: str, what: str) -> str:
    """The UTF-8 text of file ``path`` (``-`` reads standard input)."""
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"cannot read {what} {path}: not valid UTF-8 (byte {exc.start})") from None


def read_json(path: str, what: str) -> Any:
    """The JSON value in file ``path``, with line:column on a syntax error."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{path}:{exc.lineno}:{exc.colno}: {what} is not valid JSON: {exc.msg}") from None


def print_stats(stats: Any) -> None:
    """Speed and draft acceptance of a :class:`~structspec.generation.Stats` on one stderr line."""
    total = stats.seconds.get("total", 0.0)
    speed = f"{stats.tokens / total:.1f} tokens/s" if total > 0 else "n/a tokens/s"
    line = (
        f"structspec: stats: {stats.tokens} tokens in {total:.2f} s ({speed}), "
        f"{stats.tokens_per_forward:.2f} tokens per target forward, "
        f"draft acceptance {stats.acceptance_rate:.0%} ({stats.accepted}/{stats.verified} checked, "
        f"{stats.drafted} drafted), branches taken {stats.branches_taken}/{stats.branches}, "
        f"stop: {stats.stop_reason}"
    )
    print(line, file=sys.stderr)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _temperature(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 2.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 2], got {value}")
    return value


def _top_p(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1], got {value}")
    return value


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
