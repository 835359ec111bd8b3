"""llguidance behind the peer interface.

Threads: an `LLMatcher` compiles (in its constructor) and computes masks on the calling thread;
llguidance only parallelizes across matchers through `LLExecutor`, which is not used here.
JSON Schema: `whitespace_flexible=False` with separators "," and ":" (compact JSON), and
llguidance's default non-lenient mode, so unsupported keywords are compile errors.
A compiled grammar is a pristine `LLMatcher`; `matcher()` deep-copies it.
"""

from __future__ import annotations

import time
from typing import Any

import llguidance
import llguidance.hf

from .base import BitmaskMatcher, Peer, PeerCompileError, PeerGrammar

_COMPACT_JSON = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


class LLGuidanceMatcher(BitmaskMatcher):
    """A copy of the compiled `LLMatcher` writing into a preallocated bitmask."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self._matcher = matcher
        self._pointer = self._bitmask.ctypes.data
        self._size = self._bitmask.nbytes

    def compute_mask(self) -> None:
        self._matcher.unsafe_compute_mask_ptr(self._pointer, self._size)

    def accept_token(self, token_id: int) -> bool:
        return self._matcher.consume_token(token_id)

    def is_accepting(self) -> bool:
        return self._matcher.is_accepting()


class LLGuidanceGrammar(PeerGrammar):
    """A freshly constructed, never advanced `LLMatcher`."""

    def __init__(self, peer: Peer, pristine: Any, compile_seconds: float) -> None:
        super().__init__(peer, compile_seconds)
        self._pristine = pristine

    def matcher(self) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self._pristine.deep_copy(), self.peer.vocab_size)


class LLGuidancePeer(Peer):
    """llguidance with one `LLTokenizer` per tokenizer."""

    name = "llguidance"

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self._tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=self.vocab_size)

    def compile_json_schema(self, schema: dict) -> LLGuidanceGrammar:
        start = time.perf_counter()
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=_COMPACT_JSON)
        except ValueError as exc:
            raise PeerCompileError(self.name, str(exc)) from exc
        return self._compile(grammar, start)

    def compile_gbnf(self, text: str) -> LLGuidanceGrammar:
        start = time.perf_counter()
        try:
            grammar = llguidance.grammar_from("gbnf", text)
        except ValueError as exc:
            raise PeerCompileError(self.name, str(exc)) from exc
        return self._compile(grammar, start)

    def _compile(self, grammar: str, start: float) -> LLGuidanceGrammar:
        pristine = llguidance.LLMatcher(self._tokenizer, grammar, log_level=0)
        if pristine.is_error():
            raise PeerCompileError(self.name, pristine.get_error())
        return LLGuidanceGrammar(self, pristine, time.perf_counter() - start)
