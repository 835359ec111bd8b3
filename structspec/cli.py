"""The ``structspec`` command line: one sub-command per module in :mod:`structspec.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys

from structspec import __version__

# Sub-commands, in the order ``--help`` lists them. Each module provides
# ``add_parser(subparsers)`` and ``run(args) -> int``.
COMMANDS = ("extract", "generate", "serve", "batch", "convert", "lint")


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, object]]:
    parser = argparse.ArgumentParser(
        prog="structspec",
        description="Grammar-constrained generation for language models: extract JSON that follows a "
        "schema, generate text that follows a GBNF grammar, serve an OpenAI-compatible API, convert "
        "JSON Schema / Pydantic / regex to GBNF, lint grammars.",
        epilog="Run 'structspec COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"structspec {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name in COMMANDS:
        module = importlib.import_module(f"structspec.commands.{name}")
        module.add_parser(subparsers)
        modules[name] = module
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    return modules[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
