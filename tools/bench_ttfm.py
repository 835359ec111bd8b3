"""Time-to-first-mask, broken into its steps, over a stratified MaskBench sample.

    python tools/bench_ttfm.py --sample 40 [--seed 0] [--tokenizer llama3] [--clock cpu] [--slowest 5] [--replayable]

For each schema, in one process and in sample order (so later schemas find the shared JSON
helper automata in the process-wide cache, as a server would): `convert_schema` (conversion to
the rule table and its GBNF text), the grammar (compiling the converter's rules, as
`Grammar.from_json_schema` does), `structspec.compile` against the vocabulary
(built once before timing), and the first `fill_bitmask` of a fresh matcher. Prints the median
and mean of each step and of their total over the schemas that convert; schemas the converter
refuses are counted and left out. ``--clock cpu`` times with the process's CPU time (steadier
on a loaded machine than the default wall clock); ``--slowest N`` lists the N slowest schemas
with their steps; ``--replayable`` samples as ``bench_masks.py`` does (schemas with a valid
instance only).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import torch
from _assets import load_case, load_tokenizer, maskbench_files, require_assets, stratified_sample
from bench_masks import has_valid_instance

import structspec
from structspec.jsonschema import SchemaError, convert_schema

STEPS = ("convert", "grammar", "compile", "first mask", "total")


def time_schema(
    schema: dict, vocabulary: structspec.Vocabulary, clock: Callable[[], float] = time.perf_counter
) -> tuple[float, ...]:
    """Seconds spent in each step of ``STEPS`` for one schema."""
    start = clock()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted_schema = convert_schema(schema)
    converted = clock()
    grammar = structspec.Grammar._from_converted(converted_schema)  # Grammar.from_json_schema's second half
    parsed = clock()
    compiled = structspec.compile(grammar, vocabulary)
    ready = clock()
    bitmask = torch.zeros((1, (vocabulary.size + 31) // 32), dtype=torch.int32)
    compiled.matcher().fill_bitmask(bitmask)
    done = clock()
    return converted - start, parsed - converted, ready - parsed, done - ready, done - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=40, help="schemas (stratified over MaskBench subsets)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--slowest", type=int, default=0, help="list this many of the slowest schemas")
    parser.add_argument("--replayable", action="store_true", help="bench_masks.py's sample (a valid instance each)")
    args = parser.parse_args(argv)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    torch.set_num_threads(1)
    assets = require_assets()
    vocabulary = structspec.Vocabulary.from_tokenizer(load_tokenizer(args.tokenizer, assets))
    structspec.compile(structspec.Grammar.from_gbnf('root ::= "x"'), vocabulary)  # builds the token trie
    rows, names, refused = [], [], 0
    keep = has_valid_instance if args.replayable else None
    for path in stratified_sample(maskbench_files(assets), args.sample, args.seed, keep):
        try:
            rows.append(time_schema(load_case(path).schema, vocabulary, clock))
            names.append(path.stem)
        except SchemaError:
            refused += 1
    print(f"{len(rows)} schemas timed, {refused} refused by the converter; tokenizer {args.tokenizer}, "
          f"{args.clock} clock")
    print(f"{'step':12} {'median':>10} {'mean':>10}")
    for i, step in enumerate(STEPS):
        values = [row[i] for row in rows]
        print(f"{step:12} {statistics.median(values) * 1e3:8.1f}ms {statistics.mean(values) * 1e3:8.1f}ms")
    if args.slowest:
        print(f"slowest: {'schema':40} " + " ".join(f"{step:>11}" for step in STEPS))
        for name, row in sorted(zip(names, rows, strict=True), key=lambda item: -item[1][-1])[: args.slowest]:
            print(f"         {name:40} " + " ".join(f"{value * 1e3:9.1f}ms" for value in row))


if __name__ == "__main__":
    main()
