"""Token-mask benchmark: MaskBench instances replayed token by token through structspec and its peers.

    python tools/bench_masks.py --sample 30 [--slow-sample 5] [--seed 0] [--engines structspec,llguidance]
                                [--max-tokens 1000] [--schema-budget-s 120] [--json out.json]

A stratified sample of MaskBench schemas (`../shared/assets/jsonschemabench/maskbench`, only
schemas with a valid instance) is compiled by every engine; each valid instance, serialized
compactly (`json.dumps(data, separators=(",", ":"), ensure_ascii=False)`) and tokenized with the
Llama-3 tokenizer, is replayed: before each token the engine computes its mask (timed), the
token must be allowed and accepted, and after the last one the grammar must accept.

Reported per engine: per-token mask time p50/p90/p99/max, and the max less the time the cyclic
garbage collector ran inside the call (a process-wide pause that lands in whatever call trips it,
see `MaskTimes`); compile time and time-to-first-mask
(compile + first mask of a fresh matcher) p50/p99; pass rate (% of valid instances whose tokens
were all allowed and accepted, then accepted as complete unless cut at `--max-tokens`; compile
failures and time-outs count as failures); memory per compiled grammar: the growth of the
process's resident set (RSS) while all its compiled grammars and their caches are held, divided
by their number (both readings after a full collection and after the C heap's free pages are
handed back to the system, glibc's `malloc_trim`, so that memory freed by setup and reused by
the replay does not hide what the grammars hold). Each engine runs in its own fresh process, on
one thread (OMP/MKL/rayon at 1, `torch.set_num_threads(1)`, each peer's own settings, see
tools/peers). transformers-cfg and
lm-format-enforcer (pure Python) get only the first `--slow-sample` schemas of the same sample.

structspec's grammars come from `structspec.Grammar.from_json_schema` (strict unless
`--relaxed`), the path users take: the converter's rule table compiled as it is. Its mask is
`Matcher.fill_bitmask` into a preallocated int32 row, as the peers write theirs.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import multiprocessing
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _assets import compact_json, load_case, maskbench_files, require_assets, stratified_sample
from _assets import tokenizer_dir as find_tokenizer_dir
from peers import PEER_NAMES, Peer, PeerCompileError, PeerGrammar, available_peers, make_peer, pin_single_thread
from peers.base import BitmaskMatcher

SLOW_ENGINES = ("transformers-cfg", "lm-format-enforcer")
REFERENCES = ("llguidance", "xgrammar")


# -- structspec behind the peer interface -------------------------------------------------------


class StructspecMatcher(BitmaskMatcher):
    """A structspec `Matcher` filling a preallocated int32 bitmask row."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        import torch

        super().__init__(vocab_size)
        self._matcher = matcher
        self._row = torch.from_numpy(self._bitmask).unsqueeze(0)  # shares the peer's buffer

    def compute_mask(self) -> None:
        self._matcher.fill_bitmask(self._row, 0)

    def accept_token(self, token_id: int) -> bool:
        return self._matcher.accept_token(token_id)

    def is_accepting(self) -> bool:
        return self._matcher.is_accepting()


class StructspecGrammar(PeerGrammar):
    """A `structspec.CompiledGrammar`."""

    def __init__(self, peer: Peer, compiled: Any, compile_seconds: float) -> None:
        super().__init__(peer, compile_seconds)
        self.compiled = compiled

    def matcher(self) -> StructspecMatcher:
        return StructspecMatcher(self.compiled.matcher(), self.peer.vocab_size)


class StructspecPeer(Peer):
    """structspec over the same tokenizer; compile time covers schema conversion, GBNF
    compilation and binding to the vocabulary (the vocabulary and its token trie are built
    once, in setup)."""

    name = "structspec"

    def __init__(self, tokenizer: Any, relaxed: bool) -> None:
        from structspec import Vocabulary
        from structspec.tokens.trie import token_trie

        super().__init__(tokenizer)
        self.vocabulary = Vocabulary.from_tokenizer(tokenizer, vocab_size=self.vocab_size)
        token_trie(self.vocabulary)  # the vocabulary's token trie, shared by its grammars: set up once, as peers do
        self._relaxed = relaxed

    def compile_json_schema(self, schema: dict) -> StructspecGrammar:
        import structspec

        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grammar = structspec.Grammar.from_json_schema(schema, strict=not self._relaxed)
        except (structspec.SchemaError, structspec.GrammarError) as exc:
            raise PeerCompileError(self.name, str(exc)) from exc
        return self._compiled(grammar, start)

    def compile_gbnf(self, text: str) -> StructspecGrammar:
        import structspec

        start = time.perf_counter()
        try:
            grammar = structspec.Grammar.from_gbnf(text)
        except structspec.GrammarError as exc:
            raise PeerCompileError(self.name, str(exc)) from exc
        return self._compiled(grammar, start)

    def _compiled(self, grammar: Any, start: float) -> StructspecGrammar:
        import structspec

        compiled = structspec.compile(grammar, self.vocabulary)
        return StructspecGrammar(self, compiled, time.perf_counter() - start)


# -- one engine, in its own process -------------------------------------------------------------


@dataclass
class SchemaResult:
    """What one engine did with one schema."""

    name: str
    compiled: bool
    compile_s: float | None = None
    first_mask_s: float | None = None
    instances: dict[str, int] = field(default_factory=dict)  # status -> count
    error: str = ""


@dataclass
class MaskTimes:
    """Each mask call's wall time, and the time the cyclic garbage collector ran inside it.

    A full collection walks every tracked object of the process (torch and transformers alone
    are ~200,000, about 100 ms on this machine) and starts at whichever allocation trips its
    threshold: rarely a mask call, but one is enough to set the max. The collector's share is
    kept apart so that the table shows the engine's own slowest mask beside the process's.
    """

    seconds: list[float] = field(default_factory=list)
    collector_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        _COLLECTOR.install()

    def timed(self, call: Callable[[], object]) -> float:
        """Run ``call``, record its time and the collector's time inside it; returns the first."""
        collected = _COLLECTOR.seconds
        start = time.perf_counter()
        call()
        elapsed = time.perf_counter() - start
        self.seconds.append(elapsed)
        self.collector_s.append(_COLLECTOR.seconds - collected)
        return elapsed


class _CollectorClock:
    """Total wall time the cyclic garbage collector has run in this process (``gc.callbacks``).
    Not ``structspec.server.collector.CollectionPauses``: a peer's process imports nothing of
    structspec, so that its objects and memory are the peer's alone."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def install(self) -> None:
        """Start counting (once per process)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


_COLLECTOR = _CollectorClock()


@dataclass
class EngineResult:
    """Everything one engine measured."""

    engine: str
    schemas: list[SchemaResult] = field(default_factory=list)
    masks: MaskTimes = field(default_factory=MaskTimes)
    rss_bytes_per_grammar: float | None = None
    setup_s: float = 0.0
    note: str = ""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EngineResult:
        """The result again from what :func:`run_engine` returns (``asdict``'s nested dicts)."""
        schemas = [SchemaResult(**schema) for schema in raw["schemas"]]
        return cls(**{**raw, "schemas": schemas, "masks": MaskTimes(**raw["masks"])})


def run_engine(engine: str, files: list[str], tokenizer: str, args: dict[str, Any]) -> dict[str, Any]:
    """Compile and replay every schema of `files` with `engine` (called in a fresh process);
    returns the `EngineResult` as a dict."""
    pin_single_thread()
    start = time.perf_counter()
    if engine == "structspec":
        from peers.tokens import load_tokenizer

        peer: Peer = StructspecPeer(load_tokenizer(tokenizer), args["relaxed"])
    else:
        peer = make_peer(engine, tokenizer, compile_timeout_s=args["compile_timeout_s"])
    result = EngineResult(engine, setup_s=time.perf_counter() - start)
    held: list[PeerGrammar] = []
    rss_before = _rss_bytes()
    for path in files:
        outcome, grammar = _run_schema(peer, Path(path), args, result.masks)
        result.schemas.append(outcome)
        if grammar is not None:
            held.append(grammar)
    rss_after = _rss_bytes()
    if held and rss_before is not None and rss_after is not None:
        result.rss_bytes_per_grammar = (rss_after - rss_before) / len(held)
    return asdict(result)


def _run_schema(
    peer: Peer, path: Path, args: dict[str, Any], masks: MaskTimes
) -> tuple[SchemaResult, PeerGrammar | None]:
    case = load_case(path)
    texts = [compact_json(instance.data) for instance in case.instances if instance.valid]
    outcome = SchemaResult(case.name, compiled=False)
    try:
        grammar = peer.compile_json_schema(case.schema)
    except PeerCompileError as exc:
        outcome.error = exc.reason[:200]
        outcome.instances = {"compile error": len(texts)}
        return outcome, None
    outcome.compiled = True
    outcome.compile_s = grammar.compile_seconds
    deadline = time.perf_counter() + args["schema_budget_s"]
    for index, text in enumerate(texts):
        if time.perf_counter() > deadline:
            status = "time-out"
        else:
            status = _replay(grammar, peer.encode(text), args["max_tokens"], masks, deadline, outcome, index == 0)
        outcome.instances[status] = outcome.instances.get(status, 0) + 1
    return outcome, grammar


def _replay(
    grammar: PeerGrammar,
    tokens: list[int],
    max_tokens: int,
    masks: MaskTimes,
    deadline: float,
    outcome: SchemaResult,
    first: bool,
) -> str:
    """Replay one instance (its first `max_tokens` tokens); returns its status. The first
    instance's first mask also gives the time to first mask."""
    start = time.perf_counter()
    matcher = grammar.matcher()
    created = time.perf_counter() - start
    for step, token in enumerate(tokens[:max_tokens]):
        elapsed = masks.timed(matcher.compute_mask)
        if first and step == 0:
            outcome.first_mask_s = created + elapsed
        if not matcher.mask_allows(token):
            return "masked"
        if not matcher.accept_token(token):
            return "mask allowed, accept refused"
        if time.perf_counter() > deadline:
            return "time-out"
    if len(tokens) > max_tokens:
        return "pass"  # truncated: every replayed token was allowed
    return "pass" if matcher.is_accepting() else "not complete"


def _rss_bytes() -> int | None:
    """The resident set after a full collection and after the C heap's free pages are handed back
    (glibc's ``malloc_trim``): what is held, not what was."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the heap stays as it is
        ctypes.CDLL(None).malloc_trim(0)
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


# -- summary and table --------------------------------------------------------------------------


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(result: EngineResult) -> dict[str, Any]:
    """The reported figures of one engine (seconds and bytes; None where nothing was measured)."""
    compiled = [s for s in result.schemas if s.compiled]
    compile_s = [s.compile_s for s in compiled if s.compile_s is not None]
    first_mask = [s.compile_s + s.first_mask_s for s in compiled if s.first_mask_s is not None]
    statuses: dict[str, int] = {}
    for schema in result.schemas:
        for status, count in schema.instances.items():
            statuses[status] = statuses.get(status, 0) + count
    total = sum(statuses.values())
    seconds, collector_s = result.masks.seconds, result.masks.collector_s
    own = [elapsed - collected for elapsed, collected in zip(seconds, collector_s, strict=True)]
    return {
        "schemas": len(result.schemas),
        "compiled": len(compiled),
        "instances": total,
        "passed": statuses.get("pass", 0),
        "pass_rate": statuses.get("pass", 0) / total if total else None,
        "statuses": statuses,
        "tokens": len(seconds),
        "mask_p50": _quantile(seconds, 0.5),
        "mask_p90": _quantile(seconds, 0.9),
        "mask_p99": _quantile(seconds, 0.99),
        "mask_max": max(seconds, default=None),
        "mask_max_engine": max(own, default=None),
        "masks_collected": sum(1 for c in collector_s if c > 0),
        "mask_mean": statistics.fmean(seconds) if seconds else None,
        "compile_p50": _quantile(compile_s, 0.5),
        "compile_p99": _quantile(compile_s, 0.99),
        "ttfm_p50": _quantile(first_mask, 0.5),
        "ttfm_p99": _quantile(first_mask, 0.99),
        "rss_per_grammar": result.rss_bytes_per_grammar,
        "setup_s": result.setup_s,
        "note": result.note,
    }


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f}ms"
    return f"{seconds:.2f}s"


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2**20:.1f}MiB" if abs(value) >= 2**20 else f"{value / 2**10:.0f}KiB"


TIME_COLUMNS = {
    "mask_p50": "mask p50",
    "mask_p90": "p90",
    "mask_p99": "p99",
    "mask_max": "max",
    "mask_max_engine": "max w/o GC",
    "compile_p50": "compile p50",
    "ttfm_p50": "TTFM p50",
    "ttfm_p99": "TTFM p99",
}


def table(summaries: dict[str, dict[str, Any]]) -> str:
    """Side-by-side table, then each engine's ratios to llguidance and xgrammar."""
    heads = ["pass", "tokens", *TIME_COLUMNS.values(), "mem/grammar"]
    lines = [f"{'engine':19} {'compiled':>8} " + " ".join(f"{h:>11}" for h in heads)]
    for engine, s in summaries.items():
        rate = f"{100 * s['pass_rate']:.0f}% {s['passed']}/{s['instances']}" if s["pass_rate"] is not None else "-"
        cells = [rate, str(s["tokens"]), *(_time(s[c]) for c in TIME_COLUMNS), _bytes(s["rss_per_grammar"])]
        lines.append(f"{engine:19} {s['compiled']:>3}/{s['schemas']:<4} " + " ".join(f"{c:>11}" for c in cells))
    for reference in REFERENCES:
        base = summaries.get(reference)
        others = [engine for engine in summaries if engine != reference]
        if base is None or not others:
            continue
        lines += [
            "",
            f"ratio to {reference} (>1: slower)",
            f"{'engine':28} " + " ".join(f"{h:>11}" for h in TIME_COLUMNS.values()),
        ]
        for engine in others:
            pairs = [(summaries[engine][c], base[c]) for c in TIME_COLUMNS]
            cells = [f"{ours / theirs:.3g}x" if ours is not None and theirs else "-" for ours, theirs in pairs]
            lines.append(f"{engine:28} " + " ".join(f"{c:>11}" for c in cells))
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=30, help="schemas (stratified over MaskBench subsets)")
    parser.add_argument("--slow-sample", type=int, default=5, help="schemas for transformers-cfg, lm-format-enforcer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", default=None, help="comma-separated; default: structspec and every installed peer")
    parser.add_argument("--max-tokens", type=int, default=1000, help="tokens replayed per instance")
    parser.add_argument("--schema-budget-s", type=float, default=120.0, help="replay time per schema and engine")
    parser.add_argument("--compile-timeout-s", type=float, default=60.0, help="outlines-core index build limit")
    parser.add_argument("--relaxed", action="store_true", help="structspec: approximate unsupported keywords")
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--json", type=Path, default=None, help="write every figure and per-schema result here")
    args = parser.parse_args(argv)
    known = ("structspec", *PEER_NAMES)
    if args.engines is None:
        args.engines = ["structspec", *available_peers()]
    else:
        args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
        unknown = [e for e in args.engines if e not in known]
        if unknown:
            parser.error(f"unknown engine(s) {', '.join(unknown)}; expected some of {', '.join(known)}")
    return args


def has_valid_instance(path: Path) -> bool:
    """Whether a MaskBench file has a valid instance to replay."""
    return any(instance.valid for instance in load_case(path).instances)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the table."""
    args = parse_args(argv)
    pin_single_thread()
    assets = require_assets()
    tokenizer = str(find_tokenizer_dir(args.tokenizer, assets))
    sample = [str(p) for p in stratified_sample(maskbench_files(assets), args.sample, args.seed, has_valid_instance)]
    source = "structspec.Grammar.from_json_schema" + (" (relaxed)" if args.relaxed else " (strict)")
    print(f"MaskBench replay: {len(sample)} schemas (seed {args.seed}), tokenizer {args.tokenizer}, one thread")
    print(f"slow engines ({', '.join(SLOW_ENGINES)}): first {args.slow_sample} schemas; structspec grammars: {source}")
    options = {
        "max_tokens": args.max_tokens,
        "schema_budget_s": args.schema_budget_s,
        "compile_timeout_s": args.compile_timeout_s,
        "relaxed": args.relaxed,
    }
    context = multiprocessing.get_context("spawn")
    summaries: dict[str, dict[str, Any]] = {}
    results: dict[str, EngineResult] = {}
    for engine in args.engines:
        files = sample[: args.slow_sample] if engine in SLOW_ENGINES else sample
        started = time.perf_counter()
        with context.Pool(1) as pool:
            raw = pool.apply(run_engine, (engine, files, tokenizer, options))
        result = EngineResult.from_dict(raw)
        if engine in SLOW_ENGINES:
            result.note = f"first {len(files)} schemas only"
        results[engine] = result
        summaries[engine] = summarize(result)
        print(f"  {engine}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(table(summaries))
    notes = [f"{e}: {s['note']}" for e, s in summaries.items() if s["note"]]
    print("mem/gram: RSS growth while the engine's compiled grammars (with their caches) are held, per grammar")
    print("max w/o GC: the slowest mask less the cyclic collector's time inside it; collections inside masks: "
          + ", ".join(f"{e} {s['masks_collected']}" for e, s in summaries.items()))
    if notes:
        print("note: " + "; ".join(notes) + " (their ratios compare different samples)")
    if args.json is not None:
        payload = {
            "command": " ".join(sys.argv),
            "options": {**options, "sample": args.sample, "slow_sample": args.slow_sample, "seed": args.seed},
            "structspec_grammars": source,
            "files": sample,
            "summaries": summaries,
            "schemas": {engine: [asdict(s) for s in result.schemas] for engine, result in results.items()},
        }
        args.json.write_text(json.dumps(payload, indent=1, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
