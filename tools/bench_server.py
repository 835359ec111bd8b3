"""Closed-loop clients against ``structspec serve`` on loopback: one request at a time against
continuous batching, in the same run.

    python tools/bench_server.py [--clients 1,4,8] [--requests 32] [--seconds 60] [--cycles 2]
                                 [--workload shared|distinct] [--max-batch 8] [--max-tokens 128]
                                 [--model NAME] [--draft-model NAME]
                                 [--device cpu] [--dtype auto] [--threads 1] [--api extract|chat]
                                 [--json out.json]

Two servers run side by side on the bundled demo pair (or ``--model`` / ``--draft-model``),
speculative decoding on: the serial design (``--max-batch 1``: one request decodes at a time,
in arrival order) and the batched one (``--max-batch 8``: requests join the running batch). Each
client sends ``POST /v1/extract`` requests (held-out documents of the demo models' extraction
corpus: ``--workload shared``, contact documents under one schema, as an extraction service
runs; ``distinct``, each document with its own schema) one after the other, the next as soon as
the last is answered. ``--api chat`` sends the same text and schema to ``/v1/chat/completions``
with a ``json_schema`` response format instead, and counts a reply cut off at ``max_tokens`` as
answered: models with random weights (``tools/bench_gpu.py --save-model``) never finish the JSON,
and ``/v1/extract`` answers such a cut-off with a 400.
A level (a number of clients against one server) ends after ``--requests`` requests or
``--seconds`` seconds, whichever comes first. Levels run interleaved, serial then batched at each
client count, for ``--cycles`` cycles, so both designs see the same machine; every schema is sent
to both servers once first (compilation, caches). Reported per design and client count:
requests/s, generated tokens/s, p50 / p99 latency over all cycles, and the server process's CPU
time per request (user + system, from /proc: on a shared machine this moves far less with other
load than the wall-clock figures), plus the batched / serial ratios.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_batching import shared_schema
from make_extraction_corpus import generate

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(args: argparse.Namespace, max_batch: int) -> tuple[subprocess.Popen, str]:
    """A ``structspec serve`` process and its base URL, once it answers ``/health``."""
    port = free_port()
    command = [sys.executable, "-m", "structspec.cli", "serve", "--port", str(port), "--log-level", "warning",
               "--max-batch", str(max_batch), "--max-queue", "64", "--max-tokens", str(args.max_tokens),
               "--device", args.device, "--dtype", args.dtype]
    if args.model:
        command += ["--model", args.model] + (["--draft-model", args.draft_model] if args.draft_model else [])
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(args.threads)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}: {' '.join(command)}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not start within 120 s")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (nan where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def extract_request(document: dict[str, Any], max_tokens: int) -> tuple[str, dict[str, Any]]:
    return "/v1/extract", {**document, "max_tokens": max_tokens}


def chat_request(document: dict[str, Any], max_tokens: int) -> tuple[str, dict[str, Any]]:
    response_format = {"type": "json_schema", "json_schema": {"name": "record", "schema": document["schema"]}}
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": document["text"]}],
                                    "response_format": response_format, "max_tokens": max_tokens}


def tokens_of(reply: dict[str, Any]) -> int:
    """Generated tokens of an extract or chat reply."""
    return reply["usage"]["completion_tokens"] if "usage" in reply else reply["stats"]["tokens"]


def level(url: str, documents: list[dict[str, Any]], clients: int, requests: int, seconds: float,
          max_tokens: int, request: Any = extract_request) -> dict[str, Any]:
    """``clients`` closed-loop clients until ``requests`` are answered or ``seconds`` pass."""
    feed = itertools.cycle(documents)
    lock = threading.Lock()
    latencies: list[float] = []
    tokens: list[int] = []
    failures: list[str] = []
    sent = 0
    start = time.perf_counter()

    def client() -> None:
        nonlocal sent
        with httpx.Client(base_url=url, timeout=600) as http:
            while True:
                with lock:
                    if sent >= requests or time.perf_counter() - start > seconds:
                        return
                    sent += 1
                    document = next(feed)
                began = time.perf_counter()
                path, body = request(document, max_tokens)
                reply = http.post(path, json=body)
                took = time.perf_counter() - began
                with lock:
                    if reply.status_code == 200:
                        latencies.append(took)
                        tokens.append(tokens_of(reply.json()))
                    else:
                        failures.append(reply.text[:200])

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    return {"wall": wall, "latencies": latencies, "tokens": tokens, "failures": failures}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="1,4,8")
    parser.add_argument("--requests", type=int, default=32, help="requests per level (default: 32)")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per level at most (default: 60)")
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--documents", type=int, default=24)
    parser.add_argument("--workload", choices=("shared", "distinct"), default="shared",
                        help="shared: contact documents under one schema; distinct: each document its own schema")
    parser.add_argument("--model")
    parser.add_argument("--draft-model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per server (default: 1)")
    parser.add_argument("--api", choices=("extract", "chat"), default="extract",
                        help="extract: POST /v1/extract; chat: /v1/chat/completions with a json_schema response "
                             "format (for random-weight models, whose output is cut off at max_tokens)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",")]
    examples = generate(args.documents * 12, seed=21, heldout=True)
    if args.workload == "distinct":
        documents = [{"text": e.text, "schema": e.schema} for e in examples[: args.documents]]
    else:
        schema = shared_schema("contact")
        documents = [{"text": e.text, "schema": schema} for e in examples if e.domain == "contact"][: args.documents]
    request = chat_request if args.api == "chat" else extract_request
    designs = {"serial": 1, "batched": args.max_batch}
    servers = {name: start_server(args, size) for name, size in designs.items()}
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        for name, (_, url) in servers.items():
            print(f"{name}: warming up on {len(documents)} documents", file=sys.stderr, flush=True)
            level(url, documents, 1, len(documents), 1e9, args.max_tokens, request)  # warm-up: every schema once
        for _ in range(args.cycles):
            for clients in counts:
                for name, (process, url) in servers.items():
                    before = cpu_seconds(process.pid)
                    run = level(url, documents, clients, args.requests, args.seconds, args.max_tokens, request)
                    run["cpu"] = cpu_seconds(process.pid) - before
                    results.setdefault((name, clients), []).append(run)
                    print(f"{name}, {clients} clients: {len(run['latencies'])} answered, "
                          f"{len(run['failures'])} failed in {run['wall']:.1f} s", file=sys.stderr, flush=True)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(timeout=30)
    rows = []
    for (name, clients), runs in results.items():
        latencies = [x for run in runs for x in run["latencies"]]
        wall = sum(run["wall"] for run in runs)
        rows.append({"design": name, "clients": clients, "requests": len(latencies),
                     "failures": sum(len(run["failures"]) for run in runs),
                     "requests_per_s": len(latencies) / wall,
                     "tokens_per_s": sum(t for run in runs for t in run["tokens"]) / wall,
                     "p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99),
                     "cpu_ms": 1000 * sum(run["cpu"] for run in runs) / max(1, len(latencies))})
    endpoint = request(documents[0], 0)[0]
    print(f"{args.model or 'demo pair'}, {endpoint} ({args.workload} schema), max_tokens {args.max_tokens}, "
          f"batched = --max-batch {args.max_batch}, {args.cycles} cycles, device {args.device}")
    print("| clients | design | requests | requests/s | tokens/s | p50 latency (s) | p99 latency (s) "
          "| server CPU ms/request |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in sorted(rows, key=lambda r: (r["clients"], r["design"] != "serial")):
        print(f"| {row['clients']} | {row['design']} | {row['requests']} | {row['requests_per_s']:.2f} | "
              f"{row['tokens_per_s']:.1f} | {row['p50']:.2f} | {row['p99']:.2f} | {row['cpu_ms']:.1f} |")
    for clients in counts:
        serial = next(r for r in rows if r["design"] == "serial" and r["clients"] == clients)
        batched = next(r for r in rows if r["design"] == "batched" and r["clients"] == clients)
        ratio = batched["requests_per_s"] / max(serial["requests_per_s"], 1e-9)
        print(f"{clients} clients: batched / serial requests/s {ratio:.2f}x, "
              f"p99 {batched['p99']:.2f} s against {serial['p99']:.2f} s, "
              f"server CPU per request {serial['cpu_ms'] / max(batched['cpu_ms'], 1e-9):.2f}x less")
    if any(row["failures"] for row in rows):
        print("failures:", {(r["design"], r["clients"]): r["failures"] for r in rows if r["failures"]})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
