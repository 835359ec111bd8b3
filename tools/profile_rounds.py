"""Where a sequence's round spends host time, with the target's forward replayed.

    python tools/profile_rounds.py [--sources forced,ngram] [--repeats 100] [--between forward]
                                   [--max-new-tokens 128] [--threads 1] [--served draft,verify]

Decodes the workload of ``tools/bench_speculative.py`` on the bundled demo pair once for real,
recording the target's rows of logits each round; then ``--repeats`` times more with the
target's forward replaced by those rows. Every replay makes the same rounds (checked: the same
drafts, the same texts), so the host's share of a round -- drafting, verification, the cache
keeping the accepted branch, the mask worker's hand-over, the text -- is timed to the
microsecond, without the model's time and its noise. The chain prices draft tokens by the
forward's cost as measured; here it is told a fixed one (the demo target's: 3.2 ms plus 0.15 ms
a fed token) while recording and replaying alike, so the drafts do not depend on the run.

``--between`` says what runs in place of each replayed forward, untimed: ``nothing`` (the
host's work then runs with warm caches), ``forward`` (the target's real forward over a fixed
feed of six tokens after 300: the caches the round's host work starts with are those it meets
in ``tools/bench_speculative.py``, which measures the share of time outside the models), or a
number of MB of memory swept. For comparing two versions, ``--between 64`` gives the steadiest
figure with cold caches here (medians within 7% run to run, against 15-30% after the real
forward, whose time varies with the machine's load).

``--served draft,verify`` has the replays take those phases' results from the recording instead
of computing them (the draft of each round, verification's accepted nodes and the matcher after
them): what the round costs without them, an upper bound on what making them free would save.

Prints the host's µs per round (median and spread over the repeats) and each phase's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_speculative import WORKLOAD, load, prompt_of
from profile_batch_step import Phases

from structspec.generation import Generator, SpecConfig, loop
from structspec.generation.adaptive import ForwardCost
from structspec.generation.cache import CachedModel, logits_width
from structspec.generation.chain import Draft
from structspec.generation.logit_rows import LogitRows
from structspec.generation.loop import Decoding
from structspec.generation.prefetch import MaskPrefetch
from structspec.generation.sequence import Sequence
from structspec.masks.matcher import Matcher

FORWARD_SECONDS = (3.2e-3, 1.5e-4)  # the demo target's forward: one token, and each further token fed


class Replay:
    """The target's forwards, recorded once and then handed back in the same order."""

    def __init__(self, between: Callable[[], object], heads: int, head_dim: int) -> None:
        self.between = between  # run in place of each replayed forward
        self.shape = (1, heads, head_dim)  # of the cache entries the replay stands in
        self.tape: list[tuple[tuple[int, tuple[int, ...]], object]] = []
        self.at: int | None = None  # None while recording
        self.real = CachedModel.tree_logits

    def tree_logits(self, model: CachedModel, sequence: list[int], nodes: list[int], parents: list[int]) -> LogitRows:
        key = (len(sequence), tuple(nodes))
        if self.at is None:
            rows = self.real(model, sequence, nodes, parents)
            self.tape.append((key, rows._block.clone()))
            return rows
        (recorded, block), self.at = self.tape[self.at], self.at + 1
        if recorded != key:
            raise RuntimeError(f"the replay drafted {key}, the recording {recorded}: the rounds differ")
        self.between()
        self._feed(model, sequence, nodes)
        model.tokens = [*sequence, *nodes]
        return LogitRows(block.clone(), model.width)  # written last, as the forward's output is

    def _feed(self, model: CachedModel, sequence: list[int], nodes: list[int]) -> None:
        """Stand-in cache entries, through the layers' own crop and update as a forward's
        are: the sequence's held prefix kept, at most all but its last token, the rest fed."""
        import torch

        batch, heads, width = self.shape
        for index, layer in enumerate(model.cache.layers):
            held = layer.get_seq_length()
            kept = min(held, len(sequence) - 1)
            if kept < held:
                layer.crop(kept - held)
            fed = torch.zeros(batch, heads, len(sequence) + len(nodes) - kept, width)
            model.cache.update(fed, fed.clone(), index)


class Served:
    """The phases ``--served`` names, recorded with the rounds and then handed back in the same
    order: each replay's drafts, and verification's outcome with the matcher after it. Only the
    phases named are replaced: the others run as they are."""

    PHASES = ("draft", "verify")

    def __init__(self, phases: list[str]) -> None:
        unknown = set(phases) - set(self.PHASES)
        if unknown:
            raise SystemExit(f"--served: unknown phases {sorted(unknown)} (choose from {', '.join(self.PHASES)})")
        self.phases = phases
        self.drafts: list[Draft] = []
        self.verdicts: list[tuple[tuple, Matcher]] = []
        self._drafts: Iterator[Draft] | None = None  # while replaying: what the next round gets
        self._verdicts: Iterator[tuple[tuple, Matcher]] | None = None

    def record(self) -> None:
        """Record from the next round on (what an earlier recording held is dropped)."""
        self.drafts.clear()
        self.verdicts.clear()
        self._drafts = self._verdicts = None

    def replay(self) -> None:
        """Hand back the recording from its first round."""
        self._drafts, self._verdicts = iter(self.drafts), iter(self.verdicts)

    def patch(self) -> list[tuple[object, str, object]]:
        """Put the stand-ins of the phases named in place; returns what to restore."""
        real_draft, real_verify = Decoding.draft, loop.verify
        served = self

        def draft(decoding: Decoding) -> Draft:
            if served._drafts is None:
                result = real_draft(decoding)
                served.drafts.append(result)
                return result
            result = next(served._drafts)
            result.count_into(decoding.stats)  # as the chain does for the drafts it makes
            return result

        def verify(logits, draft_, matcher, *rest):
            if served._verdicts is None:
                outcome = real_verify(logits, draft_, matcher, *rest)
                served.verdicts.append((outcome, matcher.copy()))
                return outcome
            outcome, after = next(served._verdicts)
            matcher._node = after._node  # where verification left it
            return outcome

        saved: list[tuple[object, str, object]] = []
        if "draft" in self.phases:
            saved.append((Decoding, "draft", real_draft))
            Decoding.draft = draft
        if "verify" in self.phases:
            saved.append((loop, "verify", real_verify))
            loop.verify = verify
        return saved


def _between(what: str, model) -> Callable[[], object]:
    """What runs in place of a replayed forward (see the module docstring)."""
    import torch

    if what == "nothing":
        return lambda: None
    if what != "forward":
        sweep = torch.ones(int(what) << 18)  # float32: 4 bytes each
        return sweep.sum
    sequence = [3 + index % 1000 for index in range(306)]
    held = CachedModel(model, logits_width(model))
    held.logits(sequence[:300], 1)

    def forward() -> None:
        fresh = CachedModel(model, held.width)
        fresh.adopt(held, sequence)
        fresh.logits(sequence, 6)

    return forward


def fixed_add(self: ForwardCost, fed: float, _seconds: float) -> None:
    """``ForwardCost.add`` told the demo target's cost instead of the one measured."""
    ORIGINAL_ADD(self, fed, FORWARD_SECONDS[0] + FORWARD_SECONDS[1] * (fed - 1))


ORIGINAL_ADD = ForwardCost.add


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", default="forced,ngram", help="draft sources, or 'plain'")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--between", default="forward", help="nothing, forward, or MB of memory to sweep")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--served", default="", help="phases taken from the recording: draft, verify")
    args = parser.parse_args(argv)
    served = Served([phase for phase in args.served.split(",") if phase])

    import torch

    torch.set_num_threads(args.threads)
    model, tokenizer = load("demo")
    draft, _ = load("demo-draft")
    generator = Generator(model, tokenizer, draft_model=draft)
    spec = None if args.sources == "plain" else SpecConfig(sources=tuple(args.sources.split(",")))
    prompts = [(prompt_of(text, schema, tokenizer), schema) for text, schema in WORKLOAD]
    config = model.config
    replay = Replay(_between(args.between, model), config.num_key_value_heads,
                    getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
    phases, timed = Phases(), max(1, args.repeats // 5)  # timing each phase costs a little: apart
    timed_phases = [(Decoding, "draft", "draft"), (Decoding, "commit", "verify"), (CachedModel, "keep", "keep"),
                    (MaskPrefetch, "start", "mask hand-over"), (Sequence, "add", "text")]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in timed_phases]
    saved += [(ForwardCost, "add", ForwardCost.add), (CachedModel, "tree_logits", CachedModel.tree_logits)]
    ForwardCost.add = fixed_add
    CachedModel.tree_logits = lambda model, *rest: replay.tree_logits(model, *rest)
    saved += served.patch()

    def run() -> list:
        return [generator.generate(prompt, schema, max_new_tokens=args.max_new_tokens, speculative=spec)
                for prompt, schema in prompts]

    try:
        run()  # warm-up: compilation, caches
        replay.tape.clear()
        served.record()
        texts = [result.text for result in run()]
        rounds = len(replay.tape)
        per_round = []
        for _ in range(args.repeats):
            replay.at = 0
            served.replay()
            results = run()
            if [result.text for result in results] != texts:
                raise RuntimeError("a replay's text differs from the recording's")
            host = sum(r.stats.seconds["total"] - r.stats.seconds["target"] for r in results)
            per_round.append(host / rounds * 1e6)
        for owner, name, phase in timed_phases:
            setattr(owner, name, phases.timed(phase, getattr(owner, name)))
        for _ in range(timed):
            replay.at = 0
            served.replay()
            run()
    finally:
        for owner, name, function in saved:
            setattr(owner, name, function)
    per_round.sort()
    decile = max(1, len(per_round) // 10)
    print(f"{args.sources}: {len(prompts)} generations, {rounds} rounds each replay, {args.repeats} replays, "
          f"between rounds: {args.between}" + (f", served: {args.served}" if served.phases else ""))
    print(f"host µs per round: median {statistics.median(per_round):.1f}  p10 {per_round[decile - 1]:.1f}  "
          f"p90 {per_round[-decile]:.1f}")
    print(f"phases (each timed apart, over {timed} more replays):")
    for name, (wall, cpu, _calls) in phases.seconds.items():
        scale = 1e6 / (rounds * timed)
        print(f"  {name:15s} {wall * scale:7.1f} µs/round wall  {cpu * scale:7.1f} cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
