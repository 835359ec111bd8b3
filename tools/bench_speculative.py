"""Speculative-decoding benchmark on a JSON-extraction workload.

    python tools/bench_speculative.py [--model PATH] [--draft-model PATH] [--repeats 3]
                                      [--max-new-tokens 96] [--threads 1] [--json out.json]
                                      [--skip-peers] [--only structspec,unconstrained] [--grounded]

Each prompt holds a source text and asks for JSON following a schema (a handful are inline; in the
bundled demo models' chat format when the tokenizer has a chat template).
Every method decodes every prompt greedily ``--repeats`` times, interleaved (each cycle runs every
method on every prompt); reported per method are the medians over runs of tokens per target
forward and tokens per second, the paired speed-up over structspec plain, the share of outputs
that validate, and for structspec the share of wall time outside the models (grammar masks,
n-gram lookup and bookkeeping). ``--grounded`` adds a grounded twin of each structspec method:
every plain string of the schema must copy a span of the prompt's source text (docs/grounded.md).

Methods: unconstrained greedy ``model.generate``; structspec plain constrained decoding and
speculative with each draft source alone and all together; transformers' assisted generation
(``assistant_model=``) and prompt lookup (unconstrained); peers' constrained decoding through
``model.generate`` where installed: xgrammar with its own logits processor; llguidance, outlines-core,
transformers-cfg and lm-format-enforcer through their mask engines behind one processor
(`peers.hf_processor`: their own transformers integrations do not run under transformers 5).
A peer that is missing or fails is skipped with the reason printed.

Default model: stories260K from the shared assets with draft = target (an overhead-only
bound: the draft is as good as can be and costs as much as the target).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

CONTACT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "email": {"type": "string", "maxLength": 40},
        "phone": {"type": "string", "maxLength": 20},
        "city": {"type": "string", "maxLength": 24},
    },
    "required": ["name", "email", "phone", "city"],
    "additionalProperties": False,
}
INVOICE = {
    "type": "object",
    "properties": {
        "invoice_number": {"type": "string", "maxLength": 16},
        "customer": {"type": "string", "maxLength": 40},
        "total": {"type": "number"},
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"description": {"type": "string", "maxLength": 32}, "quantity": {"type": "integer"}},
                "required": ["description", "quantity"],
                "additionalProperties": False,
            },
            "maxItems": 4,
        },
    },
    "required": ["invoice_number", "customer", "total", "currency", "items"],
    "additionalProperties": False,
}
EVENT = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 40},
        "date": {"type": "string", "maxLength": 12},
        "venue": {"type": "string", "maxLength": 32},
        "free": {"type": "boolean"},
    },
    "required": ["title", "date", "venue", "free"],
    "additionalProperties": False,
}
WORKLOAD = [
    ("Contact card\nName: Lily Stone\nEmail: lily.stone@example.com\nPhone: +44 20 7946 0958\nCity: Leeds", CONTACT),
    ("INVOICE INV-2041\nBilled to: Tom Baker Ltd\n2 x Blue chair\n1 x Oak table\nTotal due: 310.50 EUR", INVOICE),
    ("Spring Garden Fair on 2024-05-12 at the Town Hall park. Entry is free for everyone.", EVENT),
    ("Once upon a time, Lily met Ben in the park. Ben said his email was ben@park.org and his phone 555 0101.\n"
     "They lived in Paris.", CONTACT),
]


def prompt_of(text: str, schema: dict, tokenizer: Any) -> Any:
    """Chat messages in the bundled demo format when the tokenizer has a chat template, else a
    plain text prompt."""
    if getattr(tokenizer, "chat_template", None):
        from structspec.models.prompt import extraction_messages

        return extraction_messages(text, schema)
    return f"{text}\nSchema: {json.dumps(schema, separators=(',', ':'))}\nJSON: "


# -- runs ------------------------------------------------------------------------------------

class Counter:
    """Counts a model's forward calls."""

    def __init__(self, model: Any) -> None:
        self.calls = 0
        model.register_forward_hook(self._hook)

    def _hook(self, *_: Any) -> None:
        self.calls += 1


def hf_run(model: Any, tokenizer: Any, counter: Counter, max_new: int, **kwargs: Any) -> Callable[..., dict]:
    """A method calling ``model.generate`` (``make_processor(schema)`` builds a logits processor)."""
    make_processor = kwargs.pop("make_processor", None)
    prefix_fn = kwargs.pop("make_prefix_fn", None)

    def run(prompt: Any, schema: dict, text: str) -> dict:
        import torch
        from transformers import LogitsProcessorList

        from structspec.generation.prompt import prompt_ids

        inputs = {"input_ids": torch.tensor([prompt_ids(tokenizer, prompt)], device=model.device)}
        extra = dict(kwargs)
        if make_processor is not None:
            extra["logits_processor"] = LogitsProcessorList([make_processor(schema)])
        if prefix_fn is not None:
            extra["prefix_allowed_tokens_fn"] = prefix_fn(schema)
        before = counter.calls
        start = time.perf_counter()
        out = model.generate(**inputs, max_new_tokens=max_new, do_sample=False, pad_token_id=0, **extra)
        seconds = time.perf_counter() - start
        ids = out[0, inputs["input_ids"].shape[1]:].tolist()
        text = tokenizer.decode(ids, skip_special_tokens=True)
        return {"tokens": len(ids), "forwards": counter.calls - before, "seconds": seconds, "text": text}

    return run


def ours_run(generator: Any, max_new: int, speculative: Any, grounded: bool = False) -> Callable[..., dict]:
    """A method calling structspec's Generator (``grounded``: every plain string copies a span of the text)."""

    def run(prompt: Any, schema: dict, text: str) -> dict:
        grounding = {"source": text, "grounded": True} if grounded else {}
        result = generator.generate(prompt, schema, max_new_tokens=max_new, speculative=speculative, **grounding)
        s = result.stats
        outside = s.seconds["mask"] + s.seconds["other"] + (s.seconds["draft"] if s.draft_forwards == 0 else 0.0)
        return {"tokens": s.tokens, "forwards": s.target_forwards, "seconds": s.seconds["total"], "text": result.text,
                "overhead": outside / s.seconds["total"], "acceptance": s.acceptance_rate}

    return run


def valid(text: str, schema: dict) -> bool:
    """Whether ``text`` is JSON valid under ``schema``."""
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def measure(methods: list[tuple[str, Callable[..., dict], bool]], tokenizer: Any,
            repeats: int) -> list[dict]:
    """Every method on every prompt, interleaved: each repeat runs the prompts in turn and each
    prompt every method in turn, so a drift in machine speed touches all methods alike. Medians
    over prompts x repeats; ``x plain`` is the median of each run's tokens/s over structspec
    plain's on the same prompt in the same cycle (paired, so cycle-to-cycle noise cancels)."""
    prompts = [(prompt_of(text, schema, tokenizer), schema, text) for text, schema in WORKLOAD]
    live = []
    for name, run, constrained in methods:
        try:
            for prompt, schema, text in prompts:
                run(prompt, schema, text)  # warm-up: compilation, caches
        except Exception as exc:  # a peer failing at run time is reported, not fatal
            print(f"skip {name}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        live.append((name, run, constrained))
    samples: dict[str, list[dict]] = {name: [] for name, _, _ in live}
    for _ in range(repeats):
        for prompt, schema, text in prompts:
            for method in list(live):
                name, run, _ = method
                try:
                    result = run(prompt, schema, text)
                except Exception as exc:
                    print(f"skip {name}: {type(exc).__name__}: {str(exc)[:160]}")
                    live.remove(method)
                    continue
                result["ok"] = valid(result["text"], schema)
                samples[name].append(result)
    baseline = samples.get("structspec plain")
    rows = [_row(name, samples[name], constrained, baseline) for name, _, constrained in live]
    for row in rows:
        print(_format(row), flush=True)
    return rows


def _row(name: str, runs: list[dict], constrained: bool, baseline: list[dict] | None) -> dict:
    rates = [r["tokens"] / r["seconds"] for r in runs]
    paired = [rate / (b["tokens"] / b["seconds"]) for rate, b in zip(rates, baseline, strict=True)] if baseline else []
    ours = [r for r in runs if "overhead" in r]
    return {
        "method": name,
        "tokens_per_forward": statistics.median(r["tokens"] / max(r["forwards"], 1) for r in runs),
        "tokens_per_s": statistics.median(rates),
        "x_plain": statistics.median(paired) if paired else None,
        "valid": sum(r["ok"] for r in runs) / len(runs) if constrained else None,
        "outside_models": statistics.median(r["overhead"] for r in ours) if ours else None,
        "acceptance": statistics.median(r["acceptance"] for r in ours) if ours else None,
    }


def _format(row: dict) -> str:
    extra = ""
    if row["x_plain"] is not None:
        extra += f"  {row['x_plain']:5.2f}x plain"
    if row["valid"] is not None:
        extra += f"  valid {row['valid']:.0%}"
    if row["outside_models"] is not None:
        extra += f"  outside-models {row['outside_models']:.1%}  acceptance {row['acceptance']:.2f}"
    return f"{row['method']:<36} {row['tokens_per_forward']:6.2f} tok/fwd {row['tokens_per_s']:8.1f} tok/s{extra}"


# -- peers -----------------------------------------------------------------------------------

def peer_methods(model: Any, tokenizer: Any, tokenizer_dir: str, counter: Counter,
                 max_new: int) -> list[tuple[str, Callable]]:
    """Peers' constrained decoding through ``model.generate``: xgrammar's own logits processor, the
    others' mask engines behind `peers.hf_processor`; missing ones are reported and skipped."""
    methods = []
    width = model.get_output_embeddings().weight.shape[0]
    try:
        import xgrammar as xgr
        from xgrammar.contrib.hf import LogitsProcessor as XgrProcessor

        compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=width), max_threads=1)

        def xgr_processor(schema: dict) -> Any:
            return XgrProcessor(compiler.compile_json_schema(json.dumps(schema), any_whitespace=False))

        methods.append(("xgrammar (model.generate)", hf_run(model, tokenizer, counter, max_new,
                                                            make_processor=xgr_processor)))
    except Exception as exc:  # any import or set-up failure: report and go on
        print(f"skip xgrammar: {type(exc).__name__}: {exc}")
    for name in ("llguidance", "outlines-core", "transformers-cfg", "lm-format-enforcer"):
        try:  # their own transformers integrations do not run under transformers 5: a peer-backed processor
            from peers import make_peer
            from peers.hf_processor import peer_processor_factory

            peer = make_peer(name, tokenizer_dir, compile_timeout_s=120.0)
            methods.append((f"{name} (model.generate)", hf_run(model, tokenizer, counter, max_new,
                                                               make_processor=peer_processor_factory(peer))))
        except Exception as exc:
            print(f"skip {name}: {type(exc).__name__}: {str(exc)[:160]}")
    return methods


# -- main ------------------------------------------------------------------------------------

def load(path: str) -> tuple[Any, Any]:
    """A causal LM and its tokenizer from a local folder (or a ``structspec.models`` alias such
    as ``demo`` / ``demo-draft`` where that loader exists)."""
    try:
        from structspec.models import load as load_model
    except ImportError:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    model, tokenizer = load_model(path)
    return model, tokenizer


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints one line per method."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="target model folder or alias such as 'demo' (default: shared stories260K)")
    parser.add_argument("--draft-model", help="draft model folder or alias (default: a second copy of the target)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-peers", action="store_true", help="leave out the peers' logits processors")
    parser.add_argument("--only", help="comma-separated substrings: run only methods whose name contains one")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--grounded", action="store_true",
                        help="add a grounded twin of each structspec method (plain strings copy spans of the text)")
    args = parser.parse_args(argv)

    import torch

    from structspec.generation import Generator, SpecConfig
    from structspec.models import resolve

    torch.set_num_threads(args.threads)
    model_path = args.model
    if model_path is None:
        from _assets import require_assets

        model_path = str(require_assets() / "models" / "stories260K")
    model, tokenizer = load(model_path)
    draft, _ = load(args.draft_model or model_path)  # a separate object, so forward counts stay apart
    counter = Counter(model)
    n = args.max_new_tokens
    print(f"model {model_path}  draft {args.draft_model or model_path + ' (copy)'}  threads {args.threads}  "
          f"max_new_tokens {n}  repeats {args.repeats}  prompts {len(WORKLOAD)}")
    gen = Generator(model, tokenizer, draft_model=draft)
    methods: list[tuple[str, Callable, bool]] = [
        ("unconstrained model.generate", hf_run(model, tokenizer, counter, n), False),
        ("structspec plain", ours_run(gen, n, None), True),
        ("structspec forced", ours_run(gen, n, SpecConfig(sources=("forced",))), True),
        ("structspec ngram", ours_run(gen, n, SpecConfig(sources=("ngram",))), True),
        ("structspec draft", ours_run(gen, n, SpecConfig(sources=("draft",))), True),
        ("structspec forced+ngram", ours_run(gen, n, SpecConfig(sources=("forced", "ngram"))), True),
        ("structspec all", ours_run(gen, n, SpecConfig()), True),
        ("assisted generation (unconstrained)", hf_run(model, tokenizer, counter, n, assistant_model=draft), False),
        ("prompt lookup (unconstrained)", hf_run(model, tokenizer, counter, n, prompt_lookup_num_tokens=10), False),
    ]
    if args.grounded:
        configs = {"plain": None, "forced": SpecConfig(sources=("forced",)), "ngram": SpecConfig(sources=("ngram",)),
                   "forced+ngram": SpecConfig(sources=("forced", "ngram")), "all": SpecConfig()}
        methods += [(f"structspec {name} grounded", ours_run(gen, n, config, grounded=True), True)
                    for name, config in configs.items()]
    if not args.skip_peers:
        peers = peer_methods(model, tokenizer, str(resolve(model_path)), counter, n)
        methods += [(name, run, True) for name, run in peers]
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        methods = [m for m in methods if any(w in m[0] for w in wanted)]
    rows = measure(methods, tokenizer, args.repeats)
    if args.json:
        Path(args.json).write_text(json.dumps({"model": model_path, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
