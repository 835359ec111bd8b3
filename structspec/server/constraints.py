"""Grammars for requests, with an LRU cache so a repeated schema or grammar skips conversion and compilation.

The cache key is the canonical text of the constraint: compact JSON for a schema (key order
kept, since property order decides the order of the generated members), the exact text for
GBNF. The cache holds the :class:`~structspec.Grammar`, which also keeps its compiled token
masks alive in :func:`structspec.compile`'s per-grammar cache.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from typing import Any

from structspec.errors import GrammarError, SchemaError, SchemaRelaxedWarning
from structspec.grammar import Grammar
from structspec.server.errors import APIError, grammar_error, schema_error
from structspec.server.limits import Limits

JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


class ConstraintCache:
    """Thread-safe LRU of grammars built from request schemas and GBNF text."""

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self._entries: OrderedDict[tuple[Any, ...], Grammar] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def from_schema(
        self, schema: Any, param: str, *, strict: bool = True, source: str | None = None, grounded: bool = False
    ) -> Grammar:
        """The grammar of JSON valid under ``schema``; HTTP 400 naming the JSON pointer when it cannot be enforced.

        ``source`` is the text grounded strings copy from (``"x-grounded": true``, or with ``grounded`` every
        plain string); it is part of the cache key only where the schema grounds something."""
        canonical = self._limits.check_schema(schema, param)
        if not grounded and '"x-grounded"' not in canonical:
            source = None
        kind = "schema" if strict else "schema-relaxed"
        key = (kind, canonical) if source is None else (kind, canonical, source, grounded)
        return self._get(key, lambda: _schema(schema, param, strict, source, grounded))

    def from_gbnf(self, text: str, param: str) -> Grammar:
        """The grammar of GBNF ``text``; HTTP 400 naming line:column when it is malformed."""
        self._limits.check_grammar(text, param)
        return self._get(("gbnf", text), lambda: _gbnf(text, param))

    def _get(self, key: tuple[Any, ...], build: Any) -> Grammar:
        with self._lock:
            grammar = self._entries.get(key)
            if grammar is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return grammar
        grammar = build()
        with self._lock:
            self.misses += 1
            self._entries[key] = grammar
            self._entries.move_to_end(key)
            while len(self._entries) > self._limits.cache_size:
                self._entries.popitem(last=False)
        return grammar


def _gbnf(text: str, param: str) -> Grammar:
    try:
        return Grammar.from_gbnf(text)
    except GrammarError as exc:
        raise grammar_error(exc, param) from None


def _schema(schema: Any, param: str, strict: bool, source: str | None = None, grounded: bool = False) -> Grammar:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SchemaRelaxedWarning)
            return Grammar.from_json_schema(schema, strict=strict, source=source, grounded=grounded)
    except SchemaError as exc:
        raise schema_error(exc, param, _unsupported(schema)) from None
    except GrammarError as exc:
        raise APIError(f"{param}: the schema's grammar is too large: {exc.message}", param=param,
                       code="schema_too_large") from None


def _unsupported(schema: Any) -> list[str]:
    """Every construct a strict conversion would refuse, as ``#pointer (keyword)`` entries."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SchemaRelaxedWarning)
            Grammar.from_json_schema(schema, strict=False)
    except (SchemaError, GrammarError):
        return []
    return [
        f"#{pointer} ({keyword}): {message}"
        for warning in caught
        if isinstance(warning.message, SchemaRelaxedWarning)
        for pointer, keyword, message in warning.message.relaxed
    ]
