"""``structspec generate``: continue a prompt with text that a GBNF grammar (or a structural tag) accepts.

    structspec generate --grammar answer.gbnf --prompt "Q: 2+2? A:"
    structspec generate --grammar list.gbnf --prompt-file prompt.txt --chat --stats
    structspec generate --tags calls.json --prompt "..."   # free text with tagged segments

The text is streamed to stdout as it is decoded. A grammar error is reported as
``FILE:line:column: CODE message`` (exit 2) before any model loads; so is a structural tag's
(``FILE: tags[0].content: ...``, docs/structural-tags.md for the file's format).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from structspec.commands.options import (
    CommandError,
    add_model_arguments,
    add_sampling_arguments,
    fail,
    load_generator,
    prepare,
    print_stats,
    read_json,
    read_text,
    run_generation,
)
from structspec.commands.progress import step
from structspec.errors import GrammarError, StructspecError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``generate`` sub-command."""
    parser = subparsers.add_parser(
        "generate",
        help="generate text that follows a GBNF grammar",
        description="Continue a prompt with text the grammar accepts, streamed to stdout. "
        "Exit status: 0 success, 1 generation did not finish, 2 bad input.",
        epilog='example: structspec generate --grammar answer.gbnf --prompt "Q: 2+2? A:"',
    )
    constraint = parser.add_mutually_exclusive_group(required=True)
    constraint.add_argument("--grammar", metavar="FILE", help="GBNF grammar file ('-' for stdin)")
    constraint.add_argument(
        "--tags", metavar="FILE",
        help="structural tag file: free text with tagged segments, as JSON (docs/structural-tags.md)",
    )
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", metavar="TEXT", help="the prompt")
    prompt.add_argument("--prompt-file", metavar="FILE", help="read the prompt from a file ('-' for stdin)")
    parser.add_argument(
        "--chat", action="store_true", help="send the prompt as a user message through the model's chat template"
    )
    add_model_arguments(parser)
    add_sampling_arguments(parser, max_tokens=256)


def run(args: argparse.Namespace) -> int:
    """Generate and print; returns the exit status."""
    if "-" in (args.grammar, args.tags) and args.prompt_file == "-":
        return fail(CommandError(f"--{'grammar' if args.grammar else 'tags'} and --prompt-file cannot both read stdin"))
    try:
        grammar = _tags(args.tags) if args.tags else _grammar(args.grammar)
        prompt = args.prompt if args.prompt is not None else read_text(args.prompt_file, "prompt")
        generator = load_generator(args)
        prepare(generator, grammar)
        prompt_or_messages = [{"role": "user", "content": prompt}] if args.chat else prompt
        stream = run_generation(generator, prompt_or_messages, grammar, args, "the prompt", stream=True)
    except (CommandError, StructspecError) as exc:
        return fail(exc)
    for piece in stream:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    if args.stats:
        print_stats(stream.result.stats)
    if not _grammar_of(grammar).matches(stream.result.text):
        print(
            f"structspec: error: generation stopped after {args.max_tokens} tokens before the grammar was complete "
            "(raise --max-tokens)",
            file=sys.stderr,
        )
        return 1
    return 0


def _grammar(path: str) -> Any:
    from structspec.grammar import Grammar

    source = read_text(path, "grammar")
    try:
        with step("compiling grammar"):
            return Grammar.from_gbnf(source)
    except GrammarError as exc:
        raise CommandError(f"{_name(path)}:{exc.line}:{exc.column}: {exc.code} {exc.message}") from None


def _tags(path: str) -> Any:
    from structspec.grammar.tags import StructuralTag

    spec = read_json(path, "structural tag")
    try:
        with step("compiling the structural tag"):
            tags = StructuralTag.from_dict(spec)
            tags.grammar  # noqa: B018 - built now, so that its errors come before any model loads
            return tags
    except GrammarError as exc:
        where = f":{exc.line}:{exc.column}" if exc.line else ""
        raise CommandError(f"{_name(path)}{where}: {exc.code} {exc.message}") from None
    except (StructspecError, ValueError, TypeError) as exc:
        raise CommandError(f"{_name(path)}: {exc}") from None


def _grammar_of(constraint: Any) -> Any:
    """The grammar of a ``--grammar`` or ``--tags`` constraint."""
    return getattr(constraint, "grammar", constraint)


def _name(path: str) -> str:
    return "<stdin>" if path == "-" else path
