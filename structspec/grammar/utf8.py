"""Code point ranges as UTF-8 byte-range sequences.

A character class over code points becomes a small set of byte sequences, each position a
byte range, e.g. U+0080..U+07FF is ``[C2-DF][80-BF]``. Compiling classes this way makes the
whole grammar byte-level: a character split across tokens is just a state in the middle of
a sequence, and invalid UTF-8 (overlong forms, surrogates, stray continuation bytes) simply
has no path.
"""

from __future__ import annotations

import functools

_LENGTH_LIMITS = ((0x7F, 1), (0x7FF, 2), (0xFFFF, 3), (0x10FFFF, 4))
_SURROGATES = (0xD800, 0xDFFF)

ByteRangeSeq = tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=4096)
def utf8_sequences(ranges: tuple[tuple[int, int], ...]) -> tuple[ByteRangeSeq, ...]:
    """Byte-range sequences matching exactly the UTF-8 encodings of the given code points.

    Cached: schema grammars spell the same few classes (string characters, digits) over and over."""
    out: list[ByteRangeSeq] = []
    for low, high in ranges:
        for lo, hi in _without_surrogates(low, high):
            for lo_len, hi_len in _split_by_length(lo, hi):
                _split(lo_len, hi_len, out)
    return tuple(out)


def _without_surrogates(low: int, high: int) -> list[tuple[int, int]]:
    s_lo, s_hi = _SURROGATES
    parts = []
    if low < s_lo:
        parts.append((low, min(high, s_lo - 1)))
    if high > s_hi:
        parts.append((max(low, s_hi + 1), high))
    return [(a, b) for a, b in parts if a <= b]


def _split_by_length(low: int, high: int) -> list[tuple[int, int]]:
    parts, start = [], low
    for limit, _ in _LENGTH_LIMITS:
        if start > high:
            break
        if start <= limit:
            parts.append((start, min(high, limit)))
            start = limit + 1
    return parts


def _split(low: int, high: int, out: list[ByteRangeSeq]) -> None:
    """Split [low, high] (same encoded length) until each piece is a product of byte ranges."""
    length = len(chr(low).encode("utf-8"))
    for i in range(1, length):
        mask = (1 << (6 * i)) - 1
        if low & ~mask != high & ~mask:
            if low & mask:
                _split(low, low | mask, out)
                _split((low | mask) + 1, high, out)
                return
            if high & mask != mask:
                _split(low, (high & ~mask) - 1, out)
                _split(high & ~mask, high, out)
                return
    lo_bytes = chr(low).encode("utf-8")
    hi_bytes = chr(high).encode("utf-8")
    out.append(tuple(zip(lo_bytes, hi_bytes, strict=True)))
