"""lm-format-enforcer behind the peer interface (pure Python; benchmarks use a small sample).

JSON Schema goes to `JsonSchemaParser`; no GBNF front end. Each matcher is a fresh
`TokenEnforcer`, as each generation gets one, and its mask is
`get_allowed_tokens(tokens so far)` (a list of ids, as its transformers integration uses).
Adaptation: lm-format-enforcer 0.11.3's transformers integration does not import under
transformers>=5, so `TokenEnforcerTokenizerData` is built here the way that integration builds
it (each token decoded after a "0" token to keep leading spaces; decoder drops trailing U+FFFD),
leaving out every special token rather than only `all_special_ids`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from lmformatenforcer import JsonSchemaParser, TokenEnforcer, TokenEnforcerTokenizerData

from .base import Peer, PeerCompileError, PeerGrammar, PeerMatcher
from .tokens import special_token_ids


class FormatEnforcerMatcher(PeerMatcher):
    """A `TokenEnforcer` and the tokens accepted so far."""

    def __init__(self, data: TokenEnforcerTokenizerData, parser: Any, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self._enforcer = TokenEnforcer(data, parser)
        self._eos = data.eos_token_id
        self._tokens: list[int] = []
        self._allowed: list[int] = []
        self._allowed_set: frozenset[int] | None = None

    def compute_mask(self) -> None:
        allowed = self._enforcer.get_allowed_tokens(self._tokens).allowed_tokens
        if allowed is not self._allowed:
            self._allowed = allowed
            self._allowed_set = None

    def mask_allows(self, token_id: int) -> bool:
        if self._allowed_set is None:
            self._allowed_set = frozenset(self._allowed)
        return token_id in self._allowed_set

    def allowed_token_ids(self) -> np.ndarray:
        return np.unique(np.asarray(self._allowed, dtype=np.int64))

    def accept_token(self, token_id: int) -> bool:
        # lm-format-enforcer only judges a token through the allowed list of its prefix
        # (cached per prefix, so this costs nothing after compute_mask).
        self.compute_mask()
        if not self.mask_allows(token_id):
            return False
        if token_id != self._eos:
            self._tokens.append(token_id)
        return True

    def is_accepting(self) -> bool:
        self.compute_mask()
        return self.mask_allows(self._eos)


class FormatEnforcerGrammar(PeerGrammar):
    """A `JsonSchemaParser` (immutable; shared by the matchers)."""

    def __init__(self, peer: FormatEnforcerPeer, parser: Any, compile_seconds: float) -> None:
        super().__init__(peer, compile_seconds)
        self._parser = parser
        self._data = peer.tokenizer_data

    def matcher(self) -> FormatEnforcerMatcher:
        return FormatEnforcerMatcher(self._data, self._parser, self.peer.vocab_size)


class FormatEnforcerPeer(Peer):
    """lm-format-enforcer with one `TokenEnforcerTokenizerData` per tokenizer."""

    name = "lm-format-enforcer"

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.tokenizer_data = _tokenizer_data(tokenizer, self.vocab_size)

    def compile_json_schema(self, schema: dict) -> FormatEnforcerGrammar:
        start = time.perf_counter()
        try:
            parser = JsonSchemaParser(schema)
        except Exception as exc:  # pydantic validation and its own checks raise assorted types
            raise PeerCompileError(self.name, f"{type(exc).__name__}: {exc}") from exc
        return FormatEnforcerGrammar(self, parser, time.perf_counter() - start)


def _tokenizer_data(tokenizer: Any, vocab_size: int) -> TokenEnforcerTokenizerData:
    specials = special_token_ids(tokenizer)
    ids = [i for i in range(vocab_size) if i not in specials]
    zero = tokenizer.encode("0", add_special_tokens=False)[-1]
    after_zero = tokenizer.batch_decode([[zero, i] for i in ids])
    alone = tokenizer.batch_decode([[i] for i in ids])
    regular = [
        (i, text[1:], len(text) - 1 > len(single)) for i, text, single in zip(ids, after_zero, alone, strict=True)
    ]

    def decode(tokens: list[int]) -> str:
        return tokenizer.decode(tokens).rstrip("\ufffd")

    return TokenEnforcerTokenizerData(regular, decode, tokenizer.eos_token_id, False, vocab_size)
