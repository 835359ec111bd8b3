"""Stall: small requests beside a big schema compiling, against the same requests idle.

    python tools/bench_stall.py --properties 1400 --requests 40
    python tools/bench_stall.py --compile-in thread   # the design the compile processes replaced

A server (the demo model) first serves a stream of small requests whose grammar is already
compiled (idle), then the same stream while a schema with `--properties` properties (about 41
KB at 1,400) compiles. Reports median and p99 latency of the small requests in both phases and
their ratio (target, issue 21: p99 under 2x idle). Requests go one at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time

import httpx
from _server import Server

SMALL = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}


def wide_schema(properties: int) -> dict:
    """An object with ``properties`` optional members of four scalar types."""
    types = ("string", "integer", "number", "boolean")
    return {"type": "object", "properties": {f"field_{i:04d}": {"type": types[i % 4]} for i in range(properties)}}


def _chat(schema: dict, max_tokens: int) -> dict:
    return {"messages": [{"role": "user", "content": "Answer."}], "max_tokens": max_tokens,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(seconds: list[float]) -> dict:
    return {"median": round(statistics.median(seconds) * 1000, 1), "p99": round(_percentile(seconds, 0.99) * 1000, 1),
            "requests": len(seconds)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--properties", type=int, default=1400, help="properties of the big schema (default: 1400)")
    parser.add_argument("--requests", type=int, default=40, help="small requests per phase (default: 40)")
    parser.add_argument("--compile-in", choices=("process", "thread"), default="process",
                        help="where the server compiles: its compile processes, or a thread (the old design)")
    parser.add_argument("--compile-timeout", type=float, default=600.0,
                        help="the server's --compile-timeout (default: 600, so that the big schema compiles)")
    args = parser.parse_args()

    big = wide_schema(args.properties)
    print(f"big schema: {len(json.dumps(big, separators=(',', ':')))} bytes", flush=True)
    server = Server(compile_in=args.compile_in, compile_timeout=args.compile_timeout)
    with server, httpx.Client(base_url=server.url, timeout=900) as http:
        def small() -> float:
            start = time.perf_counter()
            response = http.post("/v1/chat/completions", json=_chat(SMALL, 8))
            response.raise_for_status()
            return time.perf_counter() - start

        for _ in range(5):  # compile the small grammar and warm its masks
            small()
        idle = [small() for _ in range(args.requests)]
        outcome: dict = {}

        def compile_big() -> None:
            start = time.perf_counter()
            with httpx.Client(base_url=server.url, timeout=900) as other:
                response = other.post("/v1/chat/completions", json=_chat(big, 8))
            outcome.update(status=response.status_code, seconds=time.perf_counter() - start)

        thread = threading.Thread(target=compile_big)
        thread.start()
        busy = []
        while thread.is_alive() or len(busy) < args.requests:
            busy.append(small())
            if not thread.is_alive() and len(busy) >= args.requests:
                break
        thread.join()
    report = {
        "compile_in": args.compile_in,
        "big_request": {"status": outcome["status"], "seconds": round(outcome["seconds"], 2)},
        "idle_ms": _summary(idle),
        "busy_ms": _summary(busy),
    }
    report["p99_ratio"] = round(report["busy_ms"]["p99"] / report["idle_ms"]["p99"], 2)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
