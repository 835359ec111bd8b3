"""Compile time and first masks of a grounded schema over a long source text, step by step.

    python tools/bench_grounded.py --chars 20000 --repeats 7 [--tokenizer llama3] [--cold-schema]

The source text is held-out extraction documents (tools/make_extraction_corpus.py: names with
accents, CJK, addresses, amounts, e-mails) joined until it has ``--chars`` characters, a
different text each repeat (so no cache of a text helps, as with a new request), and the schema
is the bundled invoice schema with every plain string grounded. The rest is warm, as in a
server: the vocabulary and its token trie, and the automata of the schema's other rules, with
what exists after warming frozen out of the cycle collector's sight (``gc.freeze``, as ``structspec
serve`` does at start-up: docs/server.md), so that a full collection walks only what the step
creates, not the 128k-token vocabulary. Steps:
``suffix automaton`` (building it alone, for the breakdown), ``convert`` (schema to GBNF plus the
grounded rule's automata, suffix automaton included), ``from_gbnf`` (rules to the rule set),
``compile`` (binding to the vocabulary), ``first mask`` (the mask before any token), and
``value mask``: the mask at the start of the first grounded value, the one that sweeps every
token spelling a span of the text. Prints medians (and the automaton sizes).

A schema seen before keeps its grammar text, rule table and compile plan (docs/grounded.md), so
a new text costs its automata; ``--cold-schema`` empties those caches before each repeat, for
the first text of a schema (the rule automata stay warm, as after any earlier schema).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from _assets import load_tokenizer, require_assets

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import structspec
from structspec.ir.suffix import SuffixAutomaton
from structspec.jsonschema import Grounding, convert_schema

REPO = Path(__file__).resolve().parents[1]
STEPS = ("suffix automaton", "convert", "from_gbnf", "compile", "first mask", "total", "value mask")


def source_text(chars: int, seed: int) -> str:
    """Held-out corpus texts joined by blank lines up to ``chars`` characters."""
    from make_extraction_corpus import generate

    parts, size, batch = [], 0, 0
    while size < chars:
        for example in generate(64, seed * 1000 + batch, heldout=True):
            parts.append(example.text)
            size += len(example.text) + 2
        batch += 1
    return "\n\n".join(parts)[:chars]


def forget_schemas() -> None:
    """Empty the caches that let a schema seen before skip its conversion and planning."""
    from structspec.grammar import compiler, grammar
    from structspec.jsonschema import convert

    convert._TEMPLATES.clear()
    grammar._TABLES.clear()
    compiler._PLANS.clear()


def time_once(schema: dict, text: str, vocabulary: structspec.Vocabulary) -> tuple[list[float], dict[str, int]]:
    start = time.perf_counter()
    SuffixAutomaton(text)
    sam = time.perf_counter()
    converted = convert_schema(schema, grounding=Grounding(text, every_string=True))
    t_convert = time.perf_counter()
    grammar = structspec.Grammar.from_gbnf(converted.text, automata=converted.automata)
    t_gbnf = time.perf_counter()
    compiled = structspec.compile(grammar, vocabulary)
    t_compile = time.perf_counter()
    bitmask = torch.zeros((1, (vocabulary.size + 31) // 32), dtype=torch.int32)
    matcher = compiled.matcher()
    matcher.fill_bitmask(bitmask)
    t_first = time.perf_counter()
    for token in compiled.forced_tokens(matcher.state):  # to the first grounded value: '{"invoice_number":"'
        matcher.accept_token(token)
    t_value = time.perf_counter()
    matcher.fill_bitmask(bitmask)
    done = time.perf_counter()
    steps = [sam - start, t_convert - sam, t_gbnf - t_convert, t_compile - t_gbnf, t_first - t_compile,
             t_first - sam, done - t_value]
    sizes = {name: automaton.n_states for name, automaton in converted.automata.items()}
    sizes["rule set"] = grammar.ruleset.n_states
    return steps, sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=20000, help="length of the source text")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--cold-schema", action="store_true", help="a schema never seen before at every repeat")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    assets = require_assets()
    vocabulary = structspec.Vocabulary.from_tokenizer(load_tokenizer(args.tokenizer, assets))
    schema = json.loads((REPO / "examples" / "invoice.schema.json").read_text(encoding="utf-8"))
    structspec.compile(structspec.Grammar.from_json_schema(schema), vocabulary)  # warm: trie, helper automata
    time_once(schema, source_text(args.chars, 999), vocabulary)  # warm: code paths
    gc.collect()
    gc.freeze()  # what lives as long as a server, out of the collector's sight (structspec.server.collector)
    rows = []
    for repeat in range(args.repeats):
        if args.cold_schema:
            forget_schemas()
        steps, sizes = time_once(schema, source_text(args.chars, repeat), vocabulary)
        rows.append(steps)
    print(f"grounded invoice schema over {args.chars:,} characters, tokenizer {args.tokenizer} "
          f"({vocabulary.size:,} ids), {args.repeats} texts, {'cold' if args.cold_schema else 'warm'} schema; "
          f"automaton states {sizes}")
    print(f"{'step':18} {'median':>10} {'min':>10}")
    for i, step in enumerate(STEPS):
        values = [row[i] for row in rows]
        print(f"{step:18} {statistics.median(values) * 1e3:8.1f}ms {min(values) * 1e3:8.1f}ms")


if __name__ == "__main__":
    main()
