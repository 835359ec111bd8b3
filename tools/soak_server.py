"""Soak: distinct MaskBench schemas through one `structspec serve` process; RSS and collector pauses.

    python tools/soak_server.py --count 1000 --max-tokens 24

Each schema is sent once as a chat completion with `response_format: json_schema` (strict
false, so that approximated constructs are still served), one request at a time. Every
`--every` requests the tool records the server's resident memory (and its compile
processes'), the grammar cache's estimated bytes and the longest full-collection pause so far
(from `GET /health`, measured in the server by gc.callbacks). Targets (issue 21): RSS under
1.5 GB, no full collection over 100 ms.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

import httpx
from _assets import has_instances, load_case, maskbench_files, require_assets, stratified_sample
from _server import Server

MB = 1 << 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000, help="distinct schemas to send (default: 1000)")
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens generated per request (default: 24)")
    parser.add_argument("--every", type=int, default=50, help="requests between memory samples (default: 50)")
    parser.add_argument("--seed", type=int, default=0, help="sample seed (default: 0)")
    parser.add_argument("--cache-bytes", type=int, default=512 << 20, help="the server's --cache-bytes")
    parser.add_argument("--json", metavar="FILE", help="also write the samples and totals as JSON")
    args = parser.parse_args()

    files = stratified_sample(maskbench_files(require_assets()), args.count, seed=args.seed, keep=has_instances)
    statuses: collections.Counter[str] = collections.Counter()
    samples = []
    start = time.perf_counter()
    with Server(cache_bytes=args.cache_bytes) as server, httpx.Client(base_url=server.url, timeout=600) as http:
        for i, path in enumerate(files, start=1):
            schema = load_case(path).schema
            body = {
                "messages": [{"role": "user", "content": "Give an example."}],
                "max_tokens": args.max_tokens,
                "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema,
                                                                           "strict": False}},
            }
            response = http.post("/v1/chat/completions", json=body)
            statuses[str(response.status_code) if response.status_code == 200
                     else f"{response.status_code} {response.json()['error']['code']}"] += 1
            if i % args.every == 0 or i == len(files):
                health = http.get("/health").json()
                own, children = server.rss()
                sample = {"requests": i, "seconds": round(time.perf_counter() - start, 1),
                          "rss_mb": round(own / MB), "compile_rss_mb": round(children / MB),
                          "cache_mb": round(health["grammar_cache"]["bytes"] / MB),
                          "cached": health["grammar_cache"]["size"],
                          "full_collections": health["gc"]["full_collections"],
                          "longest_full_ms": health["gc"]["longest_full_ms"],
                          "longest_full_cpu_ms": health["gc"]["longest_full_cpu_ms"]}
                samples.append(sample)
                print(json.dumps(sample), flush=True)
        health = http.get("/health").json()
    peak = max(s["rss_mb"] for s in samples)
    totals = {"schemas": len(files), "statuses": dict(statuses), "peak_rss_mb": peak,
              "peak_compile_rss_mb": max(s["compile_rss_mb"] for s in samples),
              "longest_full_ms": health["gc"]["longest_full_ms"], "gc": health["gc"],
              "grammar_cache": health["grammar_cache"], "seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(totals, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"samples": samples, "totals": totals}, out, indent=1)
    met = peak < 1536 and totals["longest_full_ms"] <= 100
    print(f"targets (RSS < 1.5 GB, full collections <= 100 ms): {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
