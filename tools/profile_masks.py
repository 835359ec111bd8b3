"""Where the slow token masks come from: a MaskBench replay that says what each slow mask did.

    python tools/profile_masks.py [--sample 10] [--seed 0] [--max-tokens 400] [--top 30] [--no-gc]

The same replay as `tools/bench_masks.py` (stratified MaskBench sample, valid instances,
compact JSON, Llama-3 tokenizer, structspec only, one process): before each token the mask is
computed and timed. Each mask is classified by the work it took: a whole-state cache hit, a
top-frame cache hit (the mask of the stack's top frames, see docs/masks.md), or a sweep of the
token trie by the native core, counted in trie nodes expanded and run states created (new
transition rows), with its wall-clock and CPU time (process time, which preemption on a loaded
machine does not inflate). The slowest masks are listed with the text before them and
those counts: the profile that shows what bounds the tail (docs/masks.md). ``--no-gc`` turns Python's cyclic garbage
collector off for the replay: a collection (hundreds of milliseconds once torch and transformers
are loaded) lands in whichever call is running, so it sets the slowest masks of a run.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _assets import compact_json, load_case, load_tokenizer, maskbench_files, stratified_sample

import structspec
from structspec.errors import SchemaError
from structspec.grammar import Grammar
from structspec.jsonschema import schema_to_gbnf
from structspec.masks.compiled import CompiledGrammar
from structspec.tokens.vocabulary import Vocabulary


@dataclass
class MaskCall:
    """One timed mask and the native work it took."""

    seconds: float
    cpu_seconds: float  # process CPU time: what preemption on a loaded machine does not inflate
    schema: str
    before: str
    cached: bool
    top: bool = False  # taken from the top-frame cache, no sweep
    expanded: int = 0  # trie nodes expanded by the sweep
    created: int = 0  # run states created (determinized on the way)

    @property
    def kind(self) -> str:
        if self.cached:
            return "whole-state cache hit"
        if self.top:
            return "top-frame cache hit"
        return "sweep, new run states" if self.created else "sweep over known run states"


def replay(paths: list[Path], vocabulary: Vocabulary, tokenizer: object, max_tokens: int) -> list[MaskCall]:
    """Every mask of every valid instance of the schemas that compile, in order."""
    calls: list[MaskCall] = []
    for path in paths:
        case = load_case(path)
        try:
            compiled = structspec.compile(Grammar.from_gbnf(schema_to_gbnf(case.schema)), vocabulary)
        except SchemaError:
            continue
        for instance in case.instances:
            if instance.valid:
                calls += _replay_text(compiled, case.name, compact_json(instance.data), tokenizer, max_tokens)
    return calls


def _replay_text(compiled: CompiledGrammar, name: str, text: str, tokenizer: object, max_tokens: int) -> list[MaskCall]:
    calls = []
    matcher = compiled.matcher()
    native = compiled._runner._native
    done = b""
    for token in tokenizer.encode(text, add_special_tokens=False)[:max_tokens]:  # type: ignore[attr-defined]
        cached = compiled.known_mask_words(matcher.state) is not None
        expanded, runs, tops = native.expanded, native.n_run_states, compiled._tops.hits
        cpu_start, start = time.process_time(), time.perf_counter()
        matcher.mask_words()
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        created = max(native.n_run_states - runs, 0)  # (a cleared table restarts the count)
        swept = native.expanded - expanded
        top = not cached and not swept and compiled._tops.hits > tops
        calls.append(MaskCall(seconds, cpu_seconds, name, done[-40:].decode("utf-8", "replace"), cached, top, swept,
                              created))
        if not matcher.accept_token(token):
            break
        done += compiled.vocabulary.token_bytes[token] or b""
    return calls


def report(calls: list[MaskCall], top: int) -> str:
    """Quantiles, time by kind of mask, and the slowest masks."""
    times = sorted(c.seconds for c in calls)
    q = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    lines = [f"{len(calls)} masks: p50 {q[49] * 1e6:.1f} µs, p90 {q[89] * 1e3:.2f} ms, p99 {q[98] * 1e3:.2f} ms, "
             f"max {times[-1] * 1e3:.1f} ms, total {sum(times):.2f} s"]
    cpu = sorted(c.cpu_seconds for c in calls)
    lines.append(f"CPU time: p50 {_quantile(cpu, 0.5) * 1e6:.1f} µs, p90 {_quantile(cpu, 0.9) * 1e6:.0f} µs, "
                 f"p99 {_quantile(cpu, 0.99) * 1e6:.0f} µs, max {cpu[-1] * 1e6:.0f} µs")
    kinds: dict[str, list[MaskCall]] = {}
    for call in calls:
        kinds.setdefault(call.kind, []).append(call)
    for kind, group in sorted(kinds.items(), key=lambda item: -sum(c.seconds for c in item[1])):
        spent = sorted(c.cpu_seconds for c in group)
        lines.append(f"  {kind:<28} {len(group) / len(calls):6.1%} of masks, wall p50 "
                     f"{statistics.median(c.seconds for c in group) * 1e6:7.1f} µs, CPU p50 "
                     f"{_quantile(spent, 0.5) * 1e6:7.1f} p90 {_quantile(spent, 0.9) * 1e6:7.1f} p99 "
                     f"{_quantile(spent, 0.99) * 1e6:7.1f} µs, total {sum(c.seconds for c in group):6.2f} s")
    lines.append(f"slowest {top}: ms, schema, text before, trie nodes expanded, run states created")
    for call in sorted(calls, key=lambda c: -c.seconds)[:top]:
        lines.append(f"  {call.seconds * 1e3:7.2f}  {call.schema[:30]:<30} {call.before[-30:]!r:<34} "
                     f"{call.expanded:>7} {call.created:>6}")
    return "\n".join(lines)


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=10, help="stratified MaskBench sample size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=400, help="tokens replayed per instance")
    parser.add_argument("--top", type=int, default=30, help="slowest masks listed")
    parser.add_argument("--no-gc", action="store_true", help="no cyclic garbage collection during the replay")
    args = parser.parse_args(argv)
    if args.no_gc:
        gc.disable()
    tokenizer = load_tokenizer("llama3")
    vocabulary = Vocabulary.from_tokenizer(tokenizer)
    paths = stratified_sample(maskbench_files(), args.sample, args.seed,
                              lambda p: any(i.valid for i in load_case(p).instances))
    print(report(replay(paths, vocabulary, tokenizer, args.max_tokens), args.top))


if __name__ == "__main__":
    main()
