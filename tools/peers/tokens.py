"""Tokenizer loading and per-token byte strings for peers that need a raw vocabulary."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.lru_cache(maxsize=8)
def load_tokenizer(tokenizer_dir: str) -> Any:
    """`AutoTokenizer.from_pretrained(tokenizer_dir)`, loaded once per folder."""
    from transformers import AutoTokenizer

    if not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no tokenizer.json in tokenizer folder {tokenizer_dir!r}")
    return AutoTokenizer.from_pretrained(tokenizer_dir)


def special_token_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of special and added-special tokens; they never stand for grammar text."""
    added = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    return frozenset(added | set(tokenizer.all_special_ids))


def token_bytes(tokenizer: Any) -> list[bytes | None]:
    """The UTF-8 bytes each token id stands for; None for special tokens.

    Handles byte-level BPE (GPT-2 style byte-to-character map, e.g. Llama-3) and
    SentencePiece with `▁` for space and `<0xNN>` byte fallback (e.g. Llama-2).
    """
    vocab: dict[str, int] = tokenizer.get_vocab()
    specials = special_token_ids(tokenizer)
    result: list[bytes | None] = [None] * len(tokenizer)
    added_text = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    decode = _sentencepiece_bytes if "<0x0A>" in vocab else _byte_level_decoder()
    for piece, token_id in vocab.items():
        if token_id in specials or token_id >= len(result):
            continue
        if token_id in added_text:
            result[token_id] = added_text[token_id].encode("utf-8")
        else:
            result[token_id] = decode(piece)
    return result


def _sentencepiece_bytes(piece: str) -> bytes:
    match = _BYTE_PIECE.fullmatch(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace("▁", " ").encode("utf-8")


def _byte_level_decoder() -> Any:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    char_to_byte = {char: byte for byte, char in bytes_to_unicode().items()}

    def decode(piece: str) -> bytes:
        try:
            return bytes(char_to_byte[c] for c in piece)
        except KeyError as exc:
            raise ValueError(f"token {piece!r} is not byte-level BPE text") from exc

    return decode
