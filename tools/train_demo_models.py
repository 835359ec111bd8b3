"""Train the bundled demo models: a byte-level BPE tokenizer, a ~4M target and a ~1.4M draft.

Both models are transformers ``LlamaForCausalLM`` trained on the corpus of
``tools/make_extraction_corpus.py``, with the loss on the assistant turn (the JSON answer and
its end-of-turn token) and on copy drills only, after a warm-up on repeated random tokens that
teaches them to copy (extraction is mostly copying from the source text). Checkpoints are
written in float16 with config, generation config, tokenizer and a model card, every
``--save-every`` steps, so a partial run is still usable.

    python tools/make_extraction_corpus.py --out /tmp/demo/corpus --train 150000 --seed 3
    python tools/train_demo_models.py tokenizer --corpus /tmp/demo/corpus --out /tmp/demo/tokenizer
    python tools/train_demo_models.py model --size target --corpus /tmp/demo/corpus \\
        --tokenizer /tmp/demo/tokenizer --out structspec/models/target --minutes 65 --copy-warmup 1500
    python tools/train_demo_models.py model --size draft --corpus /tmp/demo/corpus \\
        --tokenizer /tmp/demo/tokenizer --out structspec/models/draft --minutes 11

Each model card records the exact command, time and loss curve of the shipped checkpoint.
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

from structspec.models.prompt import CHAT_TEMPLATE, END_TOKEN, PAD_TOKEN, SPECIAL_TOKENS, TEXT_HEADING

SIZES: dict[str, dict[str, int]] = {
    "target": {"hidden_size": 224, "intermediate_size": 608, "num_hidden_layers": 4, "num_attention_heads": 4},
    "draft": {"hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2, "num_attention_heads": 2},
}
"""Model shapes; with the 8k-id tokenizer (tied embeddings) the target has 4.3M and the draft 1.4M parameters."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def train_tokenizer(corpus: Path, out: Path, vocab_size: int) -> None:
    """Byte-level BPE over the training prompts and answers, shaped so that copying is token copying.

    Every whitespace character is a token of its own and digits are single tokens, so a word has
    the same ids after a space in the source text as after a quote in the JSON answer. (With
    GPT-2-style merges, `` Müller`` and ``Müller`` are unrelated ids, and a tiny model must learn
    that pairing word by word instead of copying.)
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    records = read_jsonl(corpus / "train.jsonl")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s"), behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
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


Item = tuple[list[int], list[tuple[int, int]]]
"""A training sequence and the half-open ranges of its positions whose tokens carry the loss."""


def encode(records: list[dict[str, Any]], tokenizer: Any, max_len: int) -> list[Item]:
    """Prompt + answer ids per record, the loss on the answer; longer than ``max_len`` are dropped."""
    out = []
    prompts = tokenizer([r["prompt"] for r in records], add_special_tokens=False)["input_ids"]
    answers = tokenizer([r["completion"] for r in records], add_special_tokens=False)["input_ids"]
    for p, a in zip(prompts, answers, strict=True):
        if len(p) + len(a) <= max_len:
            out.append((p + a, [(len(p), len(p) + len(a))]))
    return out


def copy_drills(
    data: list[Item], count: int, marker: list[int], end_id: int, vocab: range, rng: random.Random
) -> list[Item]:
    """Sequences that teach copying: a source, then spans of it, each after the two tokens that
    precede it there; the loss is on the spans and the final end token. Half the sources are
    training prompts (spans from the text after ``marker``), half are random tokens drawn from
    ``vocab``, where nothing but copying lowers the loss. Extraction is mostly copying, and a
    tiny model fed only extraction examples learns the answers' shape long before it learns to
    copy a value it has never seen."""
    drills = []
    while len(drills) < count:
        if rng.random() < 0.5:
            source = [rng.choice(vocab) for _ in range(rng.randint(24, 120))]
            first, stop = 2, len(source)
        else:
            ids, ranges = data[rng.randrange(len(data))]
            source = ids[: ranges[0][0]]  # the prompt
            starts = [i + len(marker) for i in range(len(source)) if source[i : i + len(marker)] == marker]
            if not starts or end_id not in source[starts[-1] :]:
                continue
            first, stop = starts[-1] + 2, source.index(end_id, starts[-1])
        if stop - first < 4:
            continue
        seq, loss = list(source), []
        for _ in range(rng.randint(2, 5)):
            start = rng.randrange(first, stop - 2)
            span = source[start : min(stop, start + rng.randint(3, 12))]
            seq += source[start - 2 : start]
            loss.append((len(seq), len(seq) + len(span)))
            seq += span
        loss.append((len(seq), len(seq) + 1))
        seq.append(end_id)
        drills.append((seq, loss))
    return drills


def batches(data: list[Item], batch_size: int, rng: random.Random) -> Iterator[list[int]]:
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


def collate(data: list[Item], idx: list[int], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded ids, attention mask, and a mask of the positions whose next token carries the loss."""
    width = max(len(data[i][0]) for i in idx)
    ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(idx), width), dtype=torch.long)
    target = torch.zeros((len(idx), width), dtype=torch.bool)
    for row, i in enumerate(idx):
        seq, ranges = data[i]
        ids[row, : len(seq)] = torch.tensor(seq)
        attn[row, : len(seq)] = 1
        for start, stop in ranges:
            target[row, start - 1 : stop - 1] = True
    return ids, attn, target


def marked_loss(model: Any, ids: torch.Tensor, attn: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on the tokens that carry the loss only; the LM head runs on those positions alone."""
    hidden = model.model(input_ids=ids, attention_mask=attn).last_hidden_state
    logits = model.lm_head(hidden[target])
    labels = ids[:, 1:][target[:, :-1]]
    return torch.nn.functional.cross_entropy(logits.float(), labels)


def copy_warmup(model: Any, optimizer: Any, steps: int, vocab: range, device: str, seed: int) -> float:
    """Train on random token sequences said twice, the loss on the second saying; the last loss.

    This forms the copying circuit before any extraction data, which a tiny model otherwise does
    not find. Each batch draws its own prefix (0-16 tokens), sequence length (8-64) and gap
    between the two sayings (0-24): with a fixed offset the model learns that position instead.
    Batches of 32 at lr 1e-3 (3e-3 never formed the circuit).
    """
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)

    def tokens(n: int) -> torch.Tensor:
        return torch.randint(vocab.start, vocab.stop, (32, n), generator=generator)

    loss = torch.tensor(float("nan"))
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = 1e-3 * min(1.0, (step + 1) / 20)
        length, gap, prefix = rng.randint(8, 64), rng.randint(0, 24), rng.randint(0, 16)
        said = tokens(length)
        ids = torch.cat([tokens(prefix), said, tokens(gap), said], 1).to(device)
        second = ids.shape[1] - length
        logits = model(input_ids=ids).logits[:, second:-1]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), ids[:, second + 1 :].reshape(-1)
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 100 == 0:
            print(json.dumps({"copy_warmup_step": step, "loss": loss.item()}), flush=True)
    return loss.item()


def lr_at(step: int, progress: float, peak: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 10% of ``peak`` as ``progress`` goes 0 -> 1."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def validation_loss(model: Any, data: list[Item], pad_id: int, device: str) -> float:
    model.eval()
    losses = []
    for start in range(0, len(data), 32):
        idx = list(range(start, min(start + 32, len(data))))
        ids, attn, target = (t.to(device) for t in collate(data, idx, pad_id))
        losses.append(marked_loss(model, ids, attn, target).item())
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
               tokens_per_s: float, warmup_note: str) -> str:
    start_note = f"Initialised from an earlier run of this tool (`{args.init}`). " if args.init else ""
    rows = "\n".join(
        f"| {p['step']} | {p['loss']:.4f} | {p['val_loss']:.4f} | {p['val_copy_loss']:.4f} |" for p in curve
    )
    return f"""# structspec demo {args.size}

A {params / 1e6:.2f}M-parameter `LlamaForCausalLM` trained by the structspec project to extract JSON
from short documents, so `structspec extract` and speculative decoding work offline. It is a
demonstration model: it knows only the synthetic documents below and nothing about the world.

## Data

`tools/make_extraction_corpus.py` (written to `{args.corpus}`): synthetic invoices, contact cards, event notices,
product sheets, order confirmations, support tickets and addresses, each with a JSON Schema and the
gold JSON. Job posts, two document layouts and one label and one phrasing of every field are kept
for the held-out split only. Prompt format: `structspec/models/prompt.py`. Copy drills (spans of a
prompt's text or of random tokens, repeated after the two tokens that precede them,
{args.copy_drills:.0%} as many as the examples) keep the model copying, after a warm-up of
{args.copy_warmup} steps on random token sequences said twice that forms the copying circuit.
The tokenizer gives every whitespace character a token of its
own, so a word has the same ids in the text as in the JSON answer.

## Training

```
{" ".join(sys.argv)}
```

{start_note}{curve[-1]["step"]} steps of AdamW (peak lr {args.lr}, cosine to 10%,
{args.warmup} warm-up steps), batch {args.batch}, sequences up to {args.max_len} tokens, loss on the answers
and drilled spans only, device `{args.device}`, {args.threads} CPU threads.
Time {seconds / 60:.1f} min, {tokens_per_s:.0f} tokens/s (all tokens). Held-out loss: on the held-out
answers; copy loss: on copy drills over held-out prompts.{warmup_note}

| step | train loss | held-out loss | held-out copy loss |
|---|---|---|---|
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
    eos_id = tokenizer.convert_tokens_to_ids(END_TOKEN)
    data = encode(read_jsonl(args.corpus / "train.jsonl"), tokenizer, args.max_len)
    heldout = encode(read_jsonl(args.corpus / "heldout.jsonl")[: args.val_examples], tokenizer, args.max_len)
    marker = tokenizer(TEXT_HEADING, add_special_tokens=False)["input_ids"]
    vocab = range(len(SPECIAL_TOKENS), len(tokenizer))
    copy_check = copy_drills(heldout, len(heldout), marker, eos_id, vocab, random.Random(args.seed))
    data += copy_drills(data, int(len(data) * args.copy_drills), marker, eos_id, vocab, rng)
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
    warmup_note = ""
    if args.copy_warmup:
        started = time.time()
        last = copy_warmup(model, optimizer, args.copy_warmup, vocab, args.device, args.seed)
        seconds = time.time() - started
        warmup_note = f" The copy warm-up took {seconds / 60:.1f} min and ended at loss {last:.2f}."
        print(json.dumps({"copy_warmup_steps": args.copy_warmup, "loss": last, "elapsed_s": round(seconds, 1)}),
              flush=True)
    curve: list[dict[str, float]] = []
    start, tokens, window = time.time(), 0, []
    stream = batches(data, args.batch, rng)
    budget_s = args.minutes * 60 if args.minutes else math.inf
    max_steps = args.steps or math.inf
    step, progress = 0, 0.0
    while progress < 1.0:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, progress, args.lr, args.warmup)
        ids, attn, target = (t.to(args.device) for t in collate(data, next(stream), pad_id))
        loss = marked_loss(model, ids, attn, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tokens += int(attn.sum())
        window.append(loss.item())
        step += 1
        progress = max(step / max_steps, (time.time() - start) / budget_s)
        last = progress >= 1.0
        if step % args.log_every == 0 or last:
            elapsed = time.time() - start
            point = {"step": step, "loss": sum(window) / len(window), "elapsed_s": round(elapsed, 1),
                     "tokens_per_s": round(tokens / elapsed, 1)}
            window = []
            if step % args.save_every == 0 or last:
                point["val_loss"] = validation_loss(model, heldout, pad_id, args.device)
                point["val_copy_loss"] = validation_loss(model, copy_check, pad_id, args.device)
                curve.append(point)
                card = model_card(args, params, curve, elapsed, tokens / elapsed, warmup_note)
                save(model, tokenizer, args.out, card)
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
    m.add_argument("--steps", type=int, help="most optimizer steps (with --minutes, whichever ends first)")
    m.add_argument("--minutes", type=float, help="time budget: the schedule ends when it is spent, or after --steps")
    m.add_argument("--batch", type=int, default=16)
    m.add_argument("--lr", type=float, default=2e-3)
    m.add_argument("--warmup", type=int, default=50)
    m.add_argument("--max-len", type=int, default=512)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--threads", type=int, default=2)
    m.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    m.add_argument("--log-every", type=int, default=25)
    m.add_argument("--save-every", type=int, default=250, help="steps between checkpoints (a multiple of --log-every)")
    m.add_argument("--val-examples", type=int, default=128)
    m.add_argument("--copy-warmup", type=int, default=1100,
                   help="steps on repeated random tokens before the extraction data (0: none)")
    m.add_argument("--copy-drills", type=float, default=0.5,
                   help="copy drills added to the training data, as a fraction of its examples")
    args = parser.parse_args(argv)
    if args.command == "tokenizer":
        train_tokenizer(args.corpus, args.out, args.vocab_size)
    else:
        if not (args.steps or args.minutes):
            parser.error("give --steps, --minutes or both")
        if args.save_every % args.log_every:
            parser.error("--save-every must be a multiple of --log-every")
        train_model(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
