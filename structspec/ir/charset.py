"""Sets of Unicode scalar values as sorted, disjoint, inclusive code-point ranges.

Used by the regex front end (character classes), the automaton layer (edge labels) and the
GBNF renderer (``[a-z]`` classes). The universe is every Unicode scalar value: code points
``0..0x10FFFF`` except the surrogates ``0xD800..0xDFFF``, which no UTF-8 text can contain.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort inclusive ranges and merge overlapping or adjacent ones."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)


def _normalize(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort, merge and clip ranges to the scalar-value universe."""
    clipped: list[tuple[int, int]] = []
    for lo, hi in ranges:
        lo, hi = max(lo, 0), min(hi, MAX_CODE_POINT)
        if lo > hi:
            continue
        if lo < SURROGATES[0] and hi > SURROGATES[1]:
            clipped += [(lo, SURROGATES[0] - 1), (SURROGATES[1] + 1, hi)]
        elif SURROGATES[0] <= lo and hi <= SURROGATES[1]:
            continue
        elif SURROGATES[0] <= lo <= SURROGATES[1]:
            clipped.append((SURROGATES[1] + 1, hi))
        elif SURROGATES[0] <= hi <= SURROGATES[1]:
            clipped.append((lo, SURROGATES[0] - 1))
        else:
            clipped.append((lo, hi))
    return merge_ranges(clipped)


@dataclass(frozen=True)
class CharSet:
    """An immutable set of Unicode scalar values."""

    ranges: tuple[tuple[int, int], ...] = ()

    @staticmethod
    def of(ranges: Iterable[tuple[int, int]]) -> CharSet:
        """The set covering ``ranges`` (any order, overlaps allowed)."""
        return CharSet(_normalize(ranges))

    @staticmethod
    def chars(text: str) -> CharSet:
        """The set of the characters of ``text``."""
        if len(text) == 1:  # the common call: one character, already a normalized range unless a surrogate
            code = ord(text)
            if not SURROGATES[0] <= code <= SURROGATES[1]:
                return CharSet(((code, code),))
        return CharSet.of((ord(c), ord(c)) for c in text)

    @staticmethod
    def single(code_point: int) -> CharSet:
        return CharSet.of([(code_point, code_point)])

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __contains__(self, code_point: int) -> bool:
        return any(lo <= code_point <= hi for lo, hi in self.ranges)

    def __or__(self, other: CharSet) -> CharSet:
        if not other.ranges or self.ranges == other.ranges:
            return self
        if not self.ranges:
            return other
        return CharSet(merge_ranges(self.ranges + other.ranges))  # both clipped already

    def __and__(self, other: CharSet) -> CharSet:
        a, b = self.ranges, other.ranges
        if not a or not b or a[-1][1] < b[0][0] or b[-1][1] < a[0][0]:
            return EMPTY
        if a == b:
            return self
        out: list[tuple[int, int]] = []
        i = j = 0
        n, m = len(a), len(b)
        while i < n and j < m:
            (alo, ahi), (blo, bhi) = a[i], b[j]
            lo = alo if alo > blo else blo
            if ahi < bhi:
                if lo <= ahi:
                    out.append((lo, ahi))
                i += 1
            else:
                if lo <= bhi:
                    out.append((lo, bhi))
                j += 1
        return CharSet(tuple(out))

    def complement(self) -> CharSet:
        out: list[tuple[int, int]] = []
        prev = 0
        for lo, hi in self.ranges:
            if lo > prev:
                out.append((prev, lo - 1))
            prev = hi + 1
        if prev <= MAX_CODE_POINT:
            out.append((prev, MAX_CODE_POINT))
        return CharSet.of(out)

    def __sub__(self, other: CharSet) -> CharSet:
        return self & other.complement()

    def single_char(self) -> str | None:
        """The only member as a string, when the set has exactly one member."""
        if len(self.ranges) == 1 and self.ranges[0][0] == self.ranges[0][1]:
            return chr(self.ranges[0][0])
        return None


ANY = CharSet.of([(0, MAX_CODE_POINT)])
EMPTY = CharSet()
LINE_TERMINATORS = CharSet.chars("\n\r\u2028\u2029")
ECMA_DIGIT = CharSet.of([(0x30, 0x39)])
ECMA_WORD = CharSet.chars("_") | CharSet.of([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)])
ECMA_SPACE = CharSet.chars("\t\n\x0b\x0c\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff") | (
    CharSet.of([(0x2000, 0x200A)])
)


@functools.cache
def python_class(escape: str) -> CharSet:
    """What Python's ``re`` (used by ``jsonschema``) matches for ``\\d``, ``\\w`` or ``\\s``, read
    off one string of every Unicode scalar value (4 MiB, decoded from UTF-32 at once and dropped
    once read; each escape on its first use only: a process pays for the ones its patterns use)."""

    def to_cp(i: int) -> int:
        return i if i < SURROGATES[0] else i + (SURROGATES[1] - SURROGATES[0] + 1)

    codes = np.concatenate((np.arange(SURROGATES[0]), np.arange(SURROGATES[1] + 1, MAX_CODE_POINT + 1)))
    scalars = codes.astype("<u4").tobytes().decode("utf-32-le")
    return CharSet.of((to_cp(m.start()), to_cp(m.end() - 1)) for m in re.finditer(f"\\{escape}+", scalars))


def class_escape(letter: str) -> tuple[CharSet, CharSet]:
    """What a class escape (``d D w W s S``) matches in ECMAScript and in Python's ``re``.

    JSON Schema patterns are ECMAScript, but ``jsonschema`` checks them with Python's ``re``,
    whose ``\\d \\w \\s`` are Unicode-aware. Callers keep both readings through a whole
    character class (negation included) and accept only what both match.
    """
    lower = letter.lower()
    ecma = {"d": ECMA_DIGIT, "w": ECMA_WORD, "s": ECMA_SPACE}[lower]
    python = python_class(lower)
    if letter == lower:
        return ecma, python
    return ecma.complement(), python.complement()
