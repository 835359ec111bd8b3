"""Flags and helpers shared by the sub-commands: the generating ones (``extract``, ``generate``,
``serve``, ``batch``) and, for ``--pydantic``, ``convert``.

``--model`` / ``--draft-model`` take a local folder or a Hugging Face hub id; without
``--model`` the bundled demo model is used together with its bundled draft. Loading prints
progress on stderr (:mod:`structspec.commands.progress`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from structspec.commands.progress import step
from structspec.errors import SchemaError
from structspec.generation.sampling import MAX_SEED, MAX_TEMPERATURE, OptionError, Sampling, check


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
    """``--max-tokens``, the sampling flags (:func:`add_sampling_flags`) and ``--stats``."""
    group = parser.add_argument_group("generation")
    group.add_argument(
        "--max-tokens", type=_option("max_new_tokens", int), default=max_tokens, metavar="N",
        help=f"most tokens to generate (default: {max_tokens})",
    )
    add_sampling_flags(group)
    group.add_argument("--stats", action="store_true", help="print speed and draft acceptance on stderr")


def add_sampling_flags(group: argparse._ArgumentGroup) -> None:
    """``--temperature``, ``--top-p``, ``--top-k`` and ``--seed``, checked as :class:`Sampling` checks them."""
    group.add_argument(
        "--temperature", type=_option("temperature", float), default=0.0, metavar="T",
        help=f"sampling temperature in [0, {MAX_TEMPERATURE:g}]; 0 is greedy (default: 0)",
    )
    group.add_argument(
        "--top-p", type=_option("top_p", float), default=1.0, metavar="P",
        help="nucleus sampling: keep the best tokens up to this probability mass, in (0, 1] (default: 1)",
    )
    group.add_argument(
        "--top-k", type=_option("top_k", int), default=0, metavar="K",
        help="keep only the K best-scored tokens; 0 keeps all (default: 0)",
    )
    group.add_argument(
        "--seed", type=_option("seed", int), metavar="N",
        help=f"random seed in 0..{MAX_SEED}, for reproducible sampling (default: a fresh one)",
    )


def sampling_options(args: argparse.Namespace, max_new_tokens: int | None = None) -> Sampling:
    """The :class:`Sampling` the flags describe (``max_new_tokens`` in place of ``--max-tokens`` where given)."""
    return Sampling(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_new_tokens=args.max_tokens if max_new_tokens is None else max_new_tokens,
    )


GENERATION_EXTRA = "running a language model needs torch and transformers: pip install 'structspec[generation]'"


def require_generation() -> None:
    """Check that the ``generation`` extra is installed (:class:`CommandError` naming it if not),
    and quiet transformers: our own progress lines replace its progress bars and advisory warnings."""
    try:
        from transformers.utils import logging as transformers_logging

        import structspec.generation  # noqa: F401
    except ImportError as exc:
        raise CommandError(f"{GENERATION_EXTRA} ({exc})") from None
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()


def check_placement(args: argparse.Namespace) -> None:
    """Refuse a ``--device`` or ``--dtype`` this machine cannot give, before any work starts."""
    require_generation()
    from structspec.models import resolve_device, resolve_dtype

    try:
        resolve_dtype(args.dtype, resolve_device(args.device))
    except ValueError as exc:
        raise CommandError(_first_line(exc)) from None


def load_generator(args: argparse.Namespace) -> Any:
    """The :class:`structspec.Generator` the flags describe, loading with progress on stderr."""
    require_generation()
    from structspec.generation import Generator
    from structspec.models import load

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


def run_generation(
    generator: Any, prompt: Any, grammar: Any, args: argparse.Namespace, what: str, **options: Any
) -> Any:
    """``generator.generate`` with the flags' options; a prompt that does not fit the model's
    context, or encodes to nothing, is a :class:`CommandError` naming ``what`` (``the text``)."""
    from structspec.generation.prompt import ContextLengthError

    try:
        return generator.generate(
            prompt, grammar, **asdict(sampling_options(args)), speculative=speculative_config(args), **options
        )
    except ContextLengthError as exc:
        raise CommandError(f"{what} is too long for the model: {exc}; shorten it or lower --max-tokens") from None
    except ValueError as exc:  # e.g. a prompt that encodes to no tokens
        raise CommandError(f"{what}: {_first_line(exc)}") from None


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
    except RecursionError:
        raise CommandError(f"{path}: {what} nests too deeply to parse") from None


def schema_error(where: str, exc: SchemaError) -> CommandError:
    """A :class:`~structspec.errors.SchemaError` in the schema from ``where`` (a file, a
    ``MODULE:CLASS``, or ``""``), as ``where#pointer (keyword): CODE message``."""
    keyword = f" ({exc.keyword})" if exc.keyword else ""
    return CommandError(f"{where}#{exc.pointer}{keyword}: {exc.code} {exc.message}")


def import_model(spec: str) -> type:
    """The Pydantic class named ``MODULE:CLASS`` (the current directory is importable)."""
    from structspec.jsonschema.pydantic_models import model_schema

    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise CommandError(f"--pydantic expects MODULE:CLASS, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"--pydantic {spec}: cannot import {module_name!r}: {exc}") from None
    model_class = getattr(module, class_name, None)
    if model_class is None:
        raise CommandError(f"--pydantic {spec}: module {module_name!r} has no attribute {class_name!r}")
    try:
        model_schema(model_class)
    except (TypeError, ImportError) as exc:
        raise CommandError(f"--pydantic {spec}: {exc}") from None
    return model_class


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


def _option(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type`` that parses a flag's text and checks it as :class:`Sampling` option ``name``."""

    def convert(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            kind = "an integer" if parse is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {kind}, got {text!r}") from None
        try:
            check(name, value)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(exc.problem) from None
        return value

    return convert


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
