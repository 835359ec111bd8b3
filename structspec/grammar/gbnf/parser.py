"""A hand-written GBNF parser.

Why hand-written rather than a lark meta-grammar: GBNF is newline-sensitive (a rule ends at
a newline unless inside parentheses or after ``|``), the linter must keep going after an
error and report every finding in one run, and every node must carry its exact line and
column. A small recursive-descent parser does all three directly, with no runtime
dependency and with error messages phrased for GBNF rather than for a generic lexer.

The parser only checks syntax and local well-formedness (escapes, class ranges, repetition
bounds). Cross-rule checks (undefined rules, missing root, left recursion, ...) live in
:mod:`structspec.grammar.gbnf.analysis`.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from structspec.budget import MAX_GBNF_NESTING
from structspec.grammar.gbnf.diagnostics import Diagnostic
from structspec.ir.charset import ANY, MAX_CODE_POINT
from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Ref, Rep, Rule, Seq, TokenRef

MAX_REPEAT = 100_000
_NAME = re.compile(r"[A-Za-z0-9_-]+")
_RULE_START = re.compile(r"[ \t]*[A-Za-z0-9_-]+[ \t]*::=")
_PLAIN = re.compile(r'[^"\\\r\n]+')  # literal characters that stand for themselves
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


class _Abort(Exception):
    """Raised inside a rule after a syntax error; the parser resumes at the next rule."""


@dataclass(frozen=True)
class ParsedGrammar:
    """The rules in source order (duplicates kept, for the linter) and the problems found.

    ``failed_rules`` names the rules dropped because of a syntax error in their definition,
    so that the linter does not also report references to them as undefined.
    """

    rules: tuple[Rule, ...]
    diagnostics: tuple[Diagnostic, ...]
    failed_rules: tuple[str, ...] = ()


def parse_gbnf(source: str) -> ParsedGrammar:
    """Parse GBNF text into rules, collecting every syntax problem instead of stopping."""
    return _Parser(source).parse()


class _Parser:
    def __init__(self, source: str) -> None:
        self.src = source
        self.pos = 0
        self.depth = 0  # parenthesis nesting; newlines are insignificant when > 0
        self.height = 0  # how deep the expression tree just parsed is (sequences, choices, repetitions)
        self.diagnostics: list[Diagnostic] = []
        self.rule_name: str | None = None  # the rule being parsed, once its name is read
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]

    # -- positions and errors ------------------------------------------------------------
    def where(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        line = bisect.bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def report(self, code: str, message: str, pos: int | None = None) -> None:
        line, column = self.where(pos)
        self.diagnostics.append(Diagnostic(code, message, line, column))

    def fail(self, code: str, message: str, pos: int | None = None) -> _Abort:
        self.report(code, message, pos)
        return _Abort()

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.src[i] if i < len(self.src) else ""

    def describe_here(self) -> str:
        ch = self.peek()
        if not ch:
            return "end of input"
        if ch in "\r\n":
            return "end of line"
        return repr(ch)

    # -- whitespace ------------------------------------------------------------------------
    def skip_space(self, newlines: bool) -> None:
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            if ch in " \t":
                self.pos += 1
            elif ch == "#":
                while self.pos < len(src) and src[self.pos] not in "\r\n":
                    self.pos += 1
            elif (ch in "\r\n" and (newlines or self.depth > 0)) or (ch in "\r\n" and self._continues_on_next_line()):
                self.pos += 1
            else:
                return

    def _continues_on_next_line(self) -> bool:
        """A line whose first non-blank character is ``|`` continues the current rule."""
        i = self.pos
        while i < len(self.src) and self.src[i] in "\r\n \t":
            i += 1
        return i < len(self.src) and self.src[i] == "|"

    # -- grammar -----------------------------------------------------------------------------
    def parse(self) -> ParsedGrammar:
        rules: list[Rule] = []
        failed: list[str] = []
        self.skip_space(newlines=True)
        while self.pos < len(self.src):
            start = self.pos
            self.rule_name = None
            try:
                rules.append(self.parse_rule())
            except _Abort:
                if self.rule_name is not None:
                    failed.append(self.rule_name)
                self.depth = 0
                self.recover(start)
            self.skip_space(newlines=True)
        return ParsedGrammar(tuple(rules), tuple(self.diagnostics), tuple(failed))

    def recover(self, start: int) -> None:
        """Skip to the next line that starts a rule definition."""
        line_index = self.where(start)[0]  # the next rule start after this rule's first line
        for begin in self.line_starts[line_index:]:
            if _RULE_START.match(self.src, begin):
                self.pos = begin
                return
        self.pos = len(self.src)

    def parse_rule(self) -> Rule:
        line, column = self.where()
        name = self.rule_name = self.parse_name("a rule name")
        self.skip_space(newlines=False)
        if not self.src.startswith("::=", self.pos):
            raise self.fail("E001", f"expected '::=' after rule name {name!r}, found {self.describe_here()}")
        self.pos += 3
        self.skip_space(newlines=True)  # the body may start on the next line
        body = self.parse_alternatives()
        if self.pos < len(self.src) and self.peek() not in "\r\n":
            if self.peek() == ")":
                raise self.fail("E001", "unbalanced ')'")
            raise self.fail("E001", f"unexpected {self.describe_here()}")
        return Rule(name, body, line=line, column=column)

    def parse_name(self, what: str) -> str:
        match = _NAME.match(self.src, self.pos)
        if not match:
            raise self.fail("E001", f"expected {what}, found {self.describe_here()}")
        self.pos = match.end()
        return match.group()

    def nest(self, height: int, start: int) -> None:
        """Record the height of the node starting at ``start``, refusing one over the limit."""
        if height > MAX_GBNF_NESTING:
            raise self.fail(
                "E108",
                f"expression nests deeper than {MAX_GBNF_NESTING} levels (sequences, alternatives and "
                "repetitions inside each other)",
                start,
            )
        self.height = height

    def parse_alternatives(self) -> Expr:
        start = self.pos
        line, column = self.where()
        alternatives = [self.parse_sequence()]
        height = self.height
        while self.peek() == "|":
            self.pos += 1
            self.skip_space(newlines=True)
            alternatives.append(self.parse_sequence())
            height = max(height, self.height)
        if len(alternatives) == 1:
            return alternatives[0]
        self.nest(height + 1, start)
        return Alt(tuple(alternatives), line=line, column=column)

    def parse_sequence(self) -> Expr:
        start = self.pos
        line, column = self.where()
        items: list[Expr] = []
        height = 0
        while True:
            self.skip_space(newlines=False)
            ch = self.peek()
            if not ch or ch in "|)\r\n":
                break
            if ch in _NAME_CHARS and _RULE_START.match(self.src, self.pos):
                if self.depth == 0:
                    raise self.fail("E001", "a new rule must start on its own line")
                break  # a rule definition inside '(': the group was never closed
            item_start = self.pos
            items.append(self.parse_postfix(self.parse_primary(), item_start))
            height = max(height, self.height)
        if len(items) == 1:
            return items[0]
        self.nest(height + 1 if items else 0, start)
        return Seq(tuple(items), line=line, column=column)

    def parse_postfix(self, node: Expr, start: int) -> Expr:
        while True:
            ch = self.peek()
            line, column = node.line, node.column
            if ch in ("*", "+", "?"):
                self.pos += 1
                low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[ch]
                node = Rep(node, low, high, line=line, column=column)
            elif ch == "{":
                low, high = self.parse_bounds()
                node = Rep(node, low, high, line=line, column=column)
            else:
                return node
            self.nest(self.height + 1, start)

    def parse_bounds(self) -> tuple[int, int | None]:
        start = self.pos
        self.pos += 1
        self.skip_space(newlines=False)
        low = self.parse_int(required=False)
        self.skip_space(newlines=False)
        high: int | None = low
        if self.peek() == ",":
            self.pos += 1
            self.skip_space(newlines=False)
            high = self.parse_int(required=False)
            self.skip_space(newlines=False)
        if self.peek() != "}":
            raise self.fail("E001", f"expected '}}' to close the repetition, found {self.describe_here()}")
        self.pos += 1
        if low is None:
            if high is None:
                raise self.fail("E001", "repetition needs a count, e.g. {2}, {2,} or {2,5}", start)
            low = 0
        for bound in (low, high):
            if bound is not None and bound > MAX_REPEAT:
                raise self.fail("E108", f"repetition count {bound} exceeds the limit of {MAX_REPEAT}", start)
        if high is not None and high < low:
            self.report("E106", f"repetition {{{low},{high}}} has its minimum above its maximum", start)
            high = low
        return low, high

    def parse_int(self, required: bool) -> int | None:
        match = re.compile(r"[0-9]+").match(self.src, self.pos)
        if not match:
            if required:
                raise self.fail("E001", f"expected a number, found {self.describe_here()}")
            return None
        self.pos = match.end()
        return int(match.group())

    def parse_primary(self) -> Expr:
        line, column = self.where()
        ch = self.peek()
        self.height = 0  # a leaf; a group sets the height of its body
        if ch == '"':
            return Lit(self.parse_literal(), line=line, column=column)
        if ch == "[":
            return self.parse_class(line, column)
        if ch == ".":
            self.pos += 1
            return Chars(ANY, line=line, column=column)
        if ch == "(":
            return self.parse_group()
        if ch == "<" or (ch == "!" and self.peek(1) == "<"):
            return self.parse_token_ref(line, column)
        if ch in _NAME_CHARS:
            return Ref(self.parse_name("a rule name"), line=line, column=column)
        if ch in "*+?{":
            raise self.fail("E001", f"repetition {ch!r} has nothing to repeat")
        raise self.fail("E001", f"unexpected {self.describe_here()}")

    def parse_group(self) -> Expr:
        open_pos = self.pos
        if self.depth >= MAX_GBNF_NESTING:
            raise self.fail("E108", f"parentheses nest deeper than {MAX_GBNF_NESTING} levels", open_pos)
        self.pos += 1
        self.depth += 1
        self.skip_space(newlines=True)
        body = self.parse_alternatives()
        self.skip_space(newlines=True)
        if self.peek() != ")":
            raise self.fail("E001", "unclosed '(' (opened here)", open_pos)
        self.pos += 1
        self.depth -= 1
        if isinstance(body, Seq) and not body.items:
            return Lit("", line=body.line, column=body.column)
        return body

    def parse_literal(self) -> str:
        open_pos = self.pos
        self.pos += 1
        chars: list[str] = []
        while True:
            ch = self.peek()
            if not ch or ch in "\r\n":
                raise self.fail("E002", "unterminated string literal (opened here)", open_pos)
            if ch == '"':
                self.pos += 1
                return "".join(chars)
            plain = _PLAIN.match(self.src, self.pos)
            if plain:
                chars.append(plain.group())
                self.pos = plain.end()
            else:
                chars.append(self.parse_char())

    def parse_char(self) -> str:
        ch = self.peek()
        if ch != "\\":
            self.pos += 1
            return ch
        start = self.pos
        esc = self.peek(1)
        if esc in _SIMPLE_ESCAPES:
            self.pos += 2
            return _SIMPLE_ESCAPES[esc]
        if esc in _HEX_ESCAPES:
            width = _HEX_ESCAPES[esc]
            digits = self.src[self.pos + 2 : self.pos + 2 + width]
            if len(digits) != width or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
                raise self.fail("E003", f"\\{esc} needs exactly {width} hex digits", start)
            value = int(digits, 16)
            if value > MAX_CODE_POINT or 0xD800 <= value <= 0xDFFF:
                raise self.fail("E003", f"\\{esc}{digits} is not a Unicode scalar value", start)
            self.pos += 2 + width
            return chr(value)
        shown = repr(esc) if esc else "end of input"
        raise self.fail("E003", f"unknown escape '\\' followed by {shown}", start)

    def parse_class(self, line: int, column: int) -> Expr:
        open_pos = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if not self.peek() or self.peek() in "\r\n":
                raise self.fail("E002", "unterminated character class (opened here)", open_pos)
            item_pos = self.pos
            low = ord(self.parse_char())
            high = low
            if self.peek() == "-" and self.peek(1) not in ("]", "", "\r", "\n"):
                self.pos += 1
                high = ord(self.parse_char())
                if high < low:
                    self.report("E105", f"reversed range {chr(low)!r}-{chr(high)!r} in character class", item_pos)
                    low, high = high, low
            ranges.append((low, high))
        self.pos += 1
        if not ranges:
            self.report("E105", "empty character class matches nothing", open_pos)
        node = CharClass(tuple(ranges), negated, line=line, column=column)
        if negated and not node.code_points():
            self.report("E105", "negated character class excludes every character", open_pos)
        return node

    def parse_token_ref(self, line: int, column: int) -> Expr:
        negated = self.peek() == "!"
        if negated:
            self.pos += 1
        open_pos = self.pos
        end = self.src.find(">", self.pos + 1)
        newline = re.compile(r"[\r\n]").search(self.src, self.pos)
        if end < 0 or (newline and newline.start() < end):
            raise self.fail("E002", "unterminated token reference (opened here)", open_pos)
        inner = self.src[self.pos + 1 : end]
        self.pos = end + 1
        if not inner:
            raise self.fail("E001", "empty token reference '<>'", open_pos)
        id_match = re.fullmatch(r"\[([0-9]+)\]", inner)
        token: int | str = int(id_match.group(1)) if id_match else f"<{inner}>"
        return TokenRef(token, negated, line=line, column=column)
