"""How characters and JSON values are spelled inside the generated grammar.

Two spellings of string characters:

* *free* strings (no pattern, format or fixed value) accept every JSON spelling: raw
  characters except ``"``, ``\\`` and controls, the short escapes ``\\" \\\\ \\/ \\b \\f \\n \\r
  \\t``, ``\\uXXXX`` for any non-surrogate code unit, and ``\\uD8xx\\uDCxx`` surrogate pairs
  (which count as one character, as they decode to one).
* *constrained* strings accept each character in its canonical spelling, the one
  ``json.dumps(..., ensure_ascii=False)`` writes: raw when JSON allows it, ``\\"``, ``\\\\``, the
  short control escapes, else ``\\u00XX`` (either hex case). Every value keeps a spelling, and
  every accepted spelling decodes to an allowed value, which keeps exclusions and overlaps
  between patterns exact.
"""

from __future__ import annotations

import functools
import json
import math
import re

from structspec.ir.charset import CharSet
from structspec.ir.expr import EMPTY, Chars, Expr, Lit, MaybeExpr, alt, chars, rep, seq

QUOTE = Lit('"')
CONTROLS = CharSet.of([(0, 0x1F)])
_SHORT = {"\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t", '"': '"', "\\": "\\"}


def hex_digit(value: int) -> Expr:
    """A hex digit of ``value`` in either case."""
    text = f"{value:x}"
    return Lit(text) if text.isdigit() else Chars(CharSet.chars(text + text.upper()))


def _hex_class(values: set[int]) -> MaybeExpr:
    return alt(*(hex_digit(v) for v in sorted(values)))


@functools.lru_cache(maxsize=4096)
def canonical_char(charset: CharSet) -> MaybeExpr:
    """The canonical JSON spellings of the characters of ``charset`` (see module doc)."""
    raw = charset - CONTROLS - CharSet.chars('"\\')
    short = "".join(_SHORT[c] for c in _SHORT if ord(c) in charset)
    others: dict[int, set[int]] = {}
    for lo, hi in (charset & CONTROLS).ranges:
        for cp in range(lo, hi + 1):
            if chr(cp) not in _SHORT:
                others.setdefault(cp >> 4, set()).add(cp & 0xF)
    escaped = alt(
        chars(CharSet.chars(short)),
        *(seq(Lit("u00"), hex_digit(high), _hex_class(lows)) for high, lows in others.items()),
    )
    return alt(chars(raw), seq(Lit("\\"), escaped) if escaped is not None else None)


_VERBATIM = re.compile(r'[^"\\\x00-\x1f\ud800-\udfff]*')


def json_spelling(char: str) -> tuple[bytes, bytes] | None:
    """The canonical spelling of ``char`` inside a JSON string as bytes, with the other byte
    its last one may be (a ``\\u00XX`` escape's last hex digit in the other case; ``b""``
    for none), as :func:`canonical_char` accepts it; ``None`` for a lone surrogate, which
    JSON text cannot spell."""
    if char in _SHORT:
        return b"\\" + _SHORT[char].encode("ascii"), b""
    code = ord(char)
    if code < 0x20:
        spelled = f"\\u{code:04x}".encode("ascii")
        last = spelled[-1:]
        return spelled, last.upper() if last.isalpha() else b""
    if 0xD800 <= code <= 0xDFFF:
        return None
    return char.encode("utf-8"), b""


def json_string_literal(text: str) -> Expr:
    """The canonical quoted spelling of ``text``."""
    if _VERBATIM.fullmatch(text):  # no character needs an escape: the text is its own spelling
        return Lit(f'"{text}"')
    return seq(QUOTE, *(canonical_char(CharSet.chars(c)) for c in text), QUOTE) or EMPTY


HEX = Chars(CharSet.chars("0123456789abcdefABCDEF"))


def free_escape() -> Expr:
    """Any JSON escape sequence (after the backslash is matched by the caller)."""
    non_surrogate = alt(
        seq(Chars(CharSet.chars("0123456789abcABCeEfF")), rep(HEX, 3, 3)),
        seq(Chars(CharSet.chars("dD")), Chars(CharSet.chars("01234567")), rep(HEX, 2, 2)),
    )
    pair = seq(
        Chars(CharSet.chars("dD")),
        Chars(CharSet.chars("89abAB")),
        rep(HEX, 2, 2),
        Lit("\\u"),
        Chars(CharSet.chars("dD")),
        Chars(CharSet.chars("cdefCDEF")),
        rep(HEX, 2, 2),
    )
    escape = alt(Chars(CharSet.chars('"\\/bfnrt')), seq(Lit("u"), alt(non_surrogate, pair)))
    assert escape is not None
    return escape


PLAIN_ASCII = CharSet.of([(0x20, 0x7F)]) - CharSet.chars('"\\')
NON_ASCII = CharSet.of([(0x80, 0x10FFFF)])


def free_char() -> Expr:
    """One character of an unconstrained JSON string, in any spelling."""
    result = alt(chars(PLAIN_ASCII | NON_ASCII), seq(Lit("\\"), free_escape()))
    assert result is not None
    return result


def number_spellings(value: int | float) -> list[str]:
    """Spellings of a JSON number that ``jsonschema`` treats as equal to ``value``."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return []
    if isinstance(value, int) or value.is_integer():
        whole = int(value)
        spellings = [str(whole)]
        if abs(whole) < 10**308 and float(whole) == whole:  # "N.0" parses to exactly N
            spellings.append(f"{whole}.0")
        return spellings
    return [json.dumps(value)]


def json_value_expr(value: object, ws: MaybeExpr) -> Expr:
    """An expression accepting the canonical spellings of the JSON value ``value``.

    Object members keep their given order; numbers equal to an integer also accept the
    ``.0`` spelling; ``ws`` (``None`` for compact output) goes where flexible layout allows.
    """
    gap = ws if ws is not None else EMPTY
    if value is None or isinstance(value, bool):
        return Lit(json.dumps(value))
    if isinstance(value, (int, float)):
        return alt(*(Lit(s) for s in number_spellings(value))) or Lit("null")
    if isinstance(value, str):
        return json_string_literal(value)
    if isinstance(value, list):
        if not value:
            return seq(Lit("["), gap, Lit("]")) or EMPTY
        parts: list[MaybeExpr] = [Lit("["), gap]
        for i, item in enumerate(value):
            if i:
                parts += [gap, Lit(","), gap]
            parts.append(json_value_expr(item, ws))
        return seq(*parts, gap, Lit("]")) or EMPTY
    if isinstance(value, dict):
        if not value:
            return seq(Lit("{"), gap, Lit("}")) or EMPTY
        parts = [Lit("{"), gap]
        for i, (key, item) in enumerate(value.items()):
            if i:
                parts += [gap, Lit(","), gap]
            parts += [json_string_literal(key), gap, Lit(":"), gap, json_value_expr(item, ws)]
        return seq(*parts, gap, Lit("}")) or EMPTY
    raise TypeError(f"not a JSON value: {value!r}")
