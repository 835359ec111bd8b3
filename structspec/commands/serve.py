"""``structspec serve``: an OpenAI-compatible HTTP server with grammar-constrained output.

    structspec serve --port 8000
    structspec serve --model ./my-model --draft-model ./my-draft --max-tokens 1024
    structspec serve --temperature 0.7 --seed 1 --stats   # defaults for requests that leave them out

Endpoints, limits and the concurrency design are described in docs/server.md. Needs the
``server`` extra (``pip install 'structspec[server]'``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from structspec.commands.options import (
    CommandError,
    add_model_arguments,
    add_sampling_flags,
    fail,
    load_generator,
    print_stats,
    sampling_options,
    speculative_config,
)
from structspec.generation.sampling import OptionError

SERVER_EXTRA = "structspec serve needs FastAPI and uvicorn: pip install 'structspec[server]'"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``serve`` sub-command."""
    from structspec.server.limits import Limits

    defaults = Limits()
    parser = subparsers.add_parser(
        "serve",
        help="serve an OpenAI-compatible API with JSON Schema and grammar constraints and tool calling",
        description="Serve POST /v1/chat/completions (response_format json_schema / json_object, a GBNF "
        "'grammar' field, tools / tool_choice / parallel_tool_calls, streaming), POST /v1/extract, "
        "GET /v1/models and GET /health.",
        epilog="example: structspec serve --port 8000   (OpenAI clients: base_url http://127.0.0.1:8000/v1)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    parser.add_argument("--model-id", metavar="NAME", help="model name clients use (default: the model folder's name)")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    parser.add_argument("--stats", action="store_true",
                        help="print each request's speed and draft acceptance on stderr (replies carry them too)")
    add_model_arguments(parser)
    add_sampling_flags(parser.add_argument_group("request defaults", "sampling for requests that leave it out"))
    group = parser.add_argument_group("limits")
    group.add_argument("--max-tokens", type=int, default=defaults.max_tokens, metavar="N",
                       help=f"most tokens a request may ask for (default: {defaults.max_tokens})")
    group.add_argument("--default-max-tokens", type=int, metavar="N",
                       help="tokens generated when a request does not say "
                       f"(default: {defaults.default_max_tokens}, or --max-tokens if smaller)")
    group.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes, metavar="N",
                       help=f"largest request body (default: {defaults.max_body_bytes})")
    group.add_argument("--max-schema-bytes", type=int, default=defaults.max_schema_bytes, metavar="N",
                       help=f"largest JSON Schema, as compact JSON (default: {defaults.max_schema_bytes})")
    group.add_argument("--max-schema-depth", type=int, default=defaults.max_schema_depth, metavar="N",
                       help=f"deepest schema nesting (default: {defaults.max_schema_depth})")
    group.add_argument("--max-grammar-bytes", type=int, default=defaults.max_grammar_bytes, metavar="N",
                       help=f"largest GBNF grammar (default: {defaults.max_grammar_bytes})")
    group.add_argument("--max-queue", type=int, default=defaults.max_queue, metavar="N",
                       help=f"requests queued or running at once before HTTP 503 (default: {defaults.max_queue})")
    group.add_argument("--max-batch", type=int, default=defaults.max_batch, metavar="N",
                       help="most requests decoded together, one forward a step for all of them; 1 decodes one "
                       f"request at a time (default: {defaults.max_batch})")
    group.add_argument("--cache-size", type=int, default=defaults.cache_size, metavar="N",
                       help=f"compiled grammars kept in the LRU cache (default: {defaults.cache_size})")
    group.add_argument("--cache-bytes", type=int, default=defaults.cache_bytes, metavar="N",
                       help="estimated bytes the cached compiled grammars may hold, token masks included "
                       f"(default: {defaults.cache_bytes})")
    group.add_argument("--compile-timeout", type=float, default=defaults.compile_timeout, metavar="SECONDS",
                       help=f"longest a schema or grammar may take to compile (default: {defaults.compile_timeout:g})")
    group.add_argument("--compile-processes", type=int, default=defaults.compile_processes, metavar="N",
                       help=f"processes compiling grammars at once (default: {defaults.compile_processes})")
    group.add_argument("--compile-process-bytes", type=int, default=defaults.compile_process_bytes, metavar="N",
                       help="resident bytes a compile process may keep after a job before a fresh one replaces it "
                       f"(default: {defaults.compile_process_bytes})")


def run(args: argparse.Namespace) -> int:
    """Load the model and serve until interrupted; returns the exit status."""
    try:
        import uvicorn

        from structspec.server.app import create_app
    except ImportError:
        print(f"structspec: error: {SERVER_EXTRA}", file=sys.stderr)
        return 2
    from structspec.server.engine import Engine

    try:
        limits = _limits(args)
        defaults = sampling_options(args, max_new_tokens=limits.default_max_tokens)
        generator = load_generator(args)
    except (CommandError, ValueError) as exc:
        return fail(exc)
    model_id = args.model_id or (Path(args.model).name if args.model else "structspec-demo")
    engine = Engine(generator, model_id, speculative_config(args), defaults=defaults,
                    on_stats=print_stats if args.stats else None)
    app = create_app(engine, limits)
    print(f"structspec: serving {model_id} on http://{args.host}:{args.port}/v1", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def _limits(args: argparse.Namespace) -> Any:
    """The :class:`~structspec.server.limits.Limits` the flags set; a bad one is a
    :class:`CommandError` naming its flag."""
    from structspec.server.limits import Limits

    try:
        return Limits(
            max_body_bytes=args.max_body_bytes,
            max_schema_bytes=args.max_schema_bytes,
            max_schema_depth=args.max_schema_depth,
            max_grammar_bytes=args.max_grammar_bytes,
            max_tokens=args.max_tokens,
            default_max_tokens=(min(Limits.default_max_tokens, args.max_tokens) if args.default_max_tokens is None
                                else args.default_max_tokens),
            max_queue=args.max_queue,
            max_batch=args.max_batch,
            cache_size=args.cache_size,
            cache_bytes=args.cache_bytes,
            compile_timeout=args.compile_timeout,
            compile_processes=args.compile_processes,
            compile_process_bytes=args.compile_process_bytes,
        )
    except OptionError as exc:  # every limit has the flag of its name
        raise CommandError(f"argument --{exc.field.replace('_', '-')}: {exc.problem}") from None
