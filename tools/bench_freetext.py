"""Free-text mask benchmark: JSON documents whose string values are long English prose.

    python tools/bench_freetext.py [--docs 8] [--seed 0] [--engines structspec,llguidance,xgrammar]
                                   [--json out.json] [--write-cases DIR]

Extraction outputs are full of natural-language values (summaries, descriptions, notes), and
a position inside a counted string (``maxLength``/``minLength``) is a new grammar state at
every character. This replays documents made of seeded prose (a fixed word list with
punctuation, digits, quotes and accented words; 30-600 characters per value) under four
schemas: ``maxLength`` 80/300/1000 with ``minLength``, an unbounded string, and unbounded and
bounded strings in arrays. Documents are serialized compactly and tokenized with the Llama-3
tokenizer; before each token the engine computes its mask (only that call is timed), the
token must be allowed and accepted. Each engine runs in its own fresh process on one thread,
through the same adapters as ``tools/bench_masks.py``; the report gives mean/p50/p90/p99/max.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _assets import require_assets
from _assets import tokenizer_dir as find_tokenizer_dir
from bench_masks import EngineResult, _time, run_engine, summarize
from peers import PEER_NAMES, available_peers, pin_single_thread

WORDS = (  # noqa: SIM905 (a word list reads best as text)
    "the of and to in is was that for on with as by at from it an be this which or are have had not but "
    "all were when we there can more one their has been if would so what about out up into them some could "
    "than then its only other new time people year way day man thing woman life child world school state "
    "family student group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line end member "
    "law car city community name president team minute idea kid body information back parent face others "
    "level office door health person art war history party result change morning reason research girl guy "
    "moment air teacher force education foot boy age policy process music market sense nation plan college "
    "interest death experience effect class control care field development role effort rate heart drug show "
    "leader light voice wife police mind price report decision son view relationship town road arm "
    "difference value building action model season society tax director position player record paper "
    "space ground form event official matter center couple site project activity star table need court "
    "oil situation cost industry figure street image phone data picture practice piece land product doctor "
    "wall patient worker news test movie north love support technology step baby computer type attention "
    "film tree source organization hair window evidence population site unit quickly slowly carefully "
    "shipped delivered arrived broke repaired replaced refunded ordered noticed reported described "
    "café naïve résumé Zürich São Paulo Kraków crème brûlée déjà vu façade piñata Ångström Øresund "
    "invoice customer warranty battery screen keyboard cable package courier delay damage receipt"
).split()
PUNCTUATION = (",", ",", ";", ":", " -", "")

SCHEMAS: dict[str, dict[str, Any]] = {
    "review": {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "minLength": 10, "maxLength": 80},
            "verdict": {"type": "string", "minLength": 20, "maxLength": 300},
            "body": {"type": "string", "minLength": 30, "maxLength": 1000},
        },
        "required": ["summary", "verdict", "body"],
        "additionalProperties": False,
    },
    "notes": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 80},
            "notes": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["title", "notes"],
        "additionalProperties": False,
    },
    "ticket": {
        "type": "object",
        "properties": {
            "description": {"type": "string", "minLength": 50},
            "steps": {"type": "array", "items": {"type": "string", "maxLength": 300}, "minItems": 1},
        },
        "required": ["description", "steps"],
        "additionalProperties": False,
    },
    "letter": {
        "type": "object",
        "properties": {
            "subject": {"type": "string", "maxLength": 300},
            "text": {"type": "string"},
        },
        "required": ["subject", "text"],
        "additionalProperties": False,
    },
}


def prose(rng: random.Random, low: int, high: int) -> str:
    """Seeded English-like prose of ``low``-``high`` characters, cut at a word boundary."""
    target = rng.randint(low, high)
    sentences: list[str] = []
    length = 0
    while length < target:
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 18))]
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), str(rng.randint(2, 2024)))
        if rng.random() < 0.1:
            at = rng.randrange(len(words))
            words[at] = f'"{words[at]}"'
        if rng.random() < 0.15:
            words[rng.randrange(len(words))] += "'s"
        for _ in range(rng.randint(0, 2)):
            at = rng.randrange(len(words) - 1)
            words[at] += rng.choice(PUNCTUATION)
        sentence = " ".join(words)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(".....!?")
        sentences.append(sentence)
        length += len(sentence) + 1
    return _cut(" ".join(sentences), target)


def _cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a space (never empty)."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit]


def document(name: str, rng: random.Random) -> dict[str, Any]:
    """One valid document of schema ``name``."""
    if name == "review":
        return {"summary": prose(rng, 30, 80), "verdict": prose(rng, 60, 300), "body": prose(rng, 200, 1000)}
    if name == "notes":
        return {"title": prose(rng, 30, 80), "notes": [prose(rng, 30, 600) for _ in range(rng.randint(1, 4))]}
    if name == "ticket":
        return {"description": prose(rng, 100, 600), "steps": [prose(rng, 30, 300) for _ in range(rng.randint(1, 3))]}
    return {"subject": prose(rng, 30, 300), "text": prose(rng, 200, 600)}


def write_cases(folder: Path, docs: int, seed: int) -> list[str]:
    """One MaskBench-format file per schema (``docs`` valid documents each) under ``folder``."""
    rng = random.Random(seed)
    files = []
    for name, schema in SCHEMAS.items():
        tests = [{"data": document(name, rng), "valid": True, "description": f"{name} {i}"} for i in range(docs)]
        path = folder / f"freetext---{name}.json"
        path.write_text(json.dumps({"schema": schema, "tests": tests}, ensure_ascii=False), encoding="utf-8")
        files.append(str(path))
    return files


def report(summaries: dict[str, dict[str, Any]]) -> str:
    """The side-by-side table of mask times, then ratios to each reference engine."""
    columns = ("mask_mean", "mask_p50", "mask_p90", "mask_p99", "mask_max")
    heads = ("mean", "p50", "p90", "p99", "max")
    lines = [f"{'engine':12} {'pass':>9} {'tokens':>7} " + " ".join(f"{h:>9}" for h in heads)]
    for engine, s in summaries.items():
        rate = f"{s['passed']}/{s['instances']}"
        lines.append(f"{engine:12} {rate:>9} {s['tokens']:>7} " + " ".join(f"{_time(s[c]):>9}" for c in columns))
    for reference in ("llguidance", "xgrammar"):
        base = summaries.get(reference)
        ours = summaries.get("structspec")
        if base is None or ours is None:
            continue
        cells = [f"{ours[c] / base[c]:.3g}x" if ours[c] and base[c] else "-" for c in columns]
        lines.append(f"{'structspec / ' + reference:22} " + " ".join(f"{c:>9}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Write the cases, replay them with each engine in a fresh process, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=8, help="documents per schema")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engines", default=None, help="comma-separated; default: structspec and the references")
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--json", type=Path, default=None, help="write the summaries here")
    parser.add_argument("--write-cases", type=Path, default=None, help="keep the generated case files here")
    args = parser.parse_args(argv)
    known = ("structspec", *PEER_NAMES)
    engines = ([e.strip() for e in args.engines.split(",") if e.strip()] if args.engines else
               ["structspec", *[p for p in available_peers() if p in ("llguidance", "xgrammar")]])
    unknown = [e for e in engines if e not in known]
    if unknown:
        parser.error(f"unknown engine(s) {', '.join(unknown)}")
    pin_single_thread()
    tokenizer = str(find_tokenizer_dir(args.tokenizer, require_assets()))
    options = {"max_tokens": 100_000, "schema_budget_s": 3600.0, "compile_timeout_s": 60.0, "relaxed": False}
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.write_cases or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        files = write_cases(folder, args.docs, args.seed)
        print(f"free-text replay: {len(SCHEMAS)} schemas x {args.docs} documents (seed {args.seed}), "
              f"tokenizer {args.tokenizer}, one thread")
        context = multiprocessing.get_context("spawn")
        summaries: dict[str, dict[str, Any]] = {}
        for engine in engines:
            started = time.perf_counter()
            with context.Pool(1) as pool:
                raw = pool.apply(run_engine, (engine, files, tokenizer, options))
            result = EngineResult.from_dict(raw)
            summaries[engine] = summarize(result)
            print(f"  {engine}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    print(report(summaries))
    if args.json is not None:
        payload = {"command": " ".join(sys.argv), "summaries": summaries}
        args.json.write_text(json.dumps(payload, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
