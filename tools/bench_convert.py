"""Benchmark JSON Schema conversion on large schemas: does the work grow linearly?

Run: ``python tools/bench_convert.py [--runs N] [--small 5000] [--large 50000] [--shapes a,b]``.

For each shape (a large ``enum`` of strings, numbers or objects, ``const``, ``oneOf`` of constants,
many properties) the schema is built at a small and a large size and converted ``--runs`` times
each, alternating sizes so that machine noise hits both alike. The table gives the median time
at each size and the ratio of the time per item (large / small): about 1 when the work is
linear, about large/small (10) when it is quadratic. Shapes whose large size is refused by a
limit (``oneOf`` past 256 alternatives) show the error code instead.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from structspec.errors import SchemaError
from structspec.jsonschema import schema_to_gbnf


def _integers(n: int) -> dict[str, Any]:
    return {f"p{i}": {"type": "integer"} for i in range(n)}


SHAPES: dict[str, tuple[Callable[[int], Any], float]] = {
    # name: (schema of n items, fraction of the sizes to use: slow shapes run smaller)
    "enum of strings": (lambda n: {"enum": [f"value-{i}" for i in range(n)]}, 1.0),
    "enum of integers": (lambda n: {"type": "integer", "enum": list(range(n))}, 1.0),
    "enum of objects": (lambda n: {"enum": [{"id": i, "tags": [str(i), "x"]} for i in range(n)]}, 0.2),
    "enum, draft-04, mixed types": (lambda n: {"$schema": "http://json-schema.org/draft-04/schema#",
                                               "enum": [i if i % 2 else str(i) for i in range(n)]}, 1.0),
    "enum inside allOf": (lambda n: {"type": "string", "allOf": [{"enum": [f"v{i}" for i in range(n)]}]}, 1.0),
    "const array": (lambda n: {"const": [f"v{i}" for i in range(n)]}, 1.0),
    "oneOf of constants": (lambda n: {"oneOf": [{"const": i} for i in range(n)]}, 0.005),
    "optional properties": (lambda n: {"type": "object", "properties": _integers(n)}, 0.04),
    "required properties": (lambda n: {"type": "object", "properties": _integers(n), "required": list(_integers(n))},
                            0.04),
}


def convert_seconds(schema: Any) -> float | str:
    """Seconds one conversion takes, or the error code when it is refused."""
    start = time.perf_counter()
    try:
        schema_to_gbnf(schema, time_limit=None)
    except SchemaError as exc:
        return exc.code
    return time.perf_counter() - start


def measure(make: Callable[[int], Any], small: int, large: int, runs: int) -> tuple[float | str, float | str]:
    """Median seconds at each size, runs alternating between the sizes."""
    schemas = (make(small), make(large))
    samples: tuple[list[float | str], list[float | str]] = ([], [])
    for _ in range(runs):
        for schema, out in zip(schemas, samples, strict=True):
            out.append(convert_seconds(schema))
    medians: list[float | str] = []
    for out in samples:
        codes = [s for s in out if isinstance(s, str)]
        medians.append(codes[0] if codes else statistics.median(out))  # type: ignore[arg-type]
    return medians[0], medians[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--small", type=int, default=5_000)
    parser.add_argument("--large", type=int, default=50_000)
    parser.add_argument("--shapes", help="comma-separated subset of the shape names")
    args = parser.parse_args()
    chosen = args.shapes.split(",") if args.shapes else list(SHAPES)
    print("| shape | small n | median | large n | median | time per item, large / small |")
    print("|---|---|---|---|---|---|")
    for name in chosen:
        make, scale = SHAPES[name]
        small, large = max(int(args.small * scale), 1), max(int(args.large * scale), 2)
        a, b = measure(make, small, large, args.runs)
        shown = [f"{v:.3f} s" if isinstance(v, float) else f"refused ({v})" for v in (a, b)]
        ratio = f"{(b / large) / (a / small):.2f}" if isinstance(a, float) and isinstance(b, float) else "-"
        print(f"| {name} | {small:,} | {shown[0]} | {large:,} | {shown[1]} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
