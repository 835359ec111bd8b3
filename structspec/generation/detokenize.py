"""Token ids to text pieces, incrementally, without splitting multi-byte characters."""

from __future__ import annotations

import codecs
from typing import Any

from structspec.tokens.vocabulary import Vocabulary


class TextAssembler:
    """Turns generated token ids into text by their bytes (what the grammar matched). A UTF-8
    character split across tokens is held back until it is complete. End-of-sequence tokens add
    nothing; other byteless tokens (control tokens a grammar named) add their tokenizer text."""

    def __init__(self, vocabulary: Vocabulary, tokenizer: Any) -> None:
        self.vocabulary = vocabulary
        self.tokenizer = tokenizer
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.pieces: list[str] = []

    def add(self, token_ids: list[int]) -> str:
        """The newly completed text after ``token_ids``."""
        token_bytes = self.vocabulary.token_bytes
        spelled = [token_bytes[token_id] for token_id in token_ids]
        if None in spelled:  # end of sequence (nothing), control tokens (their tokenizer text)
            eos_ids = self.vocabulary.eos_ids
            spelled = [b"" if token_id in eos_ids else self.tokenizer.decode([token_id]).encode("utf-8")
                       if data is None else data for token_id, data in zip(token_ids, spelled, strict=True)]
        piece = self._decoder.decode(b"".join(spelled))  # incremental: the same text as token by token
        self.pieces.append(piece)
        return piece

    def finish(self) -> str:
        """Whatever is left (an incomplete trailing character becomes U+FFFD)."""
        piece = self._decoder.decode(b"", final=True)
        self.pieces.append(piece)
        return piece

    @property
    def text(self) -> str:
        """All text so far."""
        return "".join(self.pieces)
