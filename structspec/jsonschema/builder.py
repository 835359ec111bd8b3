"""Collects named rules and renders the final grammar.

Rule names follow schema paths (``root-address-street``), made GBNF-safe and unique. When the
grammar is rendered, rules that can never finish (an unsatisfiable recursive definition) are
removed together with every branch that needs them, and unreachable rules are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from structspec.regex_expr import (
    Alt,
    Chars,
    Expr,
    Lit,
    MaybeExpr,
    Ref,
    Rep,
    Seq,
    alt,
    format_rule,
    references,
    rep,
    seq,
    substitute,
)

_UNSAFE = re.compile(r"[^A-Za-z0-9]+")
MAX_NAME = 48


def sanitize(text: str) -> str:
    """A readable rule-name fragment for a property or definition name."""
    cleaned = _UNSAFE.sub("-", text).strip("-")
    return cleaned[:MAX_NAME].strip("-") or "x"


class GrammarBuilder:
    """Named rules in definition order; ``root`` is rendered first."""

    def __init__(self) -> None:
        self.rules: dict[str, MaybeExpr] = {}
        self.reserved: set[str] = set()

    def fresh(self, hint: str) -> str:
        """An unused rule name close to ``hint``."""
        base = "-".join(filter(None, (sanitize(p) for p in hint.split("-")))) or "rule"
        name, n = base, 2
        while name in self.reserved:
            name, n = f"{base}-{n}", n + 1
        self.reserved.add(name)
        return name

    def define(self, name: str, expr: MaybeExpr) -> None:
        self.reserved.add(name)
        self.rules[name] = expr

    def rule(self, hint: str, expr: MaybeExpr) -> MaybeExpr:
        """``expr`` itself when it is short and simple, else a reference to a new rule."""
        if expr is None or _simple(expr):
            return expr
        name = self.fresh(hint)
        self.define(name, expr)
        return Ref(name)

    def helper(self, name: str, make: Callable[[], Expr]) -> Ref:
        """A shared rule with a fixed name (``string``, ``value``, ``ws``...), defined once."""
        if name not in self.rules:
            self.reserved.add(name)
            self.rules[name] = None
            self.rules[name] = make()
        return Ref(name)

    def render(self, root: str = "root") -> str | None:
        """The grammar text, or ``None`` when ``root`` matches nothing."""
        rules = self._productive()
        if root not in rules:
            return None
        order = [root]
        seen = {root}
        for name in order:
            for ref in sorted(references(rules[name]), key=list(rules).index):
                if ref not in seen:
                    seen.add(ref)
                    order.append(ref)
        ordered = [root] + [n for n in rules if n in seen and n != root]
        return "\n".join(format_rule(n, rules[n]) for n in ordered) + "\n"

    def _productive(self) -> dict[str, Expr]:
        """Rules that derive at least one string, with dead references removed."""
        alive: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, expr in self.rules.items():
                if name not in alive and expr is not None and _derives(expr, alive):
                    alive.add(name)
                    changed = True

        def keep(ref: Ref) -> MaybeExpr:
            return ref if ref.name in alive else None

        out: dict[str, Expr] = {}
        for name in self.rules:
            if name in alive:
                expr = substitute(self.rules[name], keep)
                if expr is not None:
                    out[name] = expr
        return out


def _derives(expr: Expr, alive: set[str]) -> bool:
    if isinstance(expr, Ref):
        return expr.name in alive
    if isinstance(expr, (Lit, Chars)):
        return True
    if isinstance(expr, Rep):
        return expr.low == 0 or _derives(expr.item, alive)
    if isinstance(expr, Seq):
        return all(_derives(i, alive) for i in expr.items)
    if isinstance(expr, Alt):
        return any(_derives(i, alive) for i in expr.items)
    return False


def _simple(expr: Expr) -> bool:
    if isinstance(expr, Ref):
        return True
    if isinstance(expr, Lit):
        return len(expr.text) <= 24
    return False


def emit_graph(
    edges: dict[object, list[tuple[MaybeExpr, object]]],
    accept: set[object],
    start: object,
    sink: GrammarBuilder,
    base: str,
) -> MaybeExpr:
    """GBNF for a graph whose edges are labelled with expressions (a "regular" structure).

    States entered from several places become rules named after ``base``; the others are
    inlined into their only predecessor. Parallel edges are merged into one alternation.
    """
    merged: dict[object, dict[object, MaybeExpr]] = {}
    for state, out in edges.items():
        targets: dict[object, MaybeExpr] = {}
        for label, target in out:
            if label is None:
                continue
            targets[target] = alt(targets[target], label) if target in targets else label
        merged[state] = targets
    indegree: dict[object, int] = {}
    for state, targets in merged.items():
        for target in targets:
            if target != state:
                indegree[target] = indegree.get(target, 0) + 1
    named = [
        s
        for s in merged
        if (indegree.get(s, 0) >= 2 and merged[s]) or (s == start and indegree.get(s, 0))
    ]
    names = {s: sink.fresh(f"{base}-{i + 1}") for i, s in enumerate(named)}
    bodies: dict[object, MaybeExpr] = {
        s: (Lit("") if s in accept else None) for s, targets in merged.items() if not targets
    }
    order: list[object] = []
    seen = {start, *names}
    stack = [start, *names]
    while stack:
        state = stack.pop()
        order.append(state)
        for target in merged.get(state, {}):
            if target not in seen and target not in names:
                seen.add(target)
                stack.append(target)
    for state in reversed(order):
        if not merged.get(state) and state not in names:
            continue
        loop = None
        branches: list[MaybeExpr] = [Lit("")] if state in accept else []
        for target, label in merged.get(state, {}).items():
            if target == state:
                loop = label
                continue
            branches.append(seq(label, Ref(names[target]) if target in names else bodies[target]))
        bodies[state] = seq(rep(loop, 0, None), alt(*branches))
    for state, name in names.items():
        sink.define(name, bodies[state])
    return Ref(names[start]) if start in names else bodies[start]
