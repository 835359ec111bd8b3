"""Where the memory of compiled grammars goes, on the MaskBench replay of `tools/bench_masks.py`.

    python tools/bench_memory.py [--sample 60] [--seed 0] [--max-tokens 400] [--trace]

Replays the same stratified sample as `bench_masks.py` through structspec in this process (one
thread, the trie built in setup), holds every compiled grammar with its caches, and reports the
growth of the resident set per grammar (`bench_masks.py`'s figure: both readings after a full
collection and `malloc_trim`) and what the grammars hold:
the whole-state mask cache (its entries, the distinct masks among them and their bytes), the
native core's run-state tables (allocated and in use; a runner that computed none of the
process's last `IDLE_MASKS` masks has freed them, so only the grammars masked last hold any,
and the largest tables any runner reached during the replay are reported beside them), the
rule sets' move rows (the Python
advance reads its byte moves off them too) and the process-wide rule-automata cache (compile
time only, shared by every grammar the process compiles, reported as such). With `--trace`,
`tracemalloc` runs during the replay (several times slower, and its bookkeeping inflates the
resident-set figure) and the Python allocations still held are listed by source line; the
native core's tables are allocated in C and not traced.
"""

from __future__ import annotations

import argparse
import tracemalloc
from pathlib import Path

from _assets import maskbench_files, require_assets, stratified_sample
from _assets import tokenizer_dir as find_tokenizer_dir
from bench_masks import MaskTimes, StructspecPeer, _rss_bytes, _run_schema, has_valid_instance
from peers import pin_single_thread
from peers.tokens import load_tokenizer

from structspec.grammar.compiler import _DFA_CACHE
from structspec.masks.runner import StackRunner

MIB = 1 << 20


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--schema-budget-s", type=float, default=60.0)
    parser.add_argument("--trace", action="store_true", help="list held Python allocations by line (slow)")
    args = parser.parse_args(argv)
    pin_single_thread()
    assets = require_assets()
    files = stratified_sample(maskbench_files(assets), args.sample, args.seed, has_valid_instance)
    peer = StructspecPeer(load_tokenizer(str(find_tokenizer_dir("llama3", assets))), relaxed=False)
    options = {"relaxed": False, "max_tokens": args.max_tokens, "schema_budget_s": args.schema_budget_s}
    masks = MaskTimes()
    peak = _track_peak_tables()
    if args.trace:
        tracemalloc.start(1)
    before = _rss_bytes() or 0
    held = []
    for path in files:
        _, grammar = _run_schema(peer, Path(path), options, masks)
        if grammar is not None:
            held.append(grammar.compiled)
    growth = (_rss_bytes() or 0) - before
    print(f"{len(held)} compiled grammars, {len(masks.seconds)} masks; resident set growth {growth / MIB:.1f} MiB, "
          f"{growth / max(len(held), 1) / MIB:.2f} MiB per grammar")
    masks = [words for compiled in held for words in compiled._states.values()]
    distinct = {id(words): words for words in masks}
    tables_in_use = sum(c._runner._native.n_run_states * (4 * c.rules.n_classes + 68)
                        + 12 * c._runner._native.n_frames for c in held)
    rows = {
        "mask cache entries (the cache's estimate)": sum(c._states.nbytes for c in held),
        f"distinct mask arrays held ({len(distinct)} of {len(masks)} entries)":
            sum(words.nbytes for words in distinct.values()),
        f"run-state tables, allocated ({sum(c._runner.nbytes > 0 for c in held)} runners hold some)":
            sum(c._runner.nbytes for c in held),
        "run-state tables, the largest one runner held at once": peak[0],
        "run-state tables, in use": tables_in_use,
        f"move rows ({sum(c.rules.n_states for c in held)} states)":
            sum(c.rules.move_rows.nbytes + c.rules.move_row.nbytes for c in held),
        "state table and forced caches' estimate": sum(c.table.nbytes + c._jumps.nbytes for c in held),
        f"rule-automata cache, process-wide ({len(_DFA_CACHE)} automata)": _DFA_CACHE.nbytes,
    }
    for name, size in rows.items():
        print(f"  {name:<58} {size / MIB:8.1f} MiB")
    if args.trace:
        snapshot = tracemalloc.take_snapshot()
        print("Python allocations still held, by line (top 25):")
        for stat in snapshot.statistics("lineno")[:25]:
            frame = stat.traceback[0]
            print(f"  {stat.size / MIB:8.1f} MiB {stat.count:8d} blocks  {frame.filename}:{frame.lineno}")


def _track_peak_tables() -> list[int]:
    """The largest tables (bytes allocated) any runner holds after a mask, from now on: what a
    grammar in use holds, which the idle release hides from the growth at the end."""
    peak = [0]
    mask = StackRunner.mask

    def tracked(self: StackRunner, *args, **kwargs):
        words = mask(self, *args, **kwargs)
        peak[0] = max(peak[0], self.nbytes)
        return words

    StackRunner.mask = tracked
    return peak


if __name__ == "__main__":
    main()
