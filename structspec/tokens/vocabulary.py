"""The bytes every token id spells, for matching grammars over a model's vocabulary.

A :class:`Vocabulary` is immutable and meant to be built once per tokenizer and shared:
``from_tokenizer`` remembers the vocabulary it built for a tokenizer object, and equal
vocabularies hash alike (through :attr:`Vocabulary.fingerprint`), so they can key caches.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from structspec.tokens.arrays import (
    checked_token_bytes,
    fingerprint,
    longest_match_table,
    text_tokens,
    trie_arrays,
)
from structspec.tokens.encoder import TextEncoder
from structspec.tokens.reader import backend_of, read_tokenizer

_INVALID_UTF8 = re.compile("([\udc80-\udcff]+)")
_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Vocabulary]] = (
    weakref.WeakKeyDictionary()
)
_CACHE_LOCK = threading.Lock()


class Vocabulary:
    """Token id -> bytes, with control tokens apart and vectorized views of the text tokens.

    Attributes:
        size: logits width; at least the number of tokenizer ids (``vocab_size=`` pads).
        token_bytes: bytes per id; ``None`` for ids that never match grammar text (special
            and control tokens, end-of-sequence tokens, padding ids beyond the tokenizer).
        special_tokens: text of each added or special token -> id, for ``<...>`` token
            references. Non-special added tokens are listed here *and* keep their text.
        eos_ids: end-of-sequence ids: the tokenizer's ``eos_token_id`` plus every special
            token whose text is a conventional end-of-turn marker (``<|eot_id|>``,
            ``<|im_end|>``, ``<|end|>``, ``<|endoftext|>``, ``</s>``, ...; see
            ``vocab_hf.END_OF_SEQUENCE_TEXTS``) plus any ids given explicitly.
        text_ids: int32 ids of the text tokens (non-empty bytes), sorted by their bytes.
        byte_matrix: uint8 ``[n, max_len]``, row ``i`` the bytes of ``text_ids[i]``, 0-padded.
        lengths: int32 byte length of each row.
        fingerprint: hex digest of the content; equal vocabularies have equal fingerprints.
    """

    __slots__ = (
        "_byte_fallback_ids",
        "_encoder",
        "_greedy",
        "_max_len",
        "byte_matrix",
        "eos_ids",
        "fingerprint",
        "lengths",
        "size",
        "special_tokens",
        "text_ids",
        "token_bytes",
    )

    size: int
    token_bytes: tuple[bytes | None, ...]
    special_tokens: Mapping[str, int]
    eos_ids: frozenset[int]
    text_ids: np.ndarray
    byte_matrix: np.ndarray
    lengths: np.ndarray
    fingerprint: str

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        eos_ids: Iterable[int] = (),
        special_tokens: Mapping[str, int] | None = None,
        *,
        byte_fallback_ids: Iterable[int] = (),
        encoder: TextEncoder | None = None,
    ) -> None:
        """Prefer the ``from_*`` constructors; ``byte_fallback_ids`` are used by
        ``encode_bytes`` only where no other token spells the same bytes."""
        spelled = checked_token_bytes(token_bytes)
        size = len(spelled)
        eos = frozenset(_checked_id(i, size, "end-of-sequence id") for i in eos_ids)
        for token_id in sorted(eos):
            if spelled[token_id] is not None:
                raise ValueError(
                    f"end-of-sequence id {token_id} spells {spelled[token_id]!r}; "
                    "end-of-sequence tokens must have no bytes (None)"
                )
        specials = {
            str(text): _checked_id(i, size, f"special token {text!r}")
            for text, i in (special_tokens or {}).items()
        }
        fallback = frozenset(byte_fallback_ids)
        text = text_tokens(spelled)
        text_ids, matrix, lengths = trie_arrays(text)
        fixed = {
            "size": size,
            "token_bytes": spelled,
            "special_tokens": MappingProxyType(specials),
            "eos_ids": eos,
            "text_ids": text_ids,
            "byte_matrix": matrix,
            "lengths": lengths,
            "fingerprint": fingerprint(spelled, text, eos, specials),
            "_byte_fallback_ids": fallback,
            "_greedy": longest_match_table(text, fallback),
            "_max_len": int(lengths.max(initial=0)),
            "_encoder": encoder,
        }
        for name, value in fixed.items():
            object.__setattr__(self, name, value)

    # -- constructors -------------------------------------------------------------------

    @classmethod
    def from_token_bytes(
        cls,
        token_bytes: Sequence[bytes | None],
        eos_ids: Iterable[int] = (),
        special_tokens: Mapping[str, int] | None = None,
    ) -> Vocabulary:
        """A vocabulary from explicit token bytes (``None`` for control tokens)."""
        return cls(token_bytes, eos_ids, special_tokens)

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        vocab_size: int | None = None,
        *,
        extra_eos_ids: Iterable[int] = (),
    ) -> Vocabulary:
        """The vocabulary of a fast Hugging Face tokenizer (or a ``tokenizers.Tokenizer``).

        ``vocab_size`` is the model's logits width: larger pads with ``None`` ids; smaller
        drops trailing ids, allowed only when they are all control tokens (a pad token a
        fine-tuner added beyond the embeddings). ``extra_eos_ids`` adds end-of-sequence ids.
        The result is remembered per tokenizer object (until it gains tokens).
        """
        extra = tuple(sorted(set(extra_eos_ids)))
        key = (vocab_size, extra, backend_of(tokenizer).get_vocab_size(with_added_tokens=True))
        with _CACHE_LOCK:
            known = _cached(tokenizer).get(key)
        if known is not None:
            return known
        table = read_tokenizer(tokenizer, extra)
        spelled = _fit(table.token_bytes, vocab_size)
        size = len(spelled)
        vocabulary = cls(
            spelled,
            {i for i in table.eos_ids if i < size},
            {text: i for text, i in table.special_tokens.items() if i < size},
            byte_fallback_ids=table.byte_fallback_ids,
            encoder=table.encoder,
        )
        with _CACHE_LOCK:
            _cached(tokenizer)[key] = vocabulary
        return vocabulary

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        vocab_size: int | None = None,
        *,
        extra_eos_ids: Iterable[int] = (),
    ) -> Vocabulary:
        """Load a tokenizer with ``AutoTokenizer`` (hub id or folder) and read it.

        End-of-sequence ids listed in the model's ``generation_config.json``, when there
        is one, are added to those the tokenizer implies.
        """
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        extra = [*extra_eos_ids, *_generation_eos_ids(name_or_path)]
        return cls.from_tokenizer(tokenizer, vocab_size, extra_eos_ids=extra)

    # -- encoding -------------------------------------------------------------------------

    def encode_bytes(self, data: bytes) -> list[int]:
        """Token ids whose bytes concatenate to exactly ``data``.

        Each valid UTF-8 stretch is encoded by the tokenizer itself (as a continuation: no
        prefix space) when its result spells the stretch exactly; otherwise, and for
        invalid UTF-8, tokens are chosen greedily by longest match.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"encode_bytes takes bytes, got {type(data).__name__}")
        data = bytes(data)
        try:
            pieces = [data.decode("utf-8")]  # the usual case: one valid stretch
        except UnicodeDecodeError:
            pieces = _INVALID_UTF8.split(data.decode("utf-8", "surrogateescape"))
        out: list[int] = []
        offset = 0
        for index, piece in enumerate(pieces):
            chunk = piece.encode("utf-8", "surrogateescape")
            ids = None
            if index % 2 == 0 and chunk and self._encoder is not None:
                ids = self._encoder.encode(piece)
                if not self._spells(ids, chunk):
                    ids = None
            out.extend(ids if ids is not None else self._longest_match(chunk, offset))
            offset += len(chunk)
        return out

    def _spells(self, ids: list[int], chunk: bytes) -> bool:
        if ids and (min(ids) < 0 or max(ids) >= self.size):
            return False
        spelled = self.token_bytes
        parts = [spelled[token_id] for token_id in ids]
        return None not in parts and b"".join(parts) == chunk

    def _longest_match(self, chunk: bytes, offset: int) -> list[int]:
        table, out, pos, end = self._greedy, [], 0, len(chunk)
        while pos < end:
            for length in range(min(self._max_len, end - pos), 0, -1):
                token_id = table.get(chunk[pos : pos + length])
                if token_id is not None:
                    out.append(token_id)
                    pos += length
                    break
            else:
                raise ValueError(
                    f"byte 0x{chunk[pos]:02x} at offset {offset + pos} is spelled by no token"
                )
        return out

    # -- value semantics ----------------------------------------------------------------

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Vocabulary is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Vocabulary is immutable (cannot delete {name!r})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __reduce__(self) -> tuple[Any, ...]:
        state = (self.token_bytes, self.eos_ids, dict(self.special_tokens))
        return (_rebuild, (*state, self._byte_fallback_ids, self._encoder))

    def __repr__(self) -> str:
        return (
            f"Vocabulary(size={self.size}, text_tokens={len(self.text_ids)}, "
            f"eos_ids={sorted(self.eos_ids)}, special_tokens={len(self.special_tokens)})"
        )


def _rebuild(
    token_bytes: tuple[bytes | None, ...],
    eos_ids: frozenset[int],
    special_tokens: dict[str, int],
    byte_fallback_ids: frozenset[int],
    encoder: TextEncoder | None,
) -> Vocabulary:
    return Vocabulary(
        token_bytes,
        eos_ids,
        special_tokens,
        byte_fallback_ids=byte_fallback_ids,
        encoder=encoder,
    )


def _cached(tokenizer: Any) -> dict[tuple[Any, ...], Vocabulary]:
    """The per-tokenizer cache (a throwaway dict when the object takes no weak reference)."""
    try:
        return _CACHE.setdefault(tokenizer, {})
    except TypeError:
        return {}


def _generation_eos_ids(name_or_path: str) -> list[int]:
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(name_or_path)
    except (OSError, ValueError):
        return []
    eos = config.eos_token_id
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else list(eos)


def _fit(token_bytes: list[bytes | None], vocab_size: int | None) -> list[bytes | None]:
    if vocab_size is None:
        return token_bytes
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size >= len(token_bytes):
        return token_bytes + [None] * (vocab_size - len(token_bytes))
    dropped = [i for i in range(vocab_size, len(token_bytes)) if token_bytes[i] is not None]
    if dropped:
        raise ValueError(
            f"vocab_size={vocab_size} is smaller than the tokenizer's {len(token_bytes)} ids "
            f"and would drop text token {dropped[0]} ({token_bytes[dropped[0]]!r})"
        )
    return token_bytes[:vocab_size]


def _checked_id(token_id: object, size: int, what: str) -> int:
    is_int = isinstance(token_id, (int, np.integer)) and not isinstance(token_id, bool)
    if is_int and 0 <= token_id < size:  # type: ignore[operator]
        return int(token_id)  # type: ignore[call-overload]
    raise ValueError(f"{what} {token_id!r} is not an id below the vocabulary size {size}")
