"""Request limits, so that no single request can exhaust the server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from structspec.server.errors import APIError


@dataclass(frozen=True)
class Limits:
    """Bounds every request is checked against (all configurable from ``structspec serve``).

    Attributes:
        max_body_bytes: largest request body accepted.
        max_schema_bytes: largest JSON Schema, measured as compact JSON.
        max_schema_depth: deepest nesting of objects/arrays inside a schema.
        max_grammar_bytes: largest GBNF grammar text.
        max_tokens: most tokens one request may ask for.
        default_max_tokens: tokens generated when a request does not say.
        max_queue: most requests waiting for (or holding) the model at once (HTTP 503 beyond).
        max_batch: most requests decoded together, one target forward a step for all of them.
        cache_size: compiled grammars kept (least recently used dropped first).
        cache_bytes: estimated bytes the kept compiled grammars may hold, token masks included
            (least recently used dropped first).
        compile_timeout: seconds a schema or grammar may take to convert and compile (HTTP 400
            ``compile_timeout`` beyond).
        compile_processes: child processes compiling at once (more wait for one).
    """

    max_body_bytes: int = 1 << 20
    max_schema_bytes: int = 64 << 10
    max_schema_depth: int = 32
    max_grammar_bytes: int = 64 << 10
    max_tokens: int = 2048
    default_max_tokens: int = 512
    max_queue: int = 32
    max_batch: int = 8
    cache_size: int = 64
    cache_bytes: int = 512 << 20
    compile_timeout: float = 60.0
    compile_processes: int = 2

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value >= (0.001 if isinstance(value, float) else 1):  # NaN fails too
                raise ValueError(f"limit {name} must be at least {'0.001' if isinstance(value, float) else 1}, "
                                 f"got {value}")
        if self.default_max_tokens > self.max_tokens:
            raise ValueError(f"default_max_tokens ({self.default_max_tokens}) exceeds max_tokens ({self.max_tokens})")

    def check_schema(self, schema: Any, param: str) -> str:
        """The schema's canonical JSON text, after checking its size and depth."""
        if not isinstance(schema, dict | bool):
            raise APIError(f"{param}: a JSON Schema must be an object or a boolean", param=param, code="invalid_schema")
        depth = nesting_depth(schema)
        if depth > self.max_schema_depth:
            raise APIError(
                f"{param}: schema nesting depth {depth} exceeds the limit of {self.max_schema_depth}",
                param=param,
                code="schema_too_deep",
            )
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        if len(text.encode()) > self.max_schema_bytes:
            raise APIError(
                f"{param}: schema is {len(text.encode())} bytes, over the limit of {self.max_schema_bytes}",
                param=param,
                code="schema_too_large",
            )
        return text

    def check_grammar(self, text: str, param: str) -> None:
        """Refuse grammar text over the size limit."""
        size = len(text.encode())
        if size > self.max_grammar_bytes:
            raise APIError(
                f"{param}: grammar is {size} bytes, over the limit of {self.max_grammar_bytes}",
                param=param,
                code="grammar_too_large",
            )

    def tokens(self, requested: int | None, param: str) -> int:
        """The number of tokens to generate for a request that asked for ``requested``: HTTP 400
        over the server's limit (the sampling options' own check refuses fewer than 1)."""
        if requested is None:
            return min(self.default_max_tokens, self.max_tokens)
        if requested > self.max_tokens:
            raise APIError(
                f"{param}: {requested} is outside 1..{self.max_tokens} (the server's limit)",
                param=param,
                code="max_tokens_exceeded",
            )
        return requested


def nesting_depth(value: Any) -> int:
    """How deeply objects and arrays nest in ``value`` (0 for a scalar), without recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        node, depth = pending.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        pending.extend((child, depth + 1) for child in children)
    return deepest
