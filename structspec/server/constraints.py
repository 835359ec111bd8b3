"""Compiled grammars for requests: built off the generation worker, shared, and cached within a byte budget.

The cache key is the canonical text of the constraint: compact JSON for a schema (key order
kept, since property order decides the order of the generated members), the exact text for
GBNF. An entry is the :class:`~structspec.masks.compiled.CompiledGrammar` for the served
model's vocabulary, with the token masks it has computed so far. Entries are bounded by count
(``Limits.cache_size``) and by their estimated bytes (``Limits.cache_bytes``), measured again
at every lookup because masks accumulate while requests decode; the least recently used go
first.

A request's tools make one entry (:meth:`ConstraintCache.from_tools`): the structural tag of
its calls, built in the child process as a whole, and its compiled grammar.

A miss converts and compiles in a :class:`~structspec.server.compile_pool.CompilePool` child
process, within ``Limits.compile_timeout`` seconds, so a big schema never holds the
interpreter lock that the generation worker needs. Concurrent requests for a constraint being
compiled wait for that one compilation instead of starting their own.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from structspec.errors import SCHEMA_UNSUPPORTED, GrammarError, SchemaError, SchemaRelaxedWarning
from structspec.grammar import Grammar
from structspec.grammar.tags import StructuralTag
from structspec.lru import BoundedCache
from structspec.masks.compiled import CompiledGrammar
from structspec.masks.compiled import compile as compile_grammar
from structspec.server.compile_pool import CompilePool, CompileTimeout
from structspec.server.errors import APIError, grammar_error, schema_error
from structspec.server.limits import Limits
from structspec.tokens.vocabulary import Vocabulary

JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class CompiledTag:
    """A structural tag (the reply's reading) and its grammar compiled for the vocabulary."""

    tag: StructuralTag
    compiled: CompiledGrammar

    @property
    def nbytes(self) -> int:
        """Estimated bytes, as the cache weighs them (the compiled grammar's)."""
        return self.compiled.nbytes


Entry = CompiledGrammar | CompiledTag


class ConstraintCache:
    """Thread-safe: grammars built from request schemas and GBNF text, compiled for ``vocabulary``."""

    def __init__(self, limits: Limits, vocabulary: Vocabulary, pool: CompilePool | None = None) -> None:
        self._limits = limits
        self._vocabulary = vocabulary
        self._pool = pool or CompilePool(limits.compile_processes, limits.compile_timeout, limits.compile_process_bytes)
        self._entries: BoundedCache[tuple[Any, ...], Entry] = BoundedCache(
            max_entries=limits.cache_size, max_bytes=limits.cache_bytes, weigh=_compiled_bytes)
        self._pending: dict[tuple[Any, ...], Future[Entry]] = {}
        self._lock = threading.Lock()
        self.shared = 0
        """Requests that waited for a compilation another request had started."""

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict[str, Any]:
        """What ``GET /health`` reports: entries, estimated bytes, hits, misses, evictions,
        shared compilations, compilations stopped by the time limit and compile processes retired
        past their memory bound."""
        return {**self._entries.stats(), "max_bytes": self._limits.cache_bytes, "shared": self.shared,
                "timeouts": self._pool.timeouts, "retired": self._pool.retired}

    def from_schema(
        self, schema: Any, param: str, *, strict: bool = True, source: str | None = None, grounded: bool = False
    ) -> CompiledGrammar:
        """The grammar of JSON valid under ``schema``; HTTP 400 naming the JSON pointer when it cannot be enforced.

        ``source`` is the text grounded strings copy from (``"x-grounded": true``, or with ``grounded`` every
        plain string); it is part of the cache key only where the schema grounds something. The source
        crosses to the compile process with the schema, and the grounded grammar (its span automata
        included) comes back pickled like any other."""
        canonical = self._limits.check_schema(schema, param)
        if not grounded and '"x-grounded"' not in canonical:
            source = None
        kind = "schema" if strict else "schema-relaxed"
        key = (kind, canonical) if source is None else (kind, canonical, source, grounded)
        return self._get(key, param, schema_grammar, schema, param, strict, source, grounded)

    def from_gbnf(self, text: str, param: str) -> CompiledGrammar:
        """The grammar of GBNF ``text``; HTTP 400 naming line:column when it is malformed."""
        self._limits.check_grammar(text, param)
        return self._get(("gbnf", text), param, _gbnf, text, param)

    def from_tools(self, key: str, param: str, build: Callable[..., StructuralTag], *args: Any) -> CompiledTag:
        """The structural tag ``build(*args)`` makes (in a compile process), under ``key`` (its
        canonical text); errors as ``build`` raises them, or ``compile_timeout`` naming ``param``."""
        return self._get(("tools", key), param, build, *args)

    def warm(self) -> None:
        """Start a compile process now (it takes about a second), so the first miss need not wait."""
        self._pool.warm()

    def close(self) -> None:
        """Stop the compile processes."""
        self._pool.close()

    def _get(self, key: tuple[Any, ...], param: str, build: Callable[..., Any], *args: Any) -> Any:
        self._entries.reweigh()  # masks computed by earlier requests count from now on
        found = self._entries.get(key, None)
        if found is not None:
            return found
        with self._lock:
            pending = self._pending.get(key)
            owner = pending is None
            if owner:
                pending = self._pending[key] = Future()
            else:
                self.shared += 1
        if not owner:
            return pending.result()
        try:
            compiled = self._entries.put(key, self._compile(param, build, *args))
            pending.set_result(compiled)
            return compiled
        except BaseException as exc:
            pending.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._pending[key]

    def _compile(self, param: str, build: Callable[..., Grammar | StructuralTag], *args: Any) -> Entry:
        try:
            built = self._pool.run(build, *args)
        except CompileTimeout:
            raise APIError(
                f"{param}: compiling this constraint took longer than the server's limit of "
                f"{self._limits.compile_timeout:g} s; simplify it (fewer properties, smaller counts)",
                param=param,
                code="compile_timeout",
            ) from None
        grammar = built.grammar if isinstance(built, StructuralTag) else built
        try:  # binding to the vocabulary: a token reference it does not spell (E109), tables past their limit
            compiled = compile_grammar(grammar, self._vocabulary)
        except GrammarError as exc:
            raise grammar_error(exc, param) from None
        return CompiledTag(built, compiled) if isinstance(built, StructuralTag) else compiled


def _compiled_bytes(key: tuple[Any, ...], compiled: Entry) -> int:
    """The compiled grammar's bytes, plus the source text a grounded entry's key holds."""
    return compiled.nbytes + sum(len(part) for part in key[2:] if isinstance(part, str))


def _gbnf(text: str, param: str) -> Grammar:
    try:
        return Grammar.from_gbnf(text)
    except GrammarError as exc:
        raise grammar_error(exc, param) from None


def schema_grammar(schema: Any, param: str, strict: bool, source: str | None = None,
                   grounded: bool = False) -> Grammar:
    """The grammar of ``schema`` (run in a compile process), strings grounded in ``source`` as
    :meth:`ConstraintCache.from_schema` says; HTTP 400 naming ``param`` and the JSON pointer when
    it cannot be enforced."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SchemaRelaxedWarning)
            return Grammar.from_json_schema(schema, strict=strict, source=source, grounded=grounded)
    except SchemaError as exc:
        others = _unsupported(schema) if exc.code == SCHEMA_UNSUPPORTED else []
        raise schema_error(exc, param, others) from None
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
