"""``structspec convert``: print the GBNF for a JSON Schema, a Pydantic model or a regex.

    structspec convert SCHEMA.json [--whitespace flexible] [--property-order any] [--no-strict]
    structspec convert --pydantic package.module:Model
    structspec convert --regex '^[a-z]+$'
    structspec convert SCHEMA.json --source doc.txt [--grounded]

Rule names follow schema paths (``root-address-street``). Input we cannot enforce exactly is
reported on stderr with its JSON pointer and keyword (exit status 2); with ``--no-strict`` it
is approximated instead and every approximation is listed on stderr. ``--source`` names the
text that ``"x-grounded": true`` strings (with ``--grounded``, every plain string) copy spans
of; their rules are given as automata and print as comments (docs/grounded.md).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from structspec.commands.options import CommandError, fail, import_model, read_text, schema_error
from structspec.errors import SchemaError, SchemaRelaxedWarning, StructspecError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``convert`` sub-command."""
    parser = subparsers.add_parser(
        "convert",
        help="print the GBNF grammar for a JSON Schema, Pydantic model or regex",
        description="Convert a JSON Schema file ('-' for stdin), a Pydantic model or a regular "
        "expression to readable GBNF. Exit status: 0 success, 2 unsupported or bad input.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("schema", nargs="?", metavar="SCHEMA.json", help="JSON Schema file")
    source.add_argument("--pydantic", metavar="MODULE:CLASS", help="a pydantic BaseModel")
    source.add_argument("--regex", metavar="PATTERN", help="a regular expression (full match)")
    parser.add_argument(
        "--whitespace",
        choices=("compact", "flexible"),
        default="compact",
        help="layout between JSON tokens (default: compact)",
    )
    parser.add_argument(
        "--property-order",
        choices=("schema", "any"),
        default="schema",
        help="declared properties in schema order (default) or in any order (to check documents)",
    )
    parser.add_argument("--source", metavar="FILE", help="text that grounded strings copy spans of (docs/grounded.md)")
    parser.add_argument("--grounded", action="store_true",
                        help="with --source: every string without enum, const, format or pattern is grounded")
    parser.add_argument(
        "--no-strict",
        dest="strict",
        action="store_false",
        help="approximate what cannot be enforced exactly, listing it on stderr",
    )


def run(args: argparse.Namespace) -> int:
    """Convert and print; returns the exit status."""
    from structspec.jsonschema import Grounding, schema_to_gbnf
    from structspec.jsonschema.pydantic_models import model_schema
    from structspec.regex.convert import regex_to_gbnf

    try:
        if args.grounded and args.source is None:
            raise ValueError("--grounded needs --source FILE, the text to ground strings in")
        grounding = None
        if args.source is not None:
            grounding = Grounding(read_text(args.source, "source"), every_string=args.grounded)
        if args.regex is not None:
            text = regex_to_gbnf(args.regex)
        else:
            schema = model_schema(import_model(args.pydantic)) if args.pydantic else _load_schema(args.schema)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", SchemaRelaxedWarning)
                text = schema_to_gbnf(
                    schema, whitespace=args.whitespace, strict=args.strict, property_order=args.property_order,
                    grounding=grounding,
                )
            for warning in caught:
                print(f"structspec: warning: {warning.message}", file=sys.stderr)
    except SchemaError as exc:
        return fail(schema_error("", exc))
    except (CommandError, StructspecError, ValueError, TypeError, ImportError, OSError) as exc:
        print(f"structspec: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


def _load_schema(path: str) -> Any:
    from structspec.jsonschema.convert import load_schema_text

    return load_schema_text(read_text(path, "schema"))
