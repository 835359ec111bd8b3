"""``structspec batch``: extract JSON following a schema from every document of a file.

    structspec batch --schema S.json --input docs.jsonl --output out.jsonl
    structspec batch --schema S.json --input docs.parquet --output out.jsonl --ray            # a local Ray
    structspec batch --schema S.json --input docs.jsonl --output out.jsonl --ray auto --actors 8
    structspec batch --schema S.json --input docs.jsonl --output out.jsonl --grounded         # values copy the text

Every input record gets exactly one output line, ``{"id": ..., "data": ...}`` or ``{"id": ...,
"error": ...}``, appended as it finishes (in completion order). Running again with the same
output file skips the records done. See docs/batch.md.
"""

from __future__ import annotations

import argparse
import sys

from structspec.commands.options import (
    CommandError,
    add_model_arguments,
    check_placement,
    fail,
    read_json,
    require_generation,
    schema_error,
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``batch`` sub-command."""
    parser = subparsers.add_parser(
        "batch",
        help="extract JSON following a schema from every document of a JSONL or Parquet file",
        description="Extract JSON following the schema from each record's text, with batched decoding on this "
        "machine or on Ray. Every record gets one output line (its data or its error); a rerun skips the records "
        "done. Exit status: 0 every record extracted, 1 some records have errors, 2 bad input.",
        epilog="example: structspec batch --schema invoice.json --input docs.jsonl --output out.jsonl",
    )
    parser.add_argument("--schema", required=True, metavar="SCHEMA.json", help="JSON Schema the output must follow")
    parser.add_argument("--input", required=True, metavar="FILE", help="records: .jsonl (one JSON object a line) "
                        "or .parquet (needs pyarrow)")
    parser.add_argument("--output", required=True, metavar="FILE", help="output lines, appended (JSONL)")
    parser.add_argument("--text-field", default="text", metavar="NAME", help="field holding the text (default: text)")
    parser.add_argument("--id-field", default="id", metavar="NAME",
                        help="field holding the record's id (default: id; a record without one is numbered by "
                        "its position)")
    parser.add_argument("--instructions", metavar="TEXT", help="what to extract, in words (optional)")
    parser.add_argument("--grounded", action="store_true",
                        help="every string value without enum, const, format or pattern must copy a span of the "
                        "record's text (fields marked \"x-grounded\": true always do; docs/grounded.md)")
    parser.add_argument("--max-tokens", type=int, default=512, metavar="N",
                        help="most tokens per answer (default: 512)")
    parser.add_argument("--max-batch", type=int, default=16, metavar="N",
                        help="documents decoded together by each model (default: 16)")
    parser.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                        help="run on Ray Data: a local Ray when no ADDRESS is given, else the cluster at ADDRESS "
                        "('auto' or ray://host:10001); needs pip install 'structspec[ray]'")
    parser.add_argument("--actors", type=int, default=2, metavar="N", help="with --ray: model replicas (default: 2)")
    parser.add_argument("--cpus-per-actor", type=float, default=1.0, metavar="N",
                        help="with --ray: CPUs each replica reserves (default: 1)")
    parser.add_argument("--gpus-per-actor", type=float, default=0.0, metavar="N",
                        help="with --ray: GPUs each replica reserves (default: 0)")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run the job; returns the exit status."""
    from structspec.batch import job
    from structspec.batch.extractor import grounds
    from structspec.batch.records import Output, read_records

    try:
        for name in ("max_tokens", "max_batch", "actors"):
            if getattr(args, name) < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
        schema = _schema(args.schema, args.grounded)
        try:
            records = read_records(args.input, args.text_field, args.id_field)
        except OSError as exc:
            raise CommandError(f"cannot read input {args.input}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if grounds(schema, args.grounded):  # each record's text is its own source: check over the first
            _check(args.schema, schema, next((r.text for r in records if r.problem is None), ""), args.grounded)
        if args.ray:  # the device is the actors' to check: the cluster's machines may differ from this one
            require_generation()
        else:
            check_placement(args)  # before the output file is made
        try:
            output = Output(args.output)
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc)) from None
    except CommandError as exc:
        return fail(exc)
    settings = {"schema": schema, "model": args.model, "draft_model": args.draft_model, "no_draft": args.no_draft,
                "device": args.device, "dtype": args.dtype, "max_tokens": args.max_tokens,
                "max_batch": args.max_batch, "speculative": args.speculative, "instructions": args.instructions,
                "grounded": args.grounded}
    try:
        rows = _rows_on_ray(args, settings) if args.ray else _rows_here(settings)
        with _progress(len(records) - sum(r.id in output.done for r in records)) as bar:
            tally = job.run(records, output, rows, bar)
    except (CommandError, ImportError, ValueError, OSError, RuntimeError) as exc:
        return fail(exc)
    finally:
        output.close()
    print(f"structspec: {tally.line()}", file=sys.stderr)
    return 1 if tally.errors else 0


def _schema(path: str, grounded: bool) -> dict:
    """The schema, checked before any model loads (one that grounds strings is checked once the
    records are read: see :func:`_check`)."""
    from structspec.batch.extractor import grounds

    schema = read_json(path, "schema")
    if not isinstance(schema, dict):
        raise CommandError(f"{path}: a JSON Schema must be a JSON object")
    if not grounds(schema, grounded):
        _check(path, schema, None, grounded)
    return schema


def _check(path: str, schema: dict, source: str | None, grounded: bool) -> None:
    """Refuse a schema that does not convert (grounded strings in ``source``), naming where."""
    from structspec.errors import SchemaError
    from structspec.grammar import Grammar

    try:
        Grammar.from_json_schema(schema, source=source, grounded=grounded)
    except SchemaError as exc:
        raise schema_error(path, exc) from None


def _rows_here(settings: dict):
    def rows(pending):
        if not pending:
            return iter(())
        from structspec.batch.extractor import Extractor
        from structspec.commands.progress import step

        with step("loading the model"):
            try:
                extractor = Extractor(**settings)
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot load the model: {exc}") from None
        return extractor.run(pending)

    return rows


def _rows_on_ray(args: argparse.Namespace, settings: dict):
    from structspec.batch.ray_job import extract_on_ray

    address = None if args.ray == "local" else args.ray

    def rows(pending):
        return extract_on_ray(pending, settings, address=address, actors=args.actors, batch_size=args.max_batch,
                              cpus_per_actor=args.cpus_per_actor, gpus_per_actor=args.gpus_per_actor)

    return rows


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="doc", desc="structspec batch", file=sys.stderr, disable=None, dynamic_ncols=True)
