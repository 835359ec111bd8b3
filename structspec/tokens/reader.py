"""Token bytes, special tokens and end-of-sequence ids read out of Hugging Face tokenizers.

Two families are understood, recognised from the tokenizer's decoder configuration rather
than from a model name:

* byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM): every vocabulary string spells bytes
  through a fixed 256-character alphabet, inverted here;
* SentencePiece style (Llama-2, Mistral, Phi-3): a marker character (``▁``) stands for a
  space and, with byte fallback, ``<0xNN>`` pieces stand for the single byte ``NN``.

Added tokens are taken from the tokenizer's added vocabulary: a *special* one (and any id
transformers lists among ``all_special_ids``) is a control token with no text; a non-special
one (Qwen2's ``<tool_call>``, Phi-3's ``</s>``) is ordinary text equal to its content,
because that is what the tokenizer decodes it to and what it encodes that text to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from structspec.tokens.encoder import TextEncoder

# Texts of control tokens that end a sequence or a turn, by convention across model
# families; a special token with one of these texts is an end-of-sequence id.
END_OF_SEQUENCE_TEXTS = frozenset(
    {
        "</s>",
        "<|endoftext|>",
        "<|end_of_text|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|im_end|>",
        "<|end|>",
        "<end_of_turn>",
    }
)

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@dataclass(frozen=True)
class TokenizerTable:
    """What a tokenizer says about its ids, before padding to the logits width."""

    token_bytes: list[bytes | None]
    special_tokens: dict[str, int]
    eos_ids: frozenset[int]
    byte_fallback_ids: frozenset[int]
    encoder: TextEncoder


def backend_of(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind a fast transformers tokenizer (or itself)."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, Tokenizer):
        return backend
    raise TypeError(
        "Vocabulary.from_tokenizer needs a fast Hugging Face tokenizer (one backed by "
        f"tokenizer.json) or a tokenizers.Tokenizer; got {type(tokenizer).__name__}"
    )


def read_tokenizer(tokenizer: Any, extra_eos_ids: Iterable[int] = ()) -> TokenizerTable:
    """Read token bytes, special tokens and end-of-sequence ids from ``tokenizer``."""
    backend = backend_of(tokenizer)
    added = backend.get_added_tokens_decoder()
    size = max(backend.get_vocab_size(with_added_tokens=False), max(added, default=-1) + 1)
    pieces: list[str | None] = list(map(backend.id_to_token, range(size)))
    for token_id in added:
        pieces[token_id] = None
    token_bytes, fallback = _model_token_bytes(backend, pieces)

    special_ids = {i for i in getattr(tokenizer, "all_special_ids", ()) or () if 0 <= i < size}
    special_tokens: dict[str, int] = {}
    for token_id, token in sorted(added.items()):
        special_tokens.setdefault(token.content, token_id)
        if token.special or token_id in special_ids:
            special_ids.add(token_id)
        else:
            token_bytes[token_id] = token.content.encode("utf-8")
    for token_id in sorted(special_ids):
        token_bytes[token_id] = None
        special_tokens.setdefault(_token_text(backend, token_id), token_id)

    eos = {i for text, i in special_tokens.items() if text in END_OF_SEQUENCE_TEXTS}
    eos &= special_ids
    eos_token_id = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos_token_id, int):
        eos.add(eos_token_id)
    eos.update(extra_eos_ids)
    for token_id in eos:
        if not 0 <= token_id < size:
            raise ValueError(f"end-of-sequence id {token_id} is outside the tokenizer's ids")
        token_bytes[token_id] = None
    return TokenizerTable(
        token_bytes=token_bytes,
        special_tokens=special_tokens,
        eos_ids=frozenset(eos),
        byte_fallback_ids=frozenset(fallback - eos - special_ids),
        encoder=TextEncoder(backend),
    )


def _token_text(backend: Any, token_id: int) -> str:
    text = backend.id_to_token(token_id)
    return text if text is not None else f"<id {token_id}>"


def _model_token_bytes(
    backend: Any, pieces: list[str | None]
) -> tuple[list[bytes | None], set[int]]:
    """Bytes of every model-vocabulary piece (None where there is none) and the
    byte-fallback ids."""
    decoders = _decoder_steps(backend)
    kinds = {step.get("type") for step in decoders}
    if "ByteLevel" in kinds:
        return _byte_level_bytes(pieces), set()
    marker = _space_marker(decoders)
    if marker is not None:
        return _sentencepiece_bytes(pieces, marker, "ByteFallback" in kinds)
    raise ValueError(
        "unsupported tokenizer: its decoder "
        f"({', '.join(sorted(str(k) for k in kinds)) or 'none'}) is neither byte-level BPE "
        "nor SentencePiece-style (a space marker, optionally with <0xNN> byte fallback)"
    )


def _decoder_steps(backend: Any) -> list[dict[str, Any]]:
    """The decoder's configuration as a flat list of steps."""
    decoder = backend.decoder
    if decoder is None:
        return []
    steps, stack = [], [json.loads(decoder.__getstate__())]
    while stack:
        step = stack.pop(0)
        if step.get("type") == "Sequence":
            stack[:0] = step.get("decoders", [])
        else:
            steps.append(step)
    return steps


def _space_marker(decoders: list[dict[str, Any]]) -> str | None:
    """The character a SentencePiece-style decoder turns into a space, if any."""
    for step in decoders:
        if step.get("type") == "Metaspace":
            return str(step.get("replacement", "▁"))
        pattern = step.get("pattern")
        replaces_with_space = step.get("type") == "Replace" and step.get("content") == " "
        if replaces_with_space and isinstance(pattern, dict):
            marker = pattern.get("String")
            if isinstance(marker, str):
                return marker
    return None


def byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet: one printable character per byte value.

    Bytes that are printable Latin-1 characters stand for themselves; the other 68 bytes,
    in increasing order, take the characters from U+0100 upwards.
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    alphabet = {chr(b): b for b in printable}
    others = sorted(set(range(256)).difference(printable))
    alphabet.update({chr(0x100 + n): b for n, b in enumerate(others)})
    return alphabet


def _byte_level_bytes(pieces: list[str | None]) -> list[bytes | None]:
    alphabet = byte_level_alphabet()
    texts = [piece or "" for piece in pieces]
    joined = "".join(texts)
    if not set(joined) <= alphabet.keys():
        token_id, bad = next((i, t) for i, t in enumerate(texts) if not set(t) <= alphabet.keys())
        raise ValueError(
            f"byte-level tokenizer has token {bad!r} (id {token_id}) with characters "
            "outside the byte alphabet"
        )
    # One character per byte: translate everything at once, then cut at the known lengths.
    blob = joined.translate({ord(c): b for c, b in alphabet.items()}).encode("latin-1")
    ends = list(accumulate(map(len, texts)))
    spelled: list[bytes | None] = [
        blob[end - len(text) : end] for text, end in zip(texts, ends, strict=True)
    ]
    for token_id, piece in enumerate(pieces):
        if piece is None:
            spelled[token_id] = None
    return spelled


def _sentencepiece_bytes(
    pieces: list[str | None], marker: str, byte_fallback: bool
) -> tuple[list[bytes | None], set[int]]:
    spelled: list[bytes | None] = []
    fallback: set[int] = set()
    for token_id, piece in enumerate(pieces):
        match = _BYTE_PIECE.fullmatch(piece) if byte_fallback and piece else None
        if match:
            spelled.append(bytes([int(match.group(1), 16)]))
            fallback.add(token_id)
        else:
            spelled.append(None if piece is None else piece.replace(marker, " ").encode("utf-8"))
    return spelled, fallback
