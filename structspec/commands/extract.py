"""``structspec extract``: pull JSON that follows a schema out of a text, on a local model.

    structspec extract --schema invoice.schema.json --text invoice.txt
    structspec extract --pydantic mypkg.models:Invoice --text - < invoice.txt

The schema is checked and compiled before any model loads, so bad input fails fast (exit 2,
naming the file and the JSON pointer). ``--grounded`` makes every plain string value copy a
span of the text (docs/grounded.md). The answer is printed as JSON on stdout; ``--stats``
adds speed and draft acceptance on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from structspec.commands.options import (
    CommandError,
    add_model_arguments,
    add_sampling_arguments,
    fail,
    import_model,
    load_generator,
    prepare,
    print_stats,
    read_json,
    read_text,
    run_generation,
    schema_error,
)
from structspec.commands.progress import step
from structspec.errors import SchemaError, StructspecError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``extract`` sub-command."""
    parser = subparsers.add_parser(
        "extract",
        help="extract JSON following a schema from a text (the main job)",
        description="Read a text and print JSON extracted from it that is guaranteed to follow the schema. "
        "Exit status: 0 success, 1 generation did not finish, 2 bad input.",
        epilog="example: structspec extract --schema invoice.json --text invoice.txt --stats",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--schema", metavar="SCHEMA.json", help="JSON Schema file the output must follow")
    source.add_argument("--pydantic", metavar="MODULE:CLASS", help="Pydantic model the output must validate as")
    parser.add_argument("--text", default="-", metavar="FILE", help="text to read, '-' for stdin (default: -)")
    parser.add_argument("--instructions", metavar="TEXT", help="what to extract, in words (optional)")
    parser.add_argument(
        "--grounded", action="store_true",
        help="every string value without enum, const, format or pattern must copy a span of the text "
        "(fields marked \"x-grounded\": true always do; docs/grounded.md)",
    )
    parser.add_argument("--compact", action="store_true", help="print the JSON on one line")
    add_model_arguments(parser)
    add_sampling_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Extract and print; returns the exit status."""
    from structspec.models.prompt import extraction_messages

    try:
        schema, model_class, where = _schema(args)
        if args.text == "-" and sys.stdin.isatty():
            print("structspec: reading the text from stdin (end with Ctrl-D, or pass --text FILE)", file=sys.stderr)
        text = read_text(args.text, "text")
        try:
            messages = extraction_messages(text, schema, args.instructions)
        except ValueError as exc:
            raise CommandError(f"{'stdin' if args.text == '-' else args.text}: {exc}") from None
        grammar = _grammar(schema, where, text, args.grounded)
        generator = load_generator(args)
        prepare(generator, grammar)
        result = run_generation(generator, messages, grammar, args, "the text")
    except (CommandError, StructspecError) as exc:
        return fail(exc)
    if args.stats:
        print_stats(result.stats)
    try:
        value = json.loads(result.text)
    except json.JSONDecodeError:
        shortest = generator.compile(grammar)[1].matcher().tokens_to_finish()
        print(
            f"structspec: error: generation stopped after {args.max_tokens} tokens before the JSON was complete "
            f"(the shortest answer the schema allows may take up to {shortest:g} tokens: raise --max-tokens)",
            file=sys.stderr,
        )
        return 1
    if result.stats.budget_cuts:
        print(
            f"structspec: warning: the answer was closed early to fit in --max-tokens {args.max_tokens} "
            "(raise it for the model's full answer)",
            file=sys.stderr,
        )
    if model_class is not None:
        from structspec.jsonschema.pydantic_models import validate_instance

        try:
            validate_instance(model_class, result.text)
        except StructspecError as exc:
            return fail(exc)
    print(json.dumps(value, ensure_ascii=False, indent=None if args.compact else 2))
    return 0


def _schema(args: argparse.Namespace) -> tuple[dict[str, Any], type | None, str]:
    """The schema, the Pydantic class (or None) and where the schema came from."""
    from structspec.jsonschema.pydantic_models import model_schema

    if args.pydantic:
        model_class = import_model(args.pydantic)
        schema, where = model_schema(model_class), args.pydantic
    else:
        model_class, schema, where = None, read_json(args.schema, "schema"), args.schema
    if not isinstance(schema, dict):
        raise CommandError(f"{where}: a JSON Schema must be a JSON object")
    return schema, model_class, where


def _grammar(schema: dict[str, Any], where: str, text: str, grounded: bool) -> Any:
    """The compiled grammar, with grounded strings copying spans of ``text``."""
    from structspec.grammar import Grammar

    try:
        with step("compiling schema"):
            return Grammar.from_json_schema(schema, source=text, grounded=grounded)
    except SchemaError as exc:
        raise schema_error(where, exc) from None
