"""Batched ``Generator`` against one request after the other, on extraction prompts.

    python tools/bench_batching.py [--prompts 16] [--repeats 3] [--max-new-tokens 128] [--threads 1]
                                   [--model PATH] [--draft-model PATH] [--device cpu] [--json out.json]

The prompts are documents of the held-out split of the demo models' extraction corpus
(``tools/make_extraction_corpus.py``), in two workloads: ``distinct`` (each document with its own
schema, as the corpus asks) and ``shared`` (every document under one schema, as
``structspec batch`` runs). For each decoding method (plain; speculative with forced + n-gram
drafts; with every source) and workload, every cycle decodes all prompts one after the other
with ``Generator.generate`` and then together with ``Generator.generate_batch`` (a batch of all of
them), greedily; the two are interleaved so that both see the same machine. Reported: tokens/s
of each (medians over cycles), the median of the per-cycle ratios, and whether every batched
output equals its sequential one token for token. Defaults: the bundled demo pair, one torch thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from make_extraction_corpus import DOMAINS, generate

from structspec.generation import Generator, SpecConfig
from structspec.generation.sequence import Request
from structspec.models import load
from structspec.models.prompt import extraction_messages


def shared_schema(domain: str) -> dict[str, Any]:
    """Every field of one corpus domain, all required."""
    fields = next(d for d in DOMAINS if d.name == domain).fields
    return {"type": "object", "properties": {f.key: f.schema for f in fields},
            "required": [f.key for f in fields], "additionalProperties": False}


def workloads(count: int, seed: int) -> dict[str, list[tuple[Any, dict[str, Any]]]]:
    """``distinct``: held-out documents with their own schemas; ``shared``: documents of one
    domain under that domain's full schema."""
    examples = generate(count * 12, seed=seed, heldout=True)
    distinct = [(extraction_messages(e.text, e.schema), e.schema) for e in examples[:count]]
    schema = shared_schema("contact")
    contacts = [e for e in examples if e.domain == "contact"][:count]
    shared = [(extraction_messages(e.text, schema), schema) for e in contacts]
    return {"distinct": distinct, "shared": shared}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--draft-model", default="demo-draft")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    model, tokenizer = load(args.model, device=args.device, dtype=args.dtype)
    draft, _ = load(args.draft_model, device=args.device, dtype=args.dtype)
    gen = Generator(model, tokenizer, draft_model=draft)
    methods = {"plain": None, "forced+ngram": SpecConfig(sources=("forced", "ngram")), "all": SpecConfig()}
    loads = workloads(args.prompts, args.seed)
    for prompts in loads.values():
        for _, schema in prompts:
            gen.compile(schema)
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for cycle in range(args.repeats + 1):  # the first cycle warms masks and caches up
        for load_name, prompts in loads.items():
            requests = [Request(prompt, schema, max_new_tokens=args.max_new_tokens) for prompt, schema in prompts]
            for method, spec in methods.items():
                start = time.perf_counter()
                alone = [gen.generate(r.prompt, r.constraint, max_new_tokens=r.max_new_tokens, speculative=spec)
                         for r in requests]
                sequential = time.perf_counter() - start
                start = time.perf_counter()
                together = gen.generate_batch(requests, speculative=spec, max_batch=len(requests))
                batched = time.perf_counter() - start
                tokens = sum(r.stats.tokens for r in alone)
                same = all(a.token_ids == b.token_ids for a, b in zip(alone, together, strict=True))
                if cycle:
                    runs.setdefault((load_name, method), []).append(
                        {"tokens": tokens, "sequential": tokens / sequential, "batched": tokens / batched,
                         "ratio": sequential / batched, "identical": same})
    print(f"{args.prompts} prompts, {args.repeats} cycles, max {args.max_new_tokens} new tokens, "
          f"{args.threads} torch thread(s), device {args.device}")
    print("| workload | method | tokens | sequential tok/s | batched tok/s | batched / sequential (paired) "
          "| identical |")
    print("|---|---|---:|---:|---:|---:|---|")
    report = []
    for (load_name, method), cycles in runs.items():
        row = {"workload": load_name, "method": method, "tokens": cycles[0]["tokens"],
               "sequential": statistics.median(c["sequential"] for c in cycles),
               "batched": statistics.median(c["batched"] for c in cycles),
               "ratio": statistics.median(c["ratio"] for c in cycles),
               "identical": all(c["identical"] for c in cycles)}
        report.append(row)
        print(f"| {load_name} | {method} | {row['tokens']} | {row['sequential']:.1f} | {row['batched']:.1f} | "
              f"{row['ratio']:.2f}x | {'yes' if row['identical'] else 'NO'} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
