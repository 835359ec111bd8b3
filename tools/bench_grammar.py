"""Benchmark the grammar core: state cost against nesting depth, matching speed, stack counts.

Run: ``python tools/bench_grammar.py [--runs N] [--size BYTES]``. Three tables:

1. Keeping and advancing a parse state inside ``[[[...`` of grammars/json.gbnf at nesting
   depths 1 to 10,000: median and p90 of single operations (``copy.copy`` of a state,
   advancing one byte inside the array, pushing one more ``[``), plus the memory retained per
   kept state. Persistent stacks mean every column should stay flat as depth grows.
2. Throughput of ``Grammar.matches`` on a deterministic ~1 MB JSON document.
3. Stack counts (``len(state)``) and time per byte on ambiguous or pathological grammars;
   a row stops growing n once it has used its time budget.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from structspec import Grammar, GrammarError

JSON_GBNF = Path(__file__).resolve().parent.parent / "grammars" / "json.gbnf"
DEPTHS = (1, 10, 100, 1_000, 10_000)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


def timed(action: Callable[[], object]) -> float:
    """Nanoseconds taken by one call of ``action``."""
    start = time.perf_counter_ns()
    action()
    return time.perf_counter_ns() - start


def summary(samples_ns: list[float]) -> str:
    return f"{statistics.median(samples_ns) / 1000:8.2f} {percentile(samples_ns, 0.9) / 1000:8.2f}"


def bench_depth(grammar: Grammar, runs: int) -> None:
    print("1. State cost against nesting depth in json.gbnf (microseconds: median p90)")
    print(
        f"{'depth':>7} | {'keep (copy)':>17} | {'advance 1 byte':>17} | {'push one [':>17} | {'bytes kept/state':>16}"
    )
    for depth in DEPTHS:
        state = grammar.initial_state().advance(b"[" * depth + b"0")
        assert state is not None
        keep, step, push = [], [], []
        gc.disable()
        for _ in range(runs):
            # Every iteration works on a fresh state object at the same depth: ",0" keeps the
            # depth constant, so no result can be served from a per-state cache.
            state = state.advance(b",")
            keep.append(timed(lambda s=state: copy.copy(s)))
            push.append(timed(lambda s=state: s.advance(b"[")))
            step.append(timed(lambda s=state: s.advance(b"0")))
            state = state.advance(b"0")
        gc.enable()
        kept = retained_bytes_per_state(state, min(runs, 1000))
        print(f"{depth:>7} | {summary(keep)} | {summary(step)} | {summary(push)} | {kept:>16.0f}")


def retained_bytes_per_state(state, count: int) -> float:
    """Memory held by ``count`` states, each one byte further than the last, per state."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = []
    for _ in range(count):
        state = state.advance(b",").advance(b"0")
        kept.append(state)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / count


def json_document(size: int, seed: int = 2024) -> bytes:
    """A deterministic JSON document of about ``size`` bytes within the whitespace bound."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "é日本", "naïve", 'quote"d', "tab\tbed", "😀"]

    def value(level: int) -> object:
        kind = rng.random()
        if level < 6 and kind < 0.3:
            return {f"{rng.choice(words)}{i}": value(level + 1) for i in range(rng.randint(1, 6))}
        if level < 6 and kind < 0.5:
            return [value(level + 1) for _ in range(rng.randint(0, 6))]
        if kind < 0.7:
            return " ".join(rng.choice(words) for _ in range(rng.randint(1, 5)))
        if kind < 0.85:
            return rng.randint(-(10**9), 10**9)
        if kind < 0.95:
            return rng.uniform(-1e6, 1e6)
        return rng.choice([True, False, None])

    items, total = [], 2
    while total < size:
        text = json.dumps(value(0), ensure_ascii=False, indent=1)
        items.append(text)
        total += len(text.encode()) + 2
    return ("[\n" + ",\n".join(items) + "\n]").encode()


def bench_matches(grammar: Grammar, size: int) -> None:
    doc = json_document(size)
    print(f"\n2. Grammar.matches on a {len(doc) / 1e6:.2f} MB JSON document")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        assert grammar.matches(doc)
        times.append(time.perf_counter() - start)
    best, median = min(times), statistics.median(times)
    print(
        f"   best {len(doc) / best / 1e6:.3f} MB/s, median {len(doc) / median / 1e6:.3f} MB/s "
        f"({best:.2f} s best of {len(times)})"
    )


PATHOLOGICAL = {
    "optional a's (inlined)": ('root ::= ( "a"? "a"? "a"? "a"? "a"? )+', "a"),
    "optional a's via a rule": ('root ::= ( a? a? a? a? a? )+\na ::= "a" | "(" a ")"', "a"),
    "x{0,2000} (inlined)": ('root ::= "x"{0,2000}', "x"),
    "x{0,2000} via a rule": ('root ::= x{0,2000}\nx ::= "x" | "(" x ")"', "x"),
    "ambiguous alternation": (
        'root ::= item+\nitem ::= "a" | "aa" | "a" item | "a" item "a" | "(" item ")"',
        "a",
    ),
    "ambiguous split": ('root ::= part part\npart ::= "a" part | "a" | "(" part ")"', "a"),
    "nested optional parens": ('root ::= p\np ::= "(" p? ")" p? | "(" ")"', "("),
}


def bench_stacks(lengths: tuple[int, ...], budget_s: float) -> None:
    print(
        "\n3. Stack counts on ambiguous grammars: len(state) after n bytes and microseconds per"
        f" byte ('slow': skipped once a row has taken {budget_s:.0f} s; 0 stacks = finished)"
    )
    header = " | ".join(f"n={n:<6}" for n in lengths)
    print(f"{'grammar':<26} | {header} | {'us/byte':>8}")
    for label, (source, unit) in PATHOLOGICAL.items():
        grammar = Grammar.from_gbnf(source)
        state, cells, done = grammar.initial_state(), [], 0
        filler, start = "slow", time.perf_counter()
        try:
            while done < lengths[-1] and state is not None:
                if time.perf_counter() - start > budget_s:
                    break
                state = state.advance(unit)
                done += 1
                if done in lengths:
                    cells.append("rejected" if state is None else str(len(state)))
        except GrammarError as error:
            filler = error.code
        if state is None:
            filler = "rejected"
        cells += [filler] * (len(lengths) - len(cells))
        per_byte = (time.perf_counter() - start) / done * 1e6
        row = " | ".join(f"{c:<8}" for c in cells)
        print(f"{label:<26} | {row} | {per_byte:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="timed operations per depth")
    parser.add_argument("--size", type=int, default=1_000_000, help="JSON document size in bytes")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds per stack-count row")
    args = parser.parse_args()
    grammar = Grammar.from_gbnf(JSON_GBNF.read_text(encoding="utf-8"))
    bench_depth(grammar, args.runs)
    bench_matches(grammar, args.size)
    bench_stacks((1, 10, 100, 1000, 2000), args.budget)


if __name__ == "__main__":
    main()
