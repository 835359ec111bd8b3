"""Request limits, so that no single request can exhaust the server."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from structspec.budget import MAX_NESTING
from structspec.errors import SchemaError
from structspec.generation.sampling import OptionError
from structspec.jsonschema.limits import schema_depth
from structspec.server.errors import APIError


@dataclass(frozen=True)
class Limits:
    """Bounds every request is checked against (all configurable from ``structspec serve``).

    Attributes:
        max_body_bytes: largest request body accepted.
        max_schema_bytes: largest JSON Schema, measured as compact JSON.
        max_schema_depth: deepest nesting of a schema, measured as the converter measures it
            (:func:`~structspec.jsonschema.limits.schema_depth`: the root is level 1, each
            subschema one more); at most the converter's own limit,
            :data:`~structspec.budget.MAX_NESTING`.
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
        compile_process_bytes: resident bytes a compile process may hold after a job; past
            them it is replaced by a fresh one (which loses its caches of rule automata).
    """

    max_body_bytes: int = 1 << 20
    max_schema_bytes: int = 64 << 10
    max_schema_depth: int = MAX_NESTING
    max_grammar_bytes: int = 64 << 10
    max_tokens: int = 2048
    default_max_tokens: int = 512
    max_queue: int = 32
    max_batch: int = 8
    cache_size: int = 64
    cache_bytes: int = 512 << 20
    compile_timeout: float = 60.0
    compile_processes: int = 2
    compile_process_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        """Raises :class:`~structspec.generation.sampling.OptionError` naming the limit out of range."""
        for name, value in vars(self).items():
            least = 0.001 if isinstance(value, float) else 1
            if not value >= least:  # NaN fails too
                raise OptionError(name, f"must be at least {least}, got {value}")
        if self.max_schema_depth > MAX_NESTING:
            raise OptionError("max_schema_depth", f"must be at most the converter's nesting limit of {MAX_NESTING}, "
                              f"got {self.max_schema_depth}")
        if self.default_max_tokens > self.max_tokens:
            raise OptionError("default_max_tokens", f"must not exceed the most a request may ask for "
                              f"({self.max_tokens}), got {self.default_max_tokens}")

    def check_schema(self, schema: Any, param: str) -> str:
        """The schema's canonical JSON text, after checking its size and depth."""
        if not isinstance(schema, dict | bool):
            raise APIError(f"{param}: a JSON Schema must be an object or a boolean", param=param, code="invalid_schema")
        try:
            depth, pointer = schema_depth(schema, self.max_schema_depth)
        except SchemaError as exc:  # NaN, Infinity: Python's json reads them, JSON has none
            raise APIError(f"{param}#{exc.pointer}: {exc.message}", param=param, code="invalid_schema") from None
        if depth > self.max_schema_depth:
            raise APIError(
                f"{param}#{pointer}: schema nesting depth over the limit of {self.max_schema_depth} levels "
                "(each subschema is one level)",
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

