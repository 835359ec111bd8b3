"""transformers-cfg behind the peer interface (pure Python; benchmarks use a small sample).

GBNF goes to `IncrementalTokenRecognizer` (the class behind `IncrementalGrammarConstraint`).
transformers-cfg has no JSON Schema front end, so schemas are first turned into GBNF by
`schema_to_gbnf` (default: structspec's own converter, when it exists); its result therefore
measures transformers-cfg's matching engine on structspec's grammar.
Adaptation: transformers-cfg 0.2.7 cannot map transformers>=5 tokenizers itself (it checks
tokenizer classes and downloads a slow GPT-2 tokenizer), so the token byte table and byte trie
it would build are supplied through the recognizer's documented `trie=` / `homomorphism=`
arguments, from the same byte decoding; special tokens are left out of the trie, as there.
Counted repetitions it misparses are respelled first (see `tcfg_rewrite`).
The mask is `filter_vocab(state)`, the call its logits processor makes (a torch bool tensor);
torch ops follow `torch.set_num_threads`. Its mask cache (lru_cache, up to 32,768 masks) is
shared by all matchers of a grammar, as across generations with one constraint object.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from transformers_cfg.token_grammar_recognizer import IncrementalTokenRecognizer
from transformers_cfg.tokenization.byte_trie import ByteTrie

from .base import Peer, PeerCompileError, PeerGrammar, PeerMatcher
from .tcfg_rewrite import rewrite_counted_repeats
from .tokens import token_bytes

_CPU = torch.device("cpu")


class _TokenByteMap:
    """The token-id-to-bytes mapping transformers-cfg calls a homomorphism."""

    def __init__(self, pieces: list[bytes | None]) -> None:
        self._pieces = [piece or b"" for piece in pieces]

    def __len__(self) -> int:
        return len(self._pieces)

    def map(self, token_id: int, verbose: bool = False) -> bytes:
        return self._pieces[token_id]


class TransformersCfgMatcher(PeerMatcher):
    """An `AcceptState` advanced through the recognizer."""

    def __init__(self, recognizer: Any, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self._recognizer = recognizer
        self._state = recognizer.string_recognizer.get_initial_parsing_state()
        self._mask = torch.zeros(vocab_size, dtype=torch.bool)

    def compute_mask(self) -> None:
        self._mask = self._recognizer.filter_vocab(self._state, _CPU)

    def mask_allows(self, token_id: int) -> bool:
        return bool(self._mask[token_id])

    def allowed_token_ids(self) -> Any:
        return torch.nonzero(self._mask).flatten().numpy()

    def accept_token(self, token_id: int) -> bool:
        recognizer = self._recognizer
        if token_id == recognizer.eos_token_id:
            return self.is_accepting()
        if self._state.must_stop():
            return False
        state = recognizer._update_state_with_token_id(token_id, self._state)
        if not state.stacks:
            return False
        self._state = state
        return True

    def is_accepting(self) -> bool:
        # The rule its mask uses for EOS: some parse stack is complete.
        return any(len(stack) == 0 for stack in self._state.stacks)


class TransformersCfgGrammar(PeerGrammar):
    """One recognizer (and its mask cache) per grammar."""

    def __init__(self, peer: Peer, recognizer: Any, compile_seconds: float) -> None:
        super().__init__(peer, compile_seconds)
        self._recognizer = recognizer

    def matcher(self) -> TransformersCfgMatcher:
        return TransformersCfgMatcher(self._recognizer, self.peer.vocab_size)


class TransformersCfgPeer(Peer):
    """transformers-cfg with one byte trie per tokenizer."""

    name = "transformers-cfg"

    def __init__(self, tokenizer: Any, schema_to_gbnf: Callable[[dict], str] | None) -> None:
        super().__init__(tokenizer)
        self._schema_to_gbnf = schema_to_gbnf or _structspec_schema_to_gbnf
        pieces = token_bytes(tokenizer)
        self._byte_map = _TokenByteMap(pieces)
        self._trie = ByteTrie()
        for token_id, piece in enumerate(pieces):
            if piece is not None:
                self._trie.insert(piece, token_id)
        self._trie.vocab_size = len(pieces)

    def compile_json_schema(self, schema: dict) -> TransformersCfgGrammar:
        try:
            text = self._schema_to_gbnf(schema)
        except Exception as exc:  # the converter's own refusal or error
            raise PeerCompileError(self.name, f"schema to GBNF: {exc}") from exc
        return self.compile_gbnf(text)

    def compile_gbnf(self, text: str) -> TransformersCfgGrammar:
        start = time.perf_counter()
        try:
            recognizer = IncrementalTokenRecognizer(
                rewrite_counted_repeats(text),
                "root",
                self.tokenizer,
                trie=self._trie,
                homomorphism=self._byte_map,
            )
        except Exception as exc:  # its parser raises assorted types on unsupported syntax
            raise PeerCompileError(self.name, f"{type(exc).__name__}: {exc}") from exc
        if recognizer.start_rule_id is None:
            raise PeerCompileError(self.name, "grammar has no rule named 'root'")
        return TransformersCfgGrammar(self, recognizer, time.perf_counter() - start)


def _structspec_schema_to_gbnf(schema: dict) -> str:
    """structspec's JSON Schema converter, compact whitespace."""
    import structspec

    grammar_class = getattr(structspec, "Grammar", None)
    if grammar_class is None or not hasattr(grammar_class, "from_json_schema"):
        raise RuntimeError("structspec.Grammar.from_json_schema is not available yet")
    return grammar_class.from_json_schema(schema).to_gbnf()
