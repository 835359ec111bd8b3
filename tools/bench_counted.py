"""Counted repetition: does a mask inside a ``maxLength`` string cost what one inside an
unbounded string costs, whatever the count?

    python tools/bench_counted.py [--values 12] [--counts 1000,10000] [--seed 0]

Each grammar is one JSON string (``{"type": "string"}``, then ``"maxLength": N`` for each
count), compiled against the Llama-3 tokenizer. The same seeded prose values
(``tools/bench_freetext.py``, 600-1,000 characters, cut to fit the smallest count) are
replayed token by token; before each token the mask of the current state is computed. Inside
an unbounded string every position is one state, so all but its first mask are cache hits; in
a counted string every position is a new state. Two figures per grammar, both in CPU time of
this thread (``time.thread_time``, so other processes on the machine do not count):

* ``computed``: the mask computed from the state with the whole-state cache bypassed (the
  native core's sweep over its run-state tables, which stay warm as in generation, plus the
  token references and end of sequence), i.e. what a new position costs;
* ``as used``: ``Matcher.mask_words`` as generation calls it, caches included.

Also: compile time of each grammar (``Grammar.from_gbnf`` + ``structspec.compile``) and the
native tables' bytes after the replay.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import numpy as np
from _assets import require_assets, tokenizer_dir
from bench_freetext import prose
from transformers import AutoTokenizer

import structspec
from structspec import Grammar, Vocabulary
from structspec.jsonschema import schema_to_gbnf
from structspec.tokens.trie import token_trie


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f}ms"


def replay(compiled: structspec.CompiledGrammar, docs: list[list[int]]) -> tuple[list[float], list[float]]:
    """CPU seconds per mask, computed (whole-state cache bypassed) and as used."""
    computed: list[float] = []
    used: list[float] = []
    for tokens in docs:
        matcher = compiled.matcher()
        for token in tokens:
            start = time.thread_time()
            compiled._compute(matcher.state)
            computed.append(time.thread_time() - start)
            start = time.thread_time()
            matcher.mask_words()
            used.append(time.thread_time() - start)
            if not matcher.accept_token(token):
                raise SystemExit(f"token {token} refused: the replay does not fit the grammar")
    return computed, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=12, help="prose values replayed per grammar")
    parser.add_argument("--counts", default="1000,10000", help="maxLength values to compare")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir("llama3", require_assets())))
    vocab = Vocabulary.from_tokenizer(tokenizer)
    token_trie(vocab)  # built once per vocabulary: kept out of the first grammar's compile time
    rng = random.Random(args.seed)
    limit = min(counts)
    values = [prose(rng, min(600, limit), min(1000, limit)) for _ in range(args.values)]
    docs = [tokenizer.encode(json.dumps(value, ensure_ascii=False), add_special_tokens=False) for value in values]
    print(f"{len(values)} values, {sum(map(len, docs))} tokens each grammar, Llama-3; CPU time per mask")
    print(f"{'grammar':18} {'compile':>9} {'computed: mean':>15} {'p50':>7} {'p99':>7} {'max':>7}"
          f" {'as used: mean':>14} {'p99':>7} {'tables':>8}")
    figures = {}
    for count in [None, *counts]:
        schema = {"type": "string"} if count is None else {"type": "string", "maxLength": count}
        start = time.perf_counter()
        compiled = structspec.compile(Grammar.from_gbnf(schema_to_gbnf(schema)), vocab)
        compile_s = time.perf_counter() - start
        computed, used = replay(compiled, docs)
        name = "unbounded" if count is None else f"maxLength {count}"
        row = {"compile_s": compile_s, "computed_mean": statistics.fmean(computed), "computed_p50": _pct(computed, 50),
               "computed_p99": _pct(computed, 99), "computed_max": max(computed), "used_mean": statistics.fmean(used),
               "used_p99": _pct(used, 99), "table_bytes": compiled._runner.nbytes}
        figures[name] = row
        print(f"{name:18} {compile_s:>8.2f}s {_us(row['computed_mean']):>15} {_us(row['computed_p50']):>7}"
              f" {_us(row['computed_p99']):>7} {_us(row['computed_max']):>7} {_us(row['used_mean']):>14}"
              f" {_us(row['used_p99']):>7} {row['table_bytes'] / 2**20:>6.1f}MiB")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=1)


if __name__ == "__main__":
    main()
