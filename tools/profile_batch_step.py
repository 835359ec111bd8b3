"""Where a batched round's time goes: wall and host CPU time of each phase of ``Batch.step``.

    python tools/profile_batch_step.py [--model PATH] [--device cpu] [--dtype auto] [--requests 32]
                                       [--max-batch 32] [--max-new-tokens 64] [--threads 1] [--layers 2]

Decodes ``--requests`` extraction prompts of the ``shared`` workload of
``tools/bench_batching.py`` with ``Generator.generate_batch`` (forced and n-gram drafts, greedy),
once to warm up on a quarter of them, then once timed. Without ``--model``: a tiny random Llama
(2 layers unless ``--layers``, hidden size 64) with the bundled Llama-3 tokenizer (128k tokens),
built in memory, on which the model costs little beside its output layer and the host's per-row
work shows (per layer too, with as many layers as the model it stands for); with
``--model``, a folder such as ``tools/bench_gpu.py --save-model`` writes.

Phases, each summed over the run: ``join`` (rows entering the batch cache), ``draft`` (every
row's draft), ``forward`` (the target forward: the step's layout, the model -- its output layer
reported apart -- and the rows' argmax, which on an accelerator waits for the device),
``mask wait`` (for the masks the worker thread computes during the forward), ``verify`` (every
row's verification and commit), ``keep`` (the cache keeping each row's accepted branch), and
``step`` (the whole round). ``cpu`` is the calling thread's CPU time, so where ``wall`` exceeds
it the thread waited -- on the device, the mask worker, or the machine; the last line gives the
process's CPU time, the mask worker's included. On an accelerator the model's and output
layer's figures are the time to launch their work, not to run it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _assets import load_tokenizer
from bench_batching import workloads

from structspec.generation import Generator, SpecConfig
from structspec.generation.batch import Batch
from structspec.generation.batch_cache import BatchCache
from structspec.generation.loop import Decoding
from structspec.generation.prefetch import MaskPrefetch
from structspec.generation.sequence import Request


class Phases:
    """Wall and thread CPU seconds and calls per phase, summed over the calls timed."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}

    def timed(self, name: str, function: Callable) -> Callable:
        """``function`` with each call's time added to phase ``name``."""

        def call(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent = self.seconds.setdefault(name, [0.0, 0.0, 0])
                spent[0] += time.perf_counter() - wall
                spent[1] += time.thread_time() - cpu
                spent[2] += 1

        return call


def tiny_llama(layers: int = 2):
    """A random Llama of ``layers`` layers (hidden size 64) with the Llama-3 tokenizer's
    vocabulary, and the tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer("llama3")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval(), tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--layers", type=int, default=2, help="the tiny random Llama's layers (without --model)")
    args = parser.parse_args(argv)

    import torch

    from structspec.models import load

    torch.set_num_threads(args.threads)
    model, tokenizer = load(args.model, device=args.device, dtype=args.dtype) if args.model else tiny_llama(args.layers)
    generator = Generator(model, tokenizer)
    requests = [Request(messages, schema, max_new_tokens=args.max_new_tokens)
                for messages, schema in workloads(args.requests, args.seed)["shared"]]
    spec = SpecConfig(sources=("forced", "ngram"))
    generator.generate_batch(requests[: max(1, len(requests) // 4)], speculative=spec, max_batch=args.max_batch)

    phases = Phases()
    head = model.get_output_embeddings()
    patches = [(Batch, "step", "step"), (Batch, "_join", "join"), (Decoding, "draft", "draft"),
               (Batch, "_forward", "forward"), (BatchCache, "_layout", "  layout"), (MaskPrefetch, "wait", "mask wait"),
               (Decoding, "commit", "verify"), (BatchCache, "keep", "keep")]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, phase in patches:
        setattr(owner, name, phases.timed(phase, getattr(owner, name)))
    model.forward = phases.timed("  model", model.forward)
    head.forward = phases.timed("    output layer", head.forward)
    process = time.process_time()
    try:
        results = generator.generate_batch(requests, speculative=spec, max_batch=args.max_batch)
    finally:
        for owner, name, function in saved:
            setattr(owner, name, function)
        del model.forward, head.forward
    process = time.process_time() - process
    tokens = sum(len(result.token_ids) for result in results)
    rounds = phases.seconds["step"][2]
    print(f"{len(results)} requests, {tokens} tokens in {rounds} rounds (max batch {args.max_batch})")
    print(f"{'phase':18s} {'wall ms':>9s} {'cpu ms':>9s} {'cpu ms/token':>13s} {'cpu ms/round':>13s}")
    order = ["join", "draft", "forward", "  layout", "  model", "    output layer", "mask wait", "verify", "keep",
             "step"]
    rows = [(name, *phases.seconds.get(name, (0.0, 0.0, 0))[:2]) for name in order] + [("process cpu", None, process)]
    for name, wall, cpu in rows:
        shown = "" if wall is None else f"{wall * 1e3:.1f}"
        print(f"{name:18s} {shown:>9s} {cpu * 1e3:9.1f} {cpu * 1e3 / tokens:13.3f} {cpu * 1e3 / rounds:13.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
