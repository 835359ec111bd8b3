"""Regular expressions (the ECMAScript subset JSON Schema uses) as GBNF.

Two entry points:

* :func:`regex_to_gbnf` turns a pattern into a whole grammar whose ``root`` matches exactly
  the strings the pattern matches *in full* (as if wrapped in ``^...$``); :func:`regex_rules`
  gives its rule table as well, for ``Grammar.from_regex``.
* :func:`pattern_language` gives the language of a JSON Schema ``pattern`` (unanchored:
  the string only has to *contain* a match, unless ``^``/``$`` say otherwise) either as an
  anchor-free expression or, when anchors sit inside the pattern, as a DFA. The JSON Schema
  converter maps its characters to their JSON spellings.

Unsupported features raise :class:`~structspec.regex.parse.RegexError` (a ``ValueError``)
naming the position.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from structspec.ir.automaton import DFA, complement, dfa_from_regex, emit_dfa
from structspec.ir.charset import ANY, CharSet
from structspec.ir.expr import (
    Alt,
    Anchor,
    Chars,
    Expr,
    Lit,
    MaybeExpr,
    Rep,
    Rule,
    Seq,
    alt,
    chars,
    length_range,
    rep,
    seq,
)
from structspec.ir.printer import format_rule
from structspec.regex.parse import RegexError, parse_regex

__all__ = [
    "PatternLanguage",
    "RegexError",
    "pattern_language",
    "regex_rules",
    "regex_to_gbnf",
    "single_repeat",
]


@dataclass(frozen=True)
class PatternLanguage:
    """The set of strings a pattern accepts.

    ``expr`` is an anchor-free expression for it when one exists (the usual case: anchors only
    at the ends); otherwise ``expr`` is ``None`` and :meth:`dfa` must be used. ``empty`` is
    true when nothing matches.
    """

    ast: Expr | None
    search: bool
    expr: Expr | None
    empty: bool

    @functools.cached_property
    def dfa_cached(self) -> DFA:
        return dfa_from_regex(self.ast, search=self.search)

    def dfa(self) -> DFA:
        """The language as a minimal DFA (computed once per pattern)."""
        return self.dfa_cached

    @functools.cached_property
    def complement_dfa(self) -> DFA:
        """The strings the pattern rejects, as a minimal DFA (computed once per pattern)."""
        return complement(self.dfa())


@functools.lru_cache(maxsize=512)
def pattern_language(pattern: str, *, search: bool = True) -> PatternLanguage:
    """Parse ``pattern``; ``search=True`` is JSON Schema's unanchored semantics."""
    ast = parse_regex(pattern)
    if ast is None:
        return PatternLanguage(None, search, None, True)
    return PatternLanguage(ast, search, _strip_anchors(ast, search), False)


def regex_to_gbnf(pattern: str) -> str:
    """A GBNF grammar whose ``root`` matches exactly the strings ``pattern`` fully matches."""
    return regex_rules(pattern)[1]


def regex_rules(pattern: str) -> tuple[dict[str, Rule], str]:
    """:func:`regex_to_gbnf`'s rules (``root`` first; what parsing the text gives, up to
    spelling: a class is a :class:`~structspec.ir.expr.Chars`) and its text, so that
    ``Grammar.from_regex`` compiles the rules without parsing the text."""
    language = pattern_language(pattern, search=False)
    sink = _Rules()
    body: MaybeExpr = None
    if not language.empty:
        body = language.expr
        if body is None:
            body = emit_dfa(language.dfa(), chars, sink, "root")
    if body is None:
        raise RegexError("pattern matches nothing", pattern, 0)
    rules = {"root": body, **sink.rules}
    text = "\n".join(format_rule(name, expr) for name, expr in rules.items()) + "\n"
    return {name: Rule(name, expr) for name, expr in rules.items()}, text


class _Rules:
    """Collects the state rules of an automaton emitted for :func:`regex_to_gbnf`."""

    def __init__(self) -> None:
        self.rules: dict[str, Expr] = {}

    def fresh(self, hint: str) -> str:
        return hint

    def define(self, name: str, expr: Expr) -> None:
        self.rules[name] = expr


# -- anchors ---------------------------------------------------------------------------------


class _InnerAnchor(Exception):
    """An anchor sits somewhere an expression cannot express; use the automaton."""


def _strip_anchors(ast: Expr, search: bool) -> Expr | None:
    """An anchor-free expression for ``ast`` (``search``: unanchored), or ``None`` when an
    anchor is not at the very start or end of a top-level branch."""
    anything = rep(chars(ANY), 0, None)
    branches = ast.items if isinstance(ast, Alt) else (ast,)
    out: list[MaybeExpr] = []
    try:
        for branch in branches:
            items = list(branch.items) if isinstance(branch, Seq) else [branch]
            starts = ends = False
            while items and isinstance(items[0], Anchor) and items[0].start:
                items.pop(0)
                starts = True
            while items and isinstance(items[-1], Anchor) and not items[-1].start:
                items.pop()
                ends = True
            for item in items:
                _check_no_anchor(item)
            if search and items and not starts:
                items[0] = _shortest_edge(items[0])
            if search and items and not ends:
                items[-1] = _shortest_edge(items[-1])
            core = seq(*items)
            if not search:
                out.append(core)
            elif core is not None and (not starts or not ends) and _nullable(core):
                out.append(anything)  # an empty match at a free end: every string matches
            else:
                out.append(seq(Lit("") if starts else anything, core, Lit("") if ends else anything))
    except _InnerAnchor:
        return None
    return alt(*out)


def _shortest_edge(expr: Expr) -> Expr:
    """At a free end of an unanchored pattern ``x{2,}`` matches where ``x{2}`` does."""
    if isinstance(expr, Rep) and expr.low >= 1:
        return rep(expr.item, expr.low, expr.low) or expr
    return expr


def _nullable(expr: Expr) -> bool:
    return length_range(expr)[0] == 0


def _check_no_anchor(expr: Expr) -> None:
    if isinstance(expr, Anchor):
        raise _InnerAnchor
    if isinstance(expr, (Seq, Alt)):
        for item in expr.items:
            _check_no_anchor(item)
    elif isinstance(expr, Rep):
        _check_no_anchor(expr.item)


def single_repeat(
    expr: Expr,
) -> tuple[list[Expr], int, CharSet, int, int | None, list[Expr]] | None:
    """Split ``expr`` as ``prefix C{lo,hi} suffix`` with fixed-length prefix and suffix and a
    single character class ``C`` as the only variable part; ``None`` when it has another shape."""
    items = list(expr.items) if isinstance(expr, Seq) else [expr]
    variable = [i for i, item in enumerate(items) if _is_variable(item)]
    if len(variable) != 1:
        return None
    index = variable[0]
    node = items[index]
    if not isinstance(node, Rep):
        return None
    inner = node.item
    if isinstance(inner, Lit) and len(inner.text) == 1:
        charset = CharSet.chars(inner.text)
    elif isinstance(inner, Chars):
        charset = inner.charset
    else:
        return None
    fixed = sum(length_range(item)[0] for i, item in enumerate(items) if i != index)
    return items[:index], fixed, charset, node.low, node.high, items[index + 1 :]


def _is_variable(expr: Expr) -> bool:
    low, high = length_range(expr)
    return high != low
