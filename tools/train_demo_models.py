"""Train the bundled demo models: a byte-level BPE tokenizer, a ~5M target and a ~1M draft.

Both models are transformers ``LlamaForCausalLM`` trained on the corpus of
``tools/make_extraction_corpus.py``, with the loss on the assistant turn (the JSON answer and
its end-of-turn token) only. Checkpoints are written in float16 with config, generation config,
tokenizer and a model card, every ``--save-every`` steps, so a partial run is still usable.

    python tools/make_extraction_corpus.py --out /tmp/demo/corpus
    python tools/train_demo_models.py tokenizer --corpus /tmp/demo/corpus --out /tmp/demo/tokenizer
    python tools/train_demo_models.py model --size target --corpus /tmp/demo/corpus \\
        --tokenizer /tmp/demo/tokenizer --out structspec/models/target --steps 3000
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from structspec.models.prompt import CHAT_TEMPLATE, END_TOKEN, PAD_TOKEN, SPECIAL_TOKENS

SIZES: dict[str, dict[str, int]] = {
    "target": {"hidden_size": 224, "intermediate_size": 608, "num_hidden_layers": 4, "num_attention_heads": 4},
    "draft": {"hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2, "num_attention_heads": 2},
}
"""Model shapes; with the ~4.8k-id tokenizer (tied embeddings) the target has ~3.5M and the draft ~1.0M parameters."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def train_tokenizer(corpus: Path, out: Path, vocab_size: int) -> None:
    """Byte-level BPE over the training prompts and answers; digits always stay single tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    records = read_jsonl(corpus / "train.jsonl")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator((r["prompt"] + r["completion"] for r in records), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=END_TOKEN, pad_token=PAD_TOKEN, chat_template=CHAT_TEMPLATE,
        model_max_length=1024, clean_up_tokenization_spaces=False,
    )
    save_tokenizer(fast, out)
    print(f"tokenizer: {len(fast)} ids saved to {out}")


def encode(records: list[dict[str, Any]], tokenizer: Any, max_len: int) -> list[tuple[list[int], int]]:
    """(prompt + answer ids, prompt length) per record; longer than ``max_len`` are dropped."""
    out = []
    prompts = tokenizer([r["prompt"] for r in records], add_special_tokens=False)["input_ids"]
    answers = tokenizer([r["completion"] for r in records], add_special_tokens=False)["input_ids"]
    for p, a in zip(prompts, answers, strict=True):
        if len(p) + len(a) <= max_len:
            out.append((p + a, len(p)))
    return out


def batches(data: list[tuple[list[int], int]], batch_size: int, rng: random.Random) -> Iterator[list[int]]:
    """Endless batches of indices with similar lengths (little padding), in random order."""
    while True:
        order = list(range(len(data)))
        rng.shuffle(order)
        chunk = batch_size * 64
        groups = []
        for start in range(0, len(order), chunk):
            part = sorted(order[start:start + chunk], key=lambda i: len(data[i][0]))
            groups.extend(part[k:k + batch_size] for k in range(0, len(part), batch_size))
        rng.shuffle(groups)
        yield from groups


def collate(data: list[tuple[list[int], int]], idx: list[int], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded ids, attention mask, and a mask of the positions whose next token is in the answer."""
    width = max(len(data[i][0]) for i in idx)
    ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(idx), width), dtype=torch.long)
    target = torch.zeros((len(idx), width), dtype=torch.bool)
    for row, i in enumerate(idx):
        seq, plen = data[i]
        ids[row, : len(seq)] = torch.tensor(seq)
        attn[row, : len(seq)] = 1
        target[row, plen - 1 : len(seq) - 1] = True
    return ids, attn, target


def answer_loss(model: Any, ids: torch.Tensor, attn: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on answer tokens only; the LM head runs on those positions alone."""
    hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state
    logits = model.lm_head(hidden[target])
    labels = ids[:, 1:][target[:, :-1]]
    return torch.nn.functional.cross_entropy(logits.float(), labels)


def lr_at(step: int, progress: float, peak: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 10% of ``peak`` as ``progress`` goes 0 -> 1."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def validation_loss(model: Any, data: list[tuple[list[int], int]], pad_id: int, device: str) -> float:
    model.eval()
    losses = []
    for start in range(0, len(data), 32):
        idx = list(range(start, min(start + 32, len(data))))
        ids, attn, target = (t.to(device) for t in collate(data, idx, pad_id))
        losses.append(answer_loss(model, ids, attn, target).item())
    model.train()
    return sum(losses) / len(losses)


def save_tokenizer(tokenizer: Any, out: Path) -> None:
    """Standard tokenizer files, with the chat template inside ``tokenizer_config.json``.

    Keeping everything in JSON files loads on older transformers too and is covered by the
    package data globs.
    """
    tokenizer.save_pretrained(out)
    config_path, template_path = out / "tokenizer_config.json", out / "chat_template.jinja"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    template_path.unlink(missing_ok=True)


def save(model: Any, tokenizer: Any, out: Path, card: str) -> None:
    """float16 safetensors, config, generation config, tokenizer and model card into ``out``."""
    import copy

    out.mkdir(parents=True, exist_ok=True)
    half = copy.deepcopy(model).to("cpu", torch.float16)
    half.save_pretrained(out, safe_serialization=True)
    save_tokenizer(tokenizer, out)
    (out / "README.md").write_text(card, encoding="utf-8")


def model_card(args: argparse.Namespace, params: int, curve: list[dict[str, float]], seconds: float,
               tokens_per_s: float) -> str:
    start_note = f"Initialised from an earlier run of this tool (`{args.init}`). " if args.init else ""
    rows = "\n".join(f"| {p['step']} | {p['loss']:.4f} | {p.get('val_loss', float('nan')):.4f} |" for p in curve)
    return f"""# structspec demo {args.size}

A {params / 1e6:.2f}M-parameter `LlamaForCausalLM` trained by the structspec project to extract JSON
from short documents, so `structspec extract` and speculative decoding work offline. It is a
demonstration model: it knows only the synthetic documents below and nothing about the world.

## Data

`tools/make_extraction_corpus.py` (written to `{args.corpus}`): synthetic invoices, contact cards, event notices,
product sheets, order confirmations, support tickets and addresses, each with a JSON Schema and the
gold JSON. Job posts, two document layouts and one label and one phrasing of every field are kept
for the held-out split only. Prompt format: `structspec/models/prompt.py`.

## Training

```
{" ".join(sys.argv)}
```

{start_note}{curve[-1]["step"]} steps of AdamW (peak lr {args.lr}, cosine to 10%,
{args.warmup} warm-up steps), batch {args.batch}, sequences up to {args.max_len} tokens, loss on the answer
only, device `{args.device}`, {args.threads} CPU threads.
Time {seconds / 60:.1f} min, {tokens_per_s:.0f} tokens/s (prompt and answer tokens).

| step | train loss | held-out loss |
|---|---|---|
{rows}

## Limits

Trained only on the synthetic extraction format; outside it the model produces plausible-looking
but wrong values. Use it with grammar-constrained decoding (it is not trained to stop otherwise).
"""


def train_model(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    data = encode(read_jsonl(args.corpus / "train.jsonl"), tokenizer, args.max_len)
    heldout = encode(read_jsonl(args.corpus / "heldout.jsonl")[: args.val_examples], tokenizer, args.max_len)
    eos_id = tokenizer.convert_tokens_to_ids(END_TOKEN)
    pad_id = tokenizer.pad_token_id
    config = LlamaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=1024, tie_word_embeddings=True,
        num_key_value_heads=SIZES[args.size]["num_attention_heads"], bos_token_id=None, eos_token_id=eos_id,
        pad_token_id=pad_id, **SIZES[args.size],
    )
    model = (LlamaForCausalLM.from_pretrained(args.init, dtype=torch.float32) if args.init
             else LlamaForCausalLM(config)).to(args.device)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"params": params, "train_examples": len(data), "heldout_examples": len(heldout)}), flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    curve: list[dict[str, float]] = []
    start, tokens, window = time.time(), 0, []
    stream = batches(data, args.batch, rng)
    budget_s = args.minutes * 60 if args.minutes else math.inf
    step, progress = 0, 0.0
    while progress < 1.0:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, progress, args.lr, args.warmup)
        ids, attn, target = (t.to(args.device) for t in collate(data, next(stream), pad_id))
        loss = answer_loss(model, ids, attn, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tokens += int(attn.sum())
        window.append(loss.item())
        step += 1
        progress = max(step / args.steps, (time.time() - start) / budget_s)
        last = progress >= 1.0
        if step % args.log_every == 0 or last:
            elapsed = time.time() - start
            point = {"step": step, "loss": sum(window) / len(window), "elapsed_s": round(elapsed, 1),
                     "tokens_per_s": round(tokens / elapsed, 1)}
            window = []
            if step % args.save_every == 0 or last:
                point["val_loss"] = validation_loss(model, heldout, pad_id, args.device)
                curve.append(point)
                save(model, tokenizer, args.out, model_card(args, params, curve, elapsed, tokens / elapsed))
            print(json.dumps(point), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tokenizer", help="train the byte-level BPE tokenizer")
    t.add_argument("--corpus", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--vocab-size", type=int, default=8192)
    m = sub.add_parser("model", help="train the target or the draft model")
    m.add_argument("--size", choices=sorted(SIZES), required=True)
    m.add_argument("--corpus", type=Path, required=True)
    m.add_argument("--tokenizer", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--init", type=Path, help="continue from this saved model (same tokenizer), not random weights")
    m.add_argument("--steps", type=int, default=3000, help="most optimizer steps")
    m.add_argument("--minutes", type=float, help="time budget: the schedule ends when it is spent, or after --steps")
    m.add_argument("--batch", type=int, default=16)
    m.add_argument("--lr", type=float, default=2e-3)
    m.add_argument("--warmup", type=int, default=100)
    m.add_argument("--max-len", type=int, default=512)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--threads", type=int, default=2)
    m.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    m.add_argument("--log-every", type=int, default=25)
    m.add_argument("--save-every", type=int, default=250, help="steps between checkpoints (a multiple of --log-every)")
    m.add_argument("--val-examples", type=int, default=128)
    args = parser.parse_args(argv)
    if args.command == "tokenizer":
        train_tokenizer(args.corpus, args.out, args.vocab_size)
    else:
        if args.save_every % args.log_every:
            parser.error("--save-every must be a multiple of --log-every")
        train_model(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
