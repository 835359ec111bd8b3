"""Small GBNF expression trees, simplified as they are built and rendered as readable text.

Every converter (regex, JSON Schema) builds grammars from these nodes. ``None`` stands for
the empty language ("matches nothing"): the smart constructors propagate it, so a branch that
can never match disappears instead of producing an invalid or useless rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from structspec.ir.charset import ANY, CharSet


class Expr:
    """Base class of expression nodes."""


@dataclass(frozen=True)
class Lit(Expr):
    """A literal string (``""`` is the empty string)."""

    text: str


@dataclass(frozen=True)
class Chars(Expr):
    """One character from a set."""

    charset: CharSet


@dataclass(frozen=True)
class Ref(Expr):
    """A reference to a named rule."""

    name: str


@dataclass(frozen=True)
class Seq(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Alt(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Rep(Expr):
    item: Expr
    low: int
    high: int | None


@dataclass(frozen=True)
class Anchor(Expr):
    """``^`` (``start=True``) or ``$`` in a regex: an assertion matching no character."""

    start: bool


EMPTY = Lit("")
MaybeExpr = Expr | None


def chars(charset: CharSet) -> MaybeExpr:
    """One character of ``charset``; ``None`` when the set is empty."""
    if not charset:
        return None
    single = charset.single_char()
    return Lit(single) if single is not None else Chars(charset)


def seq(*items: MaybeExpr) -> MaybeExpr:
    """Concatenation; ``None`` when any part is ``None``. Adjacent literals are merged."""
    out: list[Expr] = []
    text: list[str] = []  # adjacent literals, joined once (not copied again at each one)
    for item in items:
        if item is None:
            return None
        for part in item.items if isinstance(item, Seq) else (item,):
            if isinstance(part, Lit):
                text.append(part.text)
                continue
            if any(text):
                out.append(Lit("".join(text)))
            text = []
            out.append(part)
    if any(text):
        out.append(Lit("".join(text)))
    if not out:
        return EMPTY
    return out[0] if len(out) == 1 else Seq(tuple(out))


def _char_members(item: Expr) -> CharSet | None:
    if isinstance(item, Chars):
        return item.charset
    if isinstance(item, Lit) and len(item.text) == 1:
        return CharSet.chars(item.text)
    return None


def alt(*items: MaybeExpr) -> MaybeExpr:
    """Alternation; ``None`` branches are dropped, single characters are merged into classes."""
    flat: dict[Expr, None] = {}  # insertion-ordered set: linear in the number of branches
    for item in items:
        if item is None:
            continue
        for part in item.items if isinstance(item, Alt) else (item,):
            flat.setdefault(part)
    merged: list[Expr] = []
    ranges: list[tuple[int, int]] = []
    position = -1
    for part in flat:
        members = _char_members(part)
        if members is None:
            merged.append(part)
            continue
        if position < 0:
            position = len(merged)
            merged.append(part)
        ranges += members.ranges
    if position >= 0:
        merged[position] = chars(CharSet.of(ranges))  # type: ignore[assignment]
    if not merged:
        return None
    if EMPTY in merged and len(merged) > 1:
        rest = [m for m in merged if m != EMPTY]
        body = rest[0] if len(rest) == 1 else Alt(tuple(rest))
        if isinstance(body, Rep) and body.low == 0:
            return body
        return Rep(body, 0, 1)
    return merged[0] if len(merged) == 1 else Alt(tuple(merged))


def rep(item: MaybeExpr, low: int, high: int | None) -> MaybeExpr:
    """``item{low,high}`` (``high=None``: unbounded)."""
    if high is not None and high < low:
        return None
    if item is None:
        return EMPTY if low == 0 else None
    if high == 0 or item == EMPTY:
        return EMPTY
    if low == high == 1:
        return item
    if isinstance(item, Lit) and low == high and len(item.text) * low <= 40:
        return Lit(item.text * low)
    return Rep(item, low, high)


def opt(item: MaybeExpr) -> MaybeExpr:
    return rep(item, 0, 1)


# -- rendering -------------------------------------------------------------------------------


def _escape_char(c: str, in_class: bool) -> str:
    cp = ord(c)
    if c == "\\":
        return "\\\\"
    if c == '"' and not in_class:
        return '\\"'
    if in_class and c in "]-^[":
        return f"\\x{cp:02X}" if c in "-^" else "\\" + c
    if c == "\n":
        return "\\n"
    if c == "\r":
        return "\\r"
    if c == "\t":
        return "\\t"
    if 0x20 <= cp < 0x7F:
        return c
    if cp < 0x80:
        return f"\\x{cp:02X}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04X}"
    return f"\\U{cp:08X}"


_PRINTABLE = re.compile(r'[ !#-\[\]-~]*')  # printable ASCII but '"' and '\\': written as is


def render_literal(text: str) -> str:
    if _PRINTABLE.fullmatch(text):
        return f'"{text}"'
    return '"' + "".join(_escape_char(c, False) for c in text) + '"'


def _render_ranges(ranges: tuple[tuple[int, int], ...]) -> str:
    out = []
    for lo, hi in ranges:
        if lo == hi:
            out.append(_escape_char(chr(lo), True))
        elif hi == lo + 1:
            out.append(_escape_char(chr(lo), True) + _escape_char(chr(hi), True))
        else:
            out.append(_escape_char(chr(lo), True) + "-" + _escape_char(chr(hi), True))
    return "".join(out)


def render_class(charset: CharSet) -> str:
    """``[...]`` or ``[^...]``, whichever is shorter; ``.`` for every character."""
    if charset == ANY:
        return "."
    inverse = charset.complement()
    if len(inverse.ranges) < len(charset.ranges):
        return "[^" + _render_ranges(inverse.ranges) + "]"
    return "[" + _render_ranges(charset.ranges) + "]"


def render(expr: Expr) -> str:
    """GBNF text for ``expr``."""
    return _render(expr, 0)


def _render(expr: Expr, context: int) -> str:
    """``context``: 0 top level / alternation member, 1 sequence member, 2 repeated item."""
    if isinstance(expr, Lit):
        return render_literal(expr.text)
    if isinstance(expr, Chars):
        return render_class(expr.charset)
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, Seq):
        text = " ".join(_render(item, 1) for item in expr.items)
        return f"({text})" if context >= 2 else text
    if isinstance(expr, Alt):
        text = " | ".join(_render(item, 0) for item in expr.items)
        return f"({text})" if context >= 1 else text
    if isinstance(expr, Rep):
        inner = _render(expr.item, 2)
        if isinstance(expr.item, Rep):
            inner = f"({inner})"
        return inner + _suffix(expr.low, expr.high)
    raise TypeError(f"not an expression: {expr!r}")


def _suffix(low: int, high: int | None) -> str:
    if high is None:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    if low == high:
        return f"{{{low}}}"
    return f"{{{low},{high}}}"


def format_rule(name: str, expr: Expr, width: int = 100) -> str:
    """``name ::= expr``, breaking a long top-level alternation onto ``|`` lines."""
    if not isinstance(expr, Alt):
        return f"{name} ::= {render(expr)}"
    items = [render(item) for item in expr.items]
    if len(name) + sum(len(item) + 3 for item in items) + 2 > width:
        pad = " " * (len(name) + 3)
        return f"{name} ::= " + f"\n{pad}| ".join(items)
    return f"{name} ::= " + " | ".join(items)


# -- analysis and rewriting --------------------------------------------------------------------


def map_chars(expr: MaybeExpr, encode: Callable[[CharSet], MaybeExpr]) -> MaybeExpr:
    """Replace every character (literal or class) by ``encode(charset)``."""
    if expr is None:
        return None
    if isinstance(expr, Lit):
        return seq(*(encode(CharSet.chars(c)) for c in expr.text))
    if isinstance(expr, Chars):
        return encode(expr.charset)
    if isinstance(expr, Seq):
        return seq(*(map_chars(item, encode) for item in expr.items))
    if isinstance(expr, Alt):
        return alt(*(map_chars(item, encode) for item in expr.items))
    if isinstance(expr, Rep):
        return rep(map_chars(expr.item, encode), expr.low, expr.high)
    return expr


def substitute(expr: MaybeExpr, replace: Callable[[Ref], MaybeExpr]) -> MaybeExpr:
    """Rebuild ``expr`` with every rule reference replaced by ``replace(ref)``."""
    if expr is None or isinstance(expr, (Lit, Chars)):
        return expr
    if isinstance(expr, Ref):
        return replace(expr)
    if isinstance(expr, Seq):
        return seq(*(substitute(item, replace) for item in expr.items))
    if isinstance(expr, Alt):
        return alt(*(substitute(item, replace) for item in expr.items))
    if isinstance(expr, Rep):
        return rep(substitute(expr.item, replace), expr.low, expr.high)
    return expr


def references(expr: MaybeExpr) -> set[str]:
    """Names of the rules ``expr`` refers to."""
    found: set[str] = set()
    pending = [expr]
    while pending:
        node = pending.pop()
        if isinstance(node, Ref):
            found.add(node.name)
        elif isinstance(node, (Seq, Alt)):
            pending += node.items
        elif isinstance(node, Rep):
            pending.append(node.item)
    return found


def length_range(expr: Expr) -> tuple[int, int | None]:
    """Fewest and most characters ``expr`` can match (``None``: unbounded); no rule refs."""
    if isinstance(expr, Lit):
        return len(expr.text), len(expr.text)
    if isinstance(expr, Chars):
        return 1, 1
    if isinstance(expr, Seq):
        low, high = 0, 0
        for item in expr.items:
            a, b = length_range(item)
            low += a
            high = None if high is None or b is None else high + b
        return low, high
    if isinstance(expr, Alt):
        ranges = [length_range(item) for item in expr.items]
        highs = [b for _, b in ranges]
        return min(a for a, _ in ranges), None if None in highs else max(highs)  # type: ignore[type-var]
    if isinstance(expr, Rep):
        a, b = length_range(expr.item)
        high = None if expr.high is None or b is None else b * expr.high
        if expr.high is None and b == 0:
            high = 0
        return a * expr.low, high
    return 0, 0  # assertions match no character
