"""Parser for the ECMAScript regular-expression subset that JSON Schema patterns use.

The result is an expression tree (:mod:`structspec.ir.expr`) plus :class:`Anchor` nodes for
``^`` and ``$``. Features with no regular-language meaning (backreferences, lookaround, word
boundaries) and syntax that ECMAScript and Python's ``re`` read differently are rejected with
a :class:`RegexError` naming the position, because ``jsonschema`` checks patterns with ``re``
and we only accept strings both engines agree on.
"""

from __future__ import annotations

import re

from structspec.budget import MAX_REGEX_NESTING
from structspec.ir.charset import ANY, LINE_TERMINATORS, CharSet, class_escape
from structspec.ir.expr import Anchor, Expr, alt, chars, rep, seq

MAX_REPEAT = 10_000


class RegexError(ValueError):
    """A pattern uses syntax we cannot translate exactly."""

    def __init__(self, message: str, pattern: str, position: int) -> None:
        self.message = message
        self.pattern = pattern
        self.position = position
        super().__init__(f"{message} at position {position} in pattern {pattern!r}")


_CONTROL_ESCAPES = {"t": "\t", "n": "\n", "v": "\x0b", "f": "\x0c", "r": "\r"}
_SYNTAX = set("^$\\.*+?()[]{}|/")


def parse_regex(pattern: str) -> Expr | None:
    """Parse ``pattern`` into an expression tree with :class:`Anchor` nodes.

    ``None`` means the pattern matches nothing (e.g. ``[^\\s\\S]``).
    """
    python_pattern(pattern)
    parser = _Parser(pattern)
    expr = parser.disjunction()
    if parser.pos < len(pattern):
        raise parser.error("unbalanced ')'")
    return expr


def python_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled by Python's ``re``, as ``jsonschema`` uses it, after the checks of
    :func:`_prescan` (so neither a RecursionError nor a FutureWarning comes out of ``re``);
    :class:`RegexError` for what ``re`` refuses or cannot hold."""
    _prescan(pattern)
    try:
        return re.compile(pattern)
    except re.error as exc:
        pos = exc.pos if exc.pos is not None else 0
        raise RegexError(
            f"pattern is not valid for Python's re: {exc.msg}", pattern, pos
        ) from None
    except OverflowError:
        counts = re.finditer(r"\{([0-9]+)(?:,([0-9]*))?\}", pattern)
        where = next((m.start() for m in counts if max(int(g or 0) for g in m.groups()) > MAX_REPEAT), 0)
        raise RegexError("a repetition count is too large for Python's re", pattern, where) from None


def _prescan(pattern: str) -> None:
    """Refuse, before anything parses the pattern recursively, groups nested deeper than
    :data:`~structspec.budget.MAX_REGEX_NESTING` and the class syntax that Python's ``re`` warns about
    (a ``FutureWarning``: its meaning will change), which ECMAScript reads differently anyway."""
    depth, i = 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i = _class_end(pattern, i)
            continue
        if ch == "(":
            depth += 1
            if depth > MAX_REGEX_NESTING:
                raise RegexError(f"groups nest deeper than {MAX_REGEX_NESTING} levels", pattern, i)
        elif ch == ")":
            depth = max(depth - 1, 0)
        i += 1


def _class_end(pattern: str, start: int) -> int:
    """The index after the class opening at ``start``, read as Python's ``re`` reads it."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("[", i):
        raise RegexError(
            "'[' at the start of a character class, which Python's re will read as a nested set "
            "(POSIX classes such as [[:alpha:]] do not exist in JSON Schema patterns: write [A-Za-z]); "
            "escape it as '\\['",
            pattern,
            i,
        )
    first = True
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i, first = i + 2, False
            continue
        if ch == "]" and not first:
            return i + 1
        if ch in "-&~|" and pattern.startswith(ch, i + 1):
            raise RegexError(
                f"'{ch}{ch}' inside a character class, which Python's re will read as a set operation; "
                f"escape it as '\\{ch}'",
                pattern,
                i,
            )
        i, first = i + 1, False
    return i


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.src = pattern
        self.pos = 0

    def error(self, message: str, pos: int | None = None) -> RegexError:
        return RegexError(message, self.src, self.pos if pos is None else pos)

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.src[i] if i < len(self.src) else ""

    def disjunction(self) -> Expr | None:
        branches = [self.alternative()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.alternative())
        return alt(*branches)

    def alternative(self) -> Expr | None:
        items: list[Expr | None] = []
        while self.peek() and self.peek() not in "|)":
            items.append(self.term())
        return seq(*items)

    def term(self) -> Expr | None:
        start = self.pos
        ch = self.peek()
        if ch in "^$":
            self.pos += 1
            node: Expr | None = Anchor(ch == "^")
            if self.quantifier_ahead():
                raise self.error("quantifier after an anchor", self.pos)
            return node
        if ch == "\\" and self.peek(1) in ("b", "B"):
            raise self.error("word boundaries (\\b, \\B) are not supported", start)
        node = self.atom()
        return self.quantified(node, start)

    def quantifier_ahead(self) -> bool:
        return self.peek() in ("*", "+", "?") or bool(self.bounds_match())

    def bounds_match(self) -> re.Match[str] | None:
        return re.compile(r"\{([0-9]+)(,([0-9]*))?\}").match(self.src, self.pos)

    def quantified(self, node: Expr | None, start: int) -> Expr | None:
        ch = self.peek()
        if ch in ("*", "+", "?"):
            self.pos += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
        elif match := self.bounds_match():
            self.pos = match.end()
            low = int(match.group(1))
            high: int | None = low
            if match.group(2) is not None:
                high = int(match.group(3)) if match.group(3) else None
            if high is not None and high < low:
                raise self.error("numbers out of order in {} quantifier", start)
            if max(low, high or 0) > MAX_REPEAT:
                raise self.error(f"repetition count above {MAX_REPEAT}", start)
        elif ch == "{" and self.peek(1) == ",":
            raise self.error("'{,n}' means different things in ECMAScript and Python", self.pos)
        else:
            return node
        if self.peek() == "?":
            self.pos += 1  # lazy: same language
        if self.quantifier_ahead():
            raise self.error("nothing to repeat (double quantifier)", self.pos)
        return rep(node, low, high)

    def atom(self) -> Expr | None:
        ch = self.peek()
        start = self.pos
        if ch == ".":
            self.pos += 1
            return chars(ANY - LINE_TERMINATORS)
        if ch == "(":
            return self.group()
        if ch == "[":
            ecma, python = self.char_class()
            return chars(ecma & python)
        if ch == "\\":
            ecma, python = self.escape(in_class=False)
            return chars(ecma & python)
        if ch in "*+?":
            raise self.error("nothing to repeat", start)
        if ch == "{" and self.bounds_match():
            raise self.error("nothing to repeat", start)
        self.pos += 1
        return chars(CharSet.chars(ch))

    def group(self) -> Expr | None:
        start = self.pos
        self.pos += 1
        if self.peek() == "?":
            rest = self.src[self.pos :]
            if rest.startswith("?:"):
                self.pos += 2
            elif rest.startswith(("?=", "?!", "?<=", "?<!")):
                raise self.error("lookaround assertions are not supported", start)
            else:
                raise self.error("group syntax that ECMAScript and Python read differently", start)
        inner = self.disjunction()
        if self.peek() != ")":
            raise self.error("missing ')'", start)
        self.pos += 1
        return inner

    def char_class(self) -> tuple[CharSet, CharSet]:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        if self.peek() == "]":
            raise self.error("'[]' and '[^]' mean different things in ECMAScript and Python", start)
        ecma = python = CharSet()
        while self.peek() != "]":
            if not self.peek():
                raise self.error("unterminated character class", start)
            item_pos = self.pos
            low = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high = self.class_atom()
                lo_c, hi_c = low[0].single_char(), high[0].single_char()
                if lo_c is None or hi_c is None or low[0] != low[1] or high[0] != high[1]:
                    raise self.error("character class escape used as a range end", item_pos)
                if ord(hi_c) < ord(lo_c):
                    raise self.error("range out of order in character class", item_pos)
                span = CharSet.of([(ord(lo_c), ord(hi_c))])
                ecma, python = ecma | span, python | span
            else:
                ecma, python = ecma | low[0], python | low[1]
        self.pos += 1
        if negated:
            return ecma.complement(), python.complement()
        return ecma, python

    def class_atom(self) -> tuple[CharSet, CharSet]:
        if self.peek() == "\\":
            return self.escape(in_class=True)
        ch = self.peek()
        self.pos += 1
        return CharSet.chars(ch), CharSet.chars(ch)

    def escape(self, in_class: bool) -> tuple[CharSet, CharSet]:
        """The (ECMAScript, Python) readings of the escape at the current position."""
        start = self.pos
        self.pos += 1
        ch = self.peek()
        if not ch:
            raise self.error("pattern ends with '\\'", start)
        self.pos += 1
        if ch in "dDwWsS":
            return class_escape(ch)
        same = self.literal_escape(ch, start, in_class)
        return same, same

    def literal_escape(self, ch: str, start: int, in_class: bool) -> CharSet:
        """An escape both engines read as one fixed character."""
        if ch in _CONTROL_ESCAPES:
            return CharSet.chars(_CONTROL_ESCAPES[ch])
        if ch == "b" and in_class:
            return CharSet.chars("\b")
        if ch == "0" and not self.peek().isdigit():
            return CharSet.chars("\0")
        if ch.isdigit():
            raise self.error("backreferences are not supported", start)
        if ch == "k" and self.peek() == "<":
            raise self.error("named backreferences are not supported", start)
        if ch in "xu":
            width = 2 if ch == "x" else 4
            digits = self.src[self.pos : self.pos + width]
            if len(digits) == width and re.fullmatch(r"[0-9A-Fa-f]+", digits):
                self.pos += width
                return CharSet.single(int(digits, 16))
            raise self.error(f"'\\{ch}' needs {width} hex digits", start)
        if ch in "pP":
            raise self.error("Unicode property escapes are not supported", start)
        if ch.isascii() and ch.isalpha():
            raise self.error(f"escape '\\{ch}' differs between ECMAScript and Python", start)
        if ch in _SYNTAX or ch == "-" or not ch.isalnum():
            return CharSet.chars(ch)
        raise self.error(f"unknown escape '\\{ch}'", start)
