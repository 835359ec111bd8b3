"""GBNF text for expressions: the one printer, for converter output and ``Grammar.to_gbnf``.

The printed text parses back to an equivalent grammar. Parentheses go only where GBNF needs
them, and a class built from a set (:class:`~structspec.ir.expr.Chars`) is spelled in its
shorter form (``[...]`` or ``[^...]``, ``.`` for every character), while a class as written
(:class:`~structspec.ir.expr.CharClass`) prints back as written.

Two styles share it. Converters print ASCII only (``ascii_only=True``): every character outside
printable ASCII is escaped, so their grammars can be pasted anywhere. ``Grammar.to_gbnf`` and
the linter keep printable Unicode as it is (``ascii_only=False``), as a person would write it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from structspec.ir.charset import ANY, CharSet
from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Ref, Rep, Rule, Seq, TokenRef

_PRINTABLE = re.compile(r'[ !#-\[\]-~]*')  # printable ASCII but '"' and '\\': written as is
_ASCII = re.compile(r'[ -~]*')  # printable ASCII: only '"' and '\\' escaped
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def format_rule(name: str, expr: Expr, *, width: int | None = 100, ascii_only: bool = True) -> str:
    """``name ::= expr``; a top-level alternation longer than ``width`` (None: never) is broken
    onto ``|`` lines."""
    if not isinstance(expr, Alt):
        return f"{name} ::= {format_expr(expr, ascii_only=ascii_only)}"
    items = [_format(item, 0, ascii_only) for item in expr.items]
    if width is not None and len(name) + sum(len(item) + 3 for item in items) + 2 > width:
        pad = " " * (len(name) + 3)
        return f"{name} ::= " + f"\n{pad}| ".join(items)
    return f"{name} ::= " + " | ".join(items)


def format_rules(rules: Iterable[Rule]) -> str:
    """Parsed rules as written, one line each (printable Unicode kept): ``Grammar.to_gbnf``."""
    return "".join(format_rule(rule.name, rule.body, width=None, ascii_only=False) + "\n" for rule in rules)


def format_expr(expr: Expr, *, ascii_only: bool = True) -> str:
    """GBNF text for one expression."""
    return _format(expr, 0, ascii_only)


def _format(expr: Expr, context: int, ascii_only: bool) -> str:
    """``context``: 0 top level or alternative, 1 sequence item, 2 repeated item."""
    kind = type(expr)  # the node types by frequency in converter output; list comprehensions for join
    if kind is Lit:
        if _PRINTABLE.fullmatch(expr.text):
            return f'"{expr.text}"'
        if _ASCII.fullmatch(expr.text):  # printable ASCII with quotes or backslashes (JSON keys): _escape's spelling
            return '"' + expr.text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return '"' + "".join([_escape(c, '"', ascii_only) for c in expr.text]) + '"'
    if kind is Ref:
        return expr.name
    if kind is Seq:
        if not expr.items:
            return '""'
        text = " ".join([_format(item, 1, ascii_only) for item in expr.items])
        return f"({text})" if context == 2 else text
    if kind is Chars:
        return _format_set(expr.charset, ascii_only)
    if kind is Alt:
        text = " | ".join([_format(item, 0, ascii_only) for item in expr.items])
        return f"({text})" if context else text
    if kind is Rep:
        text = _format(expr.item, 2, ascii_only) + _suffix(expr.low, expr.high)
        return f"({text})" if context == 2 else text
    if kind is CharClass:
        return _format_class(expr.ranges, expr.negated, ascii_only)
    if kind is TokenRef:
        text = f"<[{expr.token}]>" if isinstance(expr.token, int) else expr.token
        return ("!" if expr.negated else "") + text
    raise TypeError(f"no GBNF for {expr!r}")


def _suffix(low: int, high: int | None) -> str:
    if high is None:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    if low == high:
        return f"{{{low}}}"
    return f"{{{low},{high}}}"


@functools.lru_cache(maxsize=4096)
def _format_set(charset: CharSet, ascii_only: bool) -> str:
    """The shorter spelling of a set: ``.``, ``[...]`` or ``[^...]``, with a two-character range
    written as its two characters. Cached: converters print the same few sets over and over."""
    if charset == ANY:
        return "."
    negated = len(charset.complement().ranges) < len(charset.ranges)
    ranges = (charset.complement() if negated else charset).ranges
    pieces = [piece for lo, hi in ranges for piece in (((lo, lo), (hi, hi)) if hi == lo + 1 else ((lo, hi),))]
    return _format_class(pieces, negated, ascii_only)


def _format_class(ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]], negated: bool, ascii_only: bool) -> str:
    def one(code: int) -> str:
        return f"\\x{code:02X}" if chr(code) in "-^" else _escape(chr(code), "[]", ascii_only)

    body = "".join(one(lo) if lo == hi else f"{one(lo)}-{one(hi)}" for lo, hi in ranges)
    return "[" + ("^" if negated else "") + body + "]"


def _escape(c: str, special: str, ascii_only: bool) -> str:
    """``c`` inside a literal (``special`` is ``"``) or a class (``special`` is ``[]``)."""
    if c in _NAMED:
        return _NAMED[c]
    if c in special:
        return "\\" + c
    code = ord(c)
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02X}"
    if code < 0x7F or (not ascii_only and c.isprintable()):
        return c
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"
