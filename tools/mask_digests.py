"""Differential replay of token masks: record a digest of every mask, or compare with a record.

    python tools/mask_digests.py --out before.json [--sample 20] [--docs 4] [--max-tokens 400]
    python tools/mask_digests.py --compare before.json [same options]

Replays, with the Llama-3 tokenizer, a stratified MaskBench sample (valid instances, compact
JSON, schemas through ``Grammar.from_json_schema``), the free-text documents of
``tools/bench_freetext.py`` and every accepted text of ``grammars/samples`` under its grammar.
Before each token it records a BLAKE2b digest of the packed mask words, the forced tokens and
whether the state accepts. ``--compare`` reports every case whose record differs from the
file's (the first differing step), and exits 1 when any does: two engines (or two versions)
must give bit-identical masks.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
import time
import warnings
from pathlib import Path
from tempfile import TemporaryDirectory

from _assets import compact_json, load_case, maskbench_files, require_assets, stratified_sample
from _assets import tokenizer_dir as find_tokenizer_dir
from bench_freetext import write_cases
from bench_masks import has_valid_instance

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import structspec  # noqa: E402


def replay(compiled: structspec.CompiledGrammar, tokens: list[int]) -> list[str]:
    """One record per step: mask digest, forced tokens and accepting flag, then the token."""
    matcher = compiled.matcher()
    steps = []
    for token in tokens:
        words = matcher.mask_words()
        digest = hashlib.blake2b(words.tobytes(), digest_size=12).hexdigest()
        steps.append(f"{digest}:{','.join(map(str, matcher.forced_tokens()))}:{int(matcher.is_accepting())}")
        if not matcher.accept_token(token):
            steps.append("refused")
            break
    steps.append(f"end:{int(matcher.is_accepting())}")
    return steps


def cases(args: argparse.Namespace, scratch: Path):
    """(name, make, texts) for every replayed case: ``make()`` builds the case's grammar (schemas
    through ``Grammar.from_json_schema``, the path users take)."""
    assets = require_assets()
    keep = has_valid_instance
    for path in stratified_sample(maskbench_files(assets), args.sample, args.seed, keep):
        case = load_case(path)
        texts = [compact_json(i.data) for i in case.instances if i.valid]
        yield f"maskbench/{case.name}", functools.partial(from_schema, case.schema), texts
    for path in write_cases(scratch, args.docs, args.seed):
        case = load_case(Path(path))
        texts = [compact_json(i.data) for i in case.instances]
        yield f"freetext/{case.name}", functools.partial(from_schema, case.schema), texts
    for sample in sorted((REPO / "grammars" / "samples").glob("*.json")):
        gbnf = (REPO / "grammars" / f"{sample.stem}.gbnf").read_text(encoding="utf-8")
        texts = json.loads(sample.read_text(encoding="utf-8"))["accept"]
        yield f"samples/{sample.stem}", functools.partial(structspec.Grammar.from_gbnf, gbnf), texts


def from_schema(schema: dict) -> structspec.Grammar:
    """The schema's grammar, approximations not reported."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return structspec.Grammar.from_json_schema(schema)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=20, help="MaskBench schemas")
    parser.add_argument("--docs", type=int, default=4, help="free-text documents per schema")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=400)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", type=Path)
    group.add_argument("--compare", type=Path)
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(find_tokenizer_dir("llama3")))
    vocabulary = structspec.Vocabulary.from_tokenizer(tokenizer)
    record: dict[str, list[list[str]]] = {}
    started = time.perf_counter()
    with TemporaryDirectory() as scratch:
        for name, make, texts in cases(args, Path(scratch)):
            try:
                compiled = structspec.compile(make(), vocabulary)
            except structspec.SchemaError:  # refused by the converter: not a case
                continue
            except structspec.GrammarError as exc:
                record[name] = [[f"error:{exc.code}"]]
                continue
            encode = tokenizer.encode
            record[name] = [replay(compiled, encode(t, add_special_tokens=False)[: args.max_tokens]) for t in texts]
    steps = sum(len(r) for runs in record.values() for r in runs)
    print(f"{len(record)} cases, {steps} steps, {time.perf_counter() - started:.1f} s")
    if args.out is not None:
        args.out.write_text(json.dumps(record), encoding="utf-8")
        return 0
    expected = json.loads(args.compare.read_text(encoding="utf-8"))
    bad = 0
    for name in sorted(set(expected) | set(record)):
        ours, theirs = record.get(name), expected.get(name)
        if ours == theirs:
            continue
        bad += 1
        if ours is None or theirs is None:
            print(f"{name}: only in {'the record' if ours is None else 'this run'}")
            continue
        for run, (a, b) in enumerate(zip(ours, theirs, strict=False)):
            if a != b:
                step = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                print(f"{name}: text {run} differs at step {step}")
                break
        else:
            print(f"{name}: {len(ours)} texts against {len(theirs)}")
    print("identical" if not bad else f"{bad} cases differ")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
