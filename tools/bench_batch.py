"""``structspec batch`` over generated documents, on this machine and on a local Ray.

    python tools/bench_batch.py [--documents 200] [--actors 2] [--max-batch 16] [--threads 1]
                                [--modes local,ray] [--workdir /tmp/structspec-bench-batch]

Writes ``--documents`` contact documents of the demo models' extraction corpus (held-out split)
as JSONL, all under one schema (every field of the contact domain), and runs the command on
them: ``local`` (batched decoding in one process, ``--threads`` torch threads) and ``ray`` (a local
Ray with ``--actors`` actors of one CPU each; needs ``pip install 'structspec[ray]'``). Each run
starts from an empty output file; the wall time covers the whole command (model loading, and
for Ray its start). Reported: documents/s, and whether every record came back exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_batching import shared_schema
from make_extraction_corpus import generate

ROOT = Path(__file__).resolve().parents[1]


def write_documents(workdir: Path, count: int) -> tuple[Path, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    contacts = [e for e in generate(count * 12, seed=31, heldout=True) if e.domain == "contact"][:count]
    docs = workdir / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"doc-{i:04d}", "text": e.text}, ensure_ascii=False) + "\n"
                            for i, e in enumerate(contacts)), encoding="utf-8")
    schema = workdir / "schema.json"
    schema.write_text(json.dumps(shared_schema("contact")), encoding="utf-8")
    return docs, schema


def run(mode: str, docs: Path, schema: Path, args: argparse.Namespace) -> dict:
    output = args.workdir / f"out-{mode}.jsonl"
    output.unlink(missing_ok=True)
    command = [sys.executable, "-m", "structspec.cli", "batch", "--schema", str(schema), "--input", str(docs),
               "--output", str(output), "--max-batch", str(args.max_batch), "--max-tokens", "128", "--device", "cpu"]
    if mode == "ray":
        command += ["--ray", "--actors", str(args.actors)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(args.threads)}
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    ids = [json.loads(line)["id"] for line in output.read_text(encoding="utf-8").split("\n")[:-1]]
    summary = [line for line in done.stderr.splitlines() if line.startswith("structspec: ") and "records" in line]
    return {"mode": mode, "status": done.returncode, "wall": wall, "records": len(ids),
            "exactly_once": sorted(ids) == sorted(set(ids)) and len(ids) == args.documents,
            "summary": summary[-1] if summary else done.stderr[-500:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--modes", default="local,ray")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/structspec-bench-batch"))
    args = parser.parse_args(argv)
    docs, schema = write_documents(args.workdir, args.documents)
    print(f"{args.documents} documents, one schema, --max-batch {args.max_batch}, {args.threads} torch thread(s)")
    print("| mode | wall (s) | documents/s | every record once | summary |")
    print("|---|---:|---:|---|---|")
    for mode in args.modes.split(","):
        row = run(mode, docs, schema, args)
        label = mode if mode == "local" else f"--ray ({args.actors} actors)"
        print(f"| {label} | {row['wall']:.1f} | {row['records'] / row['wall']:.2f} | "
              f"{'yes' if row['exactly_once'] else 'NO'} | {row['summary']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
