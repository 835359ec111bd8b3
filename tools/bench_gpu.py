"""Cost of the grammar per token on a GPU: Llama-shaped models with random weights.

    python tools/bench_gpu.py [--sizes 1b,8b] [--dtype bfloat16] [--max-new-tokens 96] [--repeats 3]

Builds Llama-3.2-1B- and Llama-3.1-8B-shaped models (random weights, the Llama-3 tokenizer's
vocabulary) on the first CUDA device and decodes the four extraction prompts of
``tools/bench_speculative.py`` greedily, each method on each prompt ``--repeats`` times,
interleaved: unconstrained ``model.generate``; structspec's ``Generator`` (plain constrained
decoding, masks computed in a worker thread during each forward); ``model.generate`` with
``structspec.hf.GrammarLogitsProcessor``; and with xgrammar's logits processor where xgrammar
is installed. Random weights make the outputs gibberish within the grammar, which is the point:
every token pays a mask, and the models' cost is real. Reported per method: the median seconds
per generated token and its ratio to unconstrained generation (the targets: constrained plain
<= 1.05x, the processor at or under xgrammar's). Without CUDA it says so and exits 0.

    python tools/bench_gpu.py --save-model DIR --sizes 1b [--dtype bfloat16]

writes one such model (built on the GPU when there is one, else on the CPU) with the Llama-3
tokenizer to ``DIR`` instead, for the server benchmark on a GPU:

    python tools/bench_server.py --model DIR --device cuda --dtype bfloat16 --clients 1,8,32 --max-batch 32
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {  # hidden, intermediate, layers, heads, key-value heads
    "1b": (2048, 8192, 16, 32, 8),
    "8b": (4096, 14336, 32, 32, 8),
}


def build(size: str, vocab_size: int, dtype: Any, device: str = "cuda") -> Any:
    """A Llama-shaped causal LM with random weights on ``device``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, intermediate, layers, heads, kv_heads = SHAPES[size]
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=4096, rope_theta=500000.0, tie_word_embeddings=size == "1b")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    return model.eval()


def methods(model: Any, tokenizer: Any, max_new: int) -> list[tuple[str, Any]]:
    """(name, run(prompt, schema, text) -> seconds and tokens) for every method that sets up."""
    import torch
    from bench_speculative import Counter, hf_run

    import structspec
    from structspec.generation import Generator
    from structspec.hf import GrammarLogitsProcessor

    counter = Counter(model)
    generator = Generator(model, tokenizer)
    width = model.get_output_embeddings().weight.shape[0]
    vocabulary = structspec.Vocabulary.from_tokenizer(tokenizer, vocab_size=width)

    def processor(schema: dict) -> Any:
        return GrammarLogitsProcessor(structspec.compile(structspec.Grammar.from_json_schema(schema), vocabulary))

    def synchronize() -> None:
        if model.device.type == "cuda":
            torch.cuda.synchronize()

    def plain(prompt: Any, schema: dict, text: str) -> dict:
        synchronize()
        result = generator.generate(prompt, schema, max_new_tokens=max_new)
        synchronize()
        return {"tokens": result.stats.tokens, "seconds": result.stats.seconds["total"]}

    found = [("unconstrained model.generate", hf_run(model, tokenizer, counter, max_new)),
             ("structspec Generator (plain)", plain),
             ("structspec GrammarLogitsProcessor", hf_run(model, tokenizer, counter, max_new,
                                                         make_processor=processor))]
    try:
        import xgrammar as xgr
        from xgrammar.contrib.hf import LogitsProcessor as XgrProcessor

        compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=width), max_threads=1)
        found.append(("xgrammar logits processor", hf_run(
            model, tokenizer, counter, max_new,
            make_processor=lambda schema: XgrProcessor(compiler.compile_json_schema(json.dumps(schema),
                                                                                    any_whitespace=False)))))
    except Exception as exc:  # not installed or fails to set up: reported, skipped
        print(f"skip xgrammar: {type(exc).__name__}: {exc}")
    return found


def save_model(folder: Path, size: str, dtype: Any) -> int:
    """Write the random-weight model of ``size`` and the Llama-3 tokenizer to ``folder``."""
    import torch
    from _assets import load_tokenizer

    if size not in SHAPES:
        print(f"bench_gpu: --save-model takes one size of {', '.join(SHAPES)}, got {size!r}", file=sys.stderr)
        return 2
    tokenizer = load_tokenizer("llama3")
    model = build(size, len(tokenizer), dtype, "cuda" if torch.cuda.is_available() else "cpu")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    print(f"bench_gpu: a {size} Llama-shaped model with random weights, {dtype}, is in {folder}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1b,8b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda", help="where to measure (cpu only checks the tool itself)")
    parser.add_argument("--save-model", type=Path, metavar="DIR",
                        help="write the model of the one size given to DIR, with its tokenizer, and measure nothing")
    args = parser.parse_args(argv)
    import torch

    if args.save_model is not None:
        return save_model(args.save_model, args.sizes, getattr(torch, args.dtype))

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device here; nothing measured (run it on a machine with a GPU)")
        return 0
    from _assets import load_tokenizer
    from bench_speculative import WORKLOAD, prompt_of

    tokenizer = load_tokenizer("llama3")
    dtype = getattr(torch, args.dtype)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else args.device
    print(f"device: {name}, {args.dtype}, {args.max_new_tokens} new tokens, greedy", flush=True)
    for size in [s.strip() for s in args.sizes.split(",") if s.strip()]:
        model = build(size, len(tokenizer), dtype, args.device)
        runs = methods(model, tokenizer, args.max_new_tokens)
        per_token: dict[str, list[float]] = {name: [] for name, _ in runs}
        prompts = [(prompt_of(text, schema, tokenizer), schema, text) for text, schema in WORKLOAD]
        for prompt in prompts:  # warm-up: kernels, compiled grammars, caches
            for _, run in runs:
                run(*prompt)
        for _ in range(args.repeats):
            for prompt in prompts:
                for method, run in runs:
                    out = run(*prompt)
                    if out["tokens"]:
                        per_token[method].append(out["seconds"] / out["tokens"])
        base = statistics.median(per_token[runs[0][0]])
        print(f"\n{size}: {'method':36} {'ms/token':>9} {'vs unconstrained':>17}")
        for method, values in per_token.items():
            median = statistics.median(values)
            print(f"{'':4}{method:36} {median * 1e3:9.2f} {median / base:16.2f}x", flush=True)
        del model
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
