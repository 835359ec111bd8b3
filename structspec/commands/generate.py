"""``structspec generate``: continue a prompt with text that a GBNF grammar accepts.

    structspec generate --grammar answer.gbnf --prompt "Q: 2+2? A:"
    structspec generate --grammar list.gbnf --prompt-file prompt.txt --chat --stats

The text is streamed to stdout as it is decoded. A grammar error is reported as
``FILE:line:column: CODE message`` (exit 2) before any model loads.
"""

from __future__ import annotations

import argparse
import sys

from structspec.commands.options import (
    CommandError,
    add_model_arguments,
    add_sampling_arguments,
    fail,
    load_generator,
    prepare,
    print_stats,
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
    parser.add_argument("--grammar", required=True, metavar="FILE", help="GBNF grammar file ('-' for stdin)")
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
    from structspec.grammar import Grammar

    if args.grammar == "-" and args.prompt_file == "-":
        return fail(CommandError("--grammar and --prompt-file cannot both read stdin"))
    try:
        source = read_text(args.grammar, "grammar")
        try:
            with step("compiling grammar"):
                grammar = Grammar.from_gbnf(source)
        except GrammarError as exc:
            name = "<stdin>" if args.grammar == "-" else args.grammar
            raise CommandError(f"{name}:{exc.line}:{exc.column}: {exc.code} {exc.message}") from None
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
    if not grammar.matches(stream.result.text):
        print(
            f"structspec: error: generation stopped after {args.max_tokens} tokens before the grammar was complete "
            "(raise --max-tokens)",
            file=sys.stderr,
        )
        return 1
    return 0
