"""Quick check that every installed peer engine works, on a stratified MaskBench sample.

    python tools/bench_peers_smoke.py [--count 20] [--slow-count 6] [--seed 0]

Per peer, JSON Schema: schemas compiled, valid instances accepted, invalid instances
rejected, rough per-token mask time (replaying the first valid instance of each compiled
schema), and compile time. GBNF: `grammars/json.gbnf` replayed over the same valid instances,
for peers with a GBNF front end. transformers-cfg and lm-format-enforcer (pure Python) get the
first `--slow-count` schemas of the same sample. Schemas without instances are skipped.
One thread throughout (`pin_single_thread`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from _assets import (
    compact_json,
    has_instances,
    load_case,
    maskbench_files,
    require_assets,
    stratified_sample,
)
from _assets import tokenizer_dir as find_tokenizer_dir
from peers import (
    Peer,
    PeerCompileError,
    PeerGrammar,
    available_peers,
    make_peer,
    pin_single_thread,
)

SLOW_PEERS = {"transformers-cfg", "lm-format-enforcer"}
JSON_GBNF = Path(__file__).resolve().parents[1] / "grammars" / "json.gbnf"


@dataclass
class Tally:
    """What one peer did on the sample."""

    schemas: int = 0
    compiled: int = 0
    valid: int = 0
    valid_accepted: int = 0
    invalid: int = 0
    invalid_rejected: int = 0
    mask_disagreements: int = 0
    compile_s: list[float] = field(default_factory=list)
    mask_s: list[float] = field(default_factory=list)
    first_error: str = ""


def replay(grammar: PeerGrammar, text: str, max_tokens: int, tally: Tally) -> None:
    """Time compute_mask before each token of `text`; count tokens the mask wrongly forbids."""
    matcher = grammar.matcher()
    for token in grammar.peer.encode(text)[:max_tokens]:
        start = time.perf_counter()
        matcher.compute_mask()
        tally.mask_s.append(time.perf_counter() - start)
        if not matcher.mask_allows(token):
            tally.mask_disagreements += 1
        if not matcher.accept_token(token):
            return


def run_schemas(peer: Peer, files: list[Path], max_tokens: int) -> Tally:
    """Compile each schema, judge its instances, and replay one valid instance."""
    tally = Tally()
    for path in files:
        case = load_case(path)
        tally.schemas += 1
        try:
            grammar = peer.compile_json_schema(case.schema)
        except PeerCompileError as exc:
            tally.first_error = tally.first_error or exc.reason[:100]
            continue
        tally.compiled += 1
        tally.compile_s.append(grammar.compile_seconds)
        replayed = False
        for instance in case.instances:
            text = compact_json(instance.data)
            accepted = grammar.accepts_text(text)
            if instance.valid:
                tally.valid += 1
                tally.valid_accepted += accepted
                if accepted and not replayed:
                    replay(grammar, text, max_tokens, tally)
                    replayed = True
            else:
                tally.invalid += 1
                tally.invalid_rejected += not accepted
    return tally


def run_gbnf(peer: Peer, files: list[Path], max_tokens: int) -> Tally:
    """Replay valid instances through `grammars/json.gbnf`."""
    tally = Tally(schemas=1)
    try:
        grammar = peer.compile_gbnf(JSON_GBNF.read_text(encoding="utf-8"))
    except PeerCompileError as exc:
        tally.first_error = exc.reason[:100]
        return tally
    tally.compiled = 1
    tally.compile_s.append(grammar.compile_seconds)
    for path in files:
        valid = [i for i in load_case(path).instances if i.valid]
        if valid:
            text = compact_json(valid[0].data)
            tally.valid += 1
            tally.valid_accepted += grammar.accepts_text(text)
            replay(grammar, text, max_tokens, tally)
    return tally


def _us(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6:,.0f}"


def report(kind: str, peer_name: str, tally: Tally) -> None:
    """One line per peer and kind."""
    compile_ms = f"{statistics.median(tally.compile_s) * 1e3:,.1f}" if tally.compile_s else "-"
    print(
        f"{kind:6} {peer_name:19} compiled {tally.compiled:3}/{tally.schemas:<3} "
        f"valid acc {tally.valid_accepted:3}/{tally.valid:<3} "
        f"invalid rej {tally.invalid_rejected:3}/{tally.invalid:<3} "
        f"mask p50 {_us(tally.mask_s, 0.5):>7} us p99 {_us(tally.mask_s, 0.99):>9} us "
        f"(n={len(tally.mask_s)}, mask-vs-accept diffs {tally.mask_disagreements}) "
        f"compile p50 {compile_ms} ms" + (f"  first error: {tally.first_error}" if tally.first_error else "")
    )


def main() -> None:
    """Parse arguments and run every available peer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20, help="schemas for fast peers")
    parser.add_argument("--slow-count", type=int, default=6, help="schemas for pure-Python peers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--max-tokens", type=int, default=400, help="tokens replayed per text")
    parser.add_argument("--peers", nargs="*", default=None, help="default: all available")
    parser.add_argument("--outlines-timeout", type=float, default=30.0, help="seconds per index")
    args = parser.parse_args()

    pin_single_thread()
    assets = require_assets()
    tokenizer = str(find_tokenizer_dir(args.tokenizer, assets))
    sample = stratified_sample(maskbench_files(assets), args.count, args.seed, has_instances)
    peers = args.peers if args.peers is not None else available_peers()
    print(f"peers: {', '.join(peers)}; {len(sample)} schemas, seed {args.seed}, {args.tokenizer}")
    for name in peers:
        start = time.perf_counter()
        peer = make_peer(name, tokenizer, compile_timeout_s=args.outlines_timeout)
        print(f"{name}: tokenizer data built in {time.perf_counter() - start:.1f} s")
        files = sample[: args.slow_count] if name in SLOW_PEERS else sample
        report("schema", name, run_schemas(peer, files, args.max_tokens))
        report("gbnf", name, run_gbnf(peer, files, args.max_tokens))
        print(f"{name}: done in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
