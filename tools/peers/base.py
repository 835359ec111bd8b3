"""The uniform interface every peer engine (and structspec's own benchmark adapter) implements.

A benchmark holds a `Peer` per engine, compiles each schema or grammar once into a
`PeerGrammar`, and replays token sequences through `PeerMatcher`s:

    grammar = peer.compile_json_schema(schema)      # raises PeerCompileError if unsupported
    matcher = grammar.matcher()
    for token in tokens:
        matcher.compute_mask()                       # the step that is timed
        assert matcher.mask_allows(token)
        matcher.accept_token(token)
    matcher.is_accepting()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np


class PeerCompileError(Exception):
    """A peer cannot compile a schema or grammar (unsupported feature, error, or timeout)."""

    def __init__(self, peer: str, reason: str) -> None:
        super().__init__(f"{peer}: {reason}")
        self.peer = peer
        self.reason = reason


class PeerMatcher(ABC):
    """The per-sequence state of one constrained generation."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    @abstractmethod
    def compute_mask(self) -> None:
        """Compute the next-token mask the way the peer does during generation."""

    @abstractmethod
    def mask_allows(self, token_id: int) -> bool:
        """Whether the mask from the last `compute_mask` allows `token_id`."""

    @abstractmethod
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False if the peer rejects it (then discard the matcher)."""

    @abstractmethod
    def is_accepting(self) -> bool:
        """Whether the text consumed so far is a complete sentence of the grammar."""

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted ids allowed by the last computed mask (for cross-checks, not for timing)."""
        allowed = [t for t in range(self.vocab_size) if self.mask_allows(t)]
        return np.array(allowed, dtype=np.int64)


class BitmaskMatcher(PeerMatcher):
    """A matcher whose peer writes a packed little-endian int32 bitmask (bit i = token i)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self._bitmask = np.zeros((vocab_size + 31) // 32, dtype=np.int32)

    def mask_allows(self, token_id: int) -> bool:
        return bool((int(self._bitmask[token_id >> 5]) >> (token_id & 31)) & 1)

    def allowed_token_ids(self) -> np.ndarray:
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")
        return np.flatnonzero(bits[: self.vocab_size])


class PeerGrammar(ABC):
    """A compiled schema or grammar, shared by the matchers made from it."""

    def __init__(self, peer: Peer, compile_seconds: float) -> None:
        self.peer = peer
        self.compile_seconds = compile_seconds
        """Seconds the peer itself spent compiling (excludes adapter overhead such as IPC)."""

    @abstractmethod
    def matcher(self) -> PeerMatcher:
        """A fresh matcher at the start of the grammar."""

    def accepts_text(self, text: str) -> bool:
        """The peer's verdict on a string: its tokens are fed in order, then it must accept."""
        matcher = self.matcher()
        tokens = self.peer.encode(text)
        return all(matcher.accept_token(t) for t in tokens) and matcher.is_accepting()


class Peer(ABC):
    """One engine bound to one tokenizer; builds that engine's tokenizer data once."""

    name: str

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.vocab_size: int = len(tokenizer)

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids for `text`, without special tokens."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @abstractmethod
    def compile_json_schema(self, schema: dict) -> PeerGrammar:
        """Compile a JSON Schema for compactly serialized JSON (no whitespace between tokens)."""

    def compile_gbnf(self, text: str) -> PeerGrammar:
        """Compile a GBNF grammar with start rule `root`."""
        raise PeerCompileError(self.name, "has no GBNF/EBNF grammar front end")
