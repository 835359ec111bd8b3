"""xgrammar behind the peer interface.

Threads: `GrammarCompiler(max_threads=1)`; one `GrammarMatcher` fills its mask on the calling
thread. The compiler's grammar cache is off so every compile is really measured.
JSON Schema: compact separators `(",", ":")`, no free whitespace, `strict_mode=False` (plain
JSON Schema semantics: properties the schema does not forbid are allowed).
"""

from __future__ import annotations

import json
import time
from typing import Any

import xgrammar as xgr

from .base import BitmaskMatcher, Peer, PeerCompileError, PeerGrammar


class XGrammarMatcher(BitmaskMatcher):
    """A `GrammarMatcher` writing into a preallocated CPU bitmask."""

    def __init__(self, compiled: Any, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self._matcher = xgr.GrammarMatcher(compiled)
        self._torch_bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self._bitmask = self._torch_bitmask.numpy()[0]

    def compute_mask(self) -> None:
        self._matcher.fill_next_token_bitmask(self._torch_bitmask)

    def accept_token(self, token_id: int) -> bool:
        return self._matcher.accept_token(token_id)

    def is_accepting(self) -> bool:
        return self._matcher.is_completed()


class XGrammarGrammar(PeerGrammar):
    """An xgrammar `CompiledGrammar`."""

    def __init__(self, peer: Peer, compiled: Any, compile_seconds: float) -> None:
        super().__init__(peer, compile_seconds)
        self._compiled = compiled

    def matcher(self) -> XGrammarMatcher:
        return XGrammarMatcher(self._compiled, self.peer.vocab_size)


class XGrammarPeer(Peer):
    """xgrammar with one `TokenizerInfo` and one single-threaded compiler per tokenizer."""

    name = "xgrammar"

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=self.vocab_size)
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile_json_schema(self, schema: dict) -> XGrammarGrammar:
        text = json.dumps(schema)
        return self._compile(
            lambda: self._compiler.compile_json_schema(
                text, any_whitespace=False, separators=(",", ":"), strict_mode=False
            )
        )

    def compile_gbnf(self, text: str) -> XGrammarGrammar:
        return self._compile(lambda: self._compiler.compile_grammar(text, root_rule_name="root"))

    def _compile(self, build: Any) -> XGrammarGrammar:
        start = time.perf_counter()
        try:
            compiled = build()
        except Exception as exc:  # xgrammar signals unsupported input with assorted types
            raise PeerCompileError(self.name, f"{type(exc).__name__}: {exc}") from exc
        return XGrammarGrammar(self, compiled, time.perf_counter() - start)
