"""Collects named rules and renders the final grammar.

Rule names follow schema paths (``root-address-street``), made GBNF-safe and unique. When the
grammar is rendered, rules that can never finish (an unsatisfiable recursive definition) are
removed together with every branch that needs them, and unreachable rules are dropped. Rules
given as byte automata (:meth:`GrammarBuilder.give`) are referred to by name and rendered as
comments.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from structspec.budget import check
from structspec.ir.byte_automaton import ByteAutomaton
from structspec.ir.expr import (
    Chars,
    Expr,
    Lit,
    MaybeExpr,
    Ref,
    Rule,
    alt,
    productive,
    rep,
    seq,
    substitute,
)
from structspec.ir.printer import format_rule
from structspec.jsonschema.limits import MAX_GRAMMAR_BYTES, MAX_RULES, too_large

_UNSAFE = re.compile(r"[^A-Za-z0-9]+")
MAX_NAME = 48
MAX_RULE_NAME = 72


def sanitize(text: str) -> str:
    """A readable rule-name fragment for a property or definition name."""
    cleaned = _UNSAFE.sub("-", text).strip("-")
    return cleaned[:MAX_NAME].strip("-") or "x"


class GrammarBuilder:
    """Named rules in definition order; ``root`` is rendered first."""

    def __init__(self) -> None:
        self.rules: dict[str, MaybeExpr] = {}
        self.reserved: set[str] = set()
        self.given: dict[str, ByteAutomaton] = {}
        self.helpers: dict[str, str] = {}  # a helper's fixed name -> the rule it got

    def fresh(self, hint: str) -> str:
        """An unused rule name close to ``hint``."""
        base = "-".join(filter(None, (sanitize(p) for p in hint.split("-")))) or "rule"
        if len(base) > MAX_RULE_NAME:
            head, _, _ = base.partition("-")
            base = f"{head[:16]}-{base[-(MAX_RULE_NAME - 20) :].lstrip('-')}"
        name, n = base, 2
        while name in self.reserved:
            name, n = f"{base}-{n}", n + 1
        self.reserved.add(name)
        return name

    def define(self, name: str, expr: MaybeExpr) -> None:
        if name not in self.rules and len(self.rules) >= MAX_RULES:
            raise too_large(f"the grammar would need more than {MAX_RULES} rules")
        self.reserved.add(name)
        self.rules[name] = expr

    def give(self, name: str, automaton: ByteAutomaton) -> Ref:
        """A rule whose automaton is given rather than written (it must accept something)."""
        self.reserved.add(name)
        self.given[name] = automaton
        return Ref(name)

    def rule(self, hint: str, expr: MaybeExpr) -> MaybeExpr:
        """``expr`` itself when it is short and simple, else a reference to a new rule."""
        if expr is None or _simple(expr):
            return expr
        name = self.fresh(hint)
        self.define(name, expr)
        return Ref(name)

    def helper(self, name: str, make: Callable[[], Expr]) -> Ref:
        """A shared rule of the converter's own (``string``, ``value``, ``ws``...), made once
        by ``make``. It is named ``name`` unless a schema's rule took that name first (a
        definition called ``escape``); then it takes a fresh name, so that neither stands in
        for the other."""
        rule = self.helpers.get(name)
        if rule is None:
            rule = self.helpers[name] = self.fresh(name)
            self.rules[rule] = None  # defined: a helper that refers to itself finds it
            self.rules[rule] = make()
        return Ref(rule)

    def finish(self, root: str = "root") -> tuple[dict[str, Rule], str] | None:
        """The rules reachable from ``root`` (``root`` first, then in definition order) and their
        GBNF text, or ``None`` when ``root`` matches nothing. The rules are what parsing the text
        gives back, up to spelling (a class is a :class:`~structspec.ir.expr.Chars`, not the
        :class:`~structspec.ir.expr.CharClass` written in the text; no positions), so a grammar is
        compiled from them without parsing the text (``Grammar.from_json_schema``); the text is
        printed all the same: it is the grammar's ``source``, and its size is the budget."""
        rules, referred = self._productive()
        if root not in rules:
            return None
        seen = {root}
        pending = [root]
        while pending:  # the rules reachable from the root; given rules are leaves
            refs = referred[pending.pop()]
            seen |= refs & self.given.keys()
            for ref in refs - self.given.keys():
                if ref not in seen:
                    seen.add(ref)
                    pending.append(ref)
        ordered = [root] + [n for n in rules if n in seen and n != root]
        size = 0
        lines = []
        for name in ordered:
            check()
            lines.append(format_rule(name, rules[name].body))
            size += len(lines[-1]) + 1
            if size > MAX_GRAMMAR_BYTES:
                raise too_large(f"the grammar would be larger than {MAX_GRAMMAR_BYTES >> 20} MiB")
        return {name: rules[name] for name in ordered}, "\n".join(lines) + "\n"

    def _productive(self) -> tuple[dict[str, Rule], dict[str, set[str]]]:
        """Rules that derive at least one string, with dead references removed, and the rules
        each of them refers to. (Each is made a :class:`Rule` first: the walk that finds its
        references is kept in it, and the grammar's checks and compiler read it again.)

        A worklist: a rule is checked once, then again only when a rule it refers to turns out
        productive, so the work is linear in the grammar rather than in rules times chain length.
        """
        users: dict[str, list[str]] = {}
        made = {name: Rule(name, expr) for name, expr in self.rules.items() if expr is not None}
        referred = {name: {ref.name for ref in rule.refs} for name, rule in made.items()}
        for name, refs in referred.items():
            for ref in refs:
                users.setdefault(ref, []).append(name)
        alive: set[str] = set(self.given)
        pending = list(made)
        while pending:
            check()
            name = pending.pop()
            if name not in alive and productive(made[name].body, alive):
                alive.add(name)
                pending += [user for user in users.get(name, ()) if user not in alive]

        def keep(ref: Ref) -> MaybeExpr:
            return ref if ref.name in alive else None

        out: dict[str, Rule] = {}
        for name, rule in made.items():
            if name in alive:
                if not referred[name] <= alive:  # rebuilt only when a branch has to go
                    expr = substitute(rule.body, keep)
                    if expr is None:
                        continue
                    rule = Rule(name, expr)
                    referred[name] = {ref.name for ref in rule.refs}
                out[name] = rule
        return out, referred


def _simple(expr: Expr) -> bool:
    if isinstance(expr, Ref):
        return True
    if isinstance(expr, Lit):
        return len(expr.text) <= 24
    return False


CHUNK = 16
SMALL_REPEAT = 32


def counted(builder: GrammarBuilder, item: MaybeExpr, low: int, high: int | None) -> MaybeExpr:
    """``item{low,high}`` written so the engine never has to unroll a big count of a complex
    item: long runs are split into named chunks of :data:`CHUNK` items (exactly the same
    lengths)."""
    if item is None or isinstance(item, (Lit, Chars)) or max(low, high or 0) <= SMALL_REPEAT:
        return rep(item, low, high)
    head = _exactly(builder, item, low)
    if high is None:
        return seq(head, rep(item, 0, None))
    return seq(head, _up_to(builder, item, high - low))


def _chunk(builder: GrammarBuilder, item: Expr) -> Expr:
    base = item.name if isinstance(item, Ref) else "item"
    name = f"{base}-x{CHUNK}"
    if name in builder.rules and builder.rules[name] == rep(item, CHUNK, CHUNK):
        return Ref(name)
    name = builder.fresh(name)
    builder.define(name, rep(item, CHUNK, CHUNK))
    return Ref(name)


def _exactly(builder: GrammarBuilder, item: Expr, count: int) -> MaybeExpr:
    if count <= SMALL_REPEAT:
        return rep(item, count, count)
    chunks, rest = divmod(count, CHUNK)
    return seq(_exactly(builder, _chunk(builder, item), chunks), rep(item, rest, rest))


def _up_to(builder: GrammarBuilder, item: Expr, count: int) -> MaybeExpr:
    """``item{0,count}`` = ``chunk{0,q-1} item{0,CHUNK} | chunk{q} item{0,r}`` (q, r = count
    divided by CHUNK), recursively."""
    if count <= SMALL_REPEAT:
        return rep(item, 0, count)
    chunks, rest = divmod(count, CHUNK)
    chunk = _chunk(builder, item)
    return alt(
        seq(_up_to(builder, chunk, chunks - 1), rep(item, 0, CHUNK)),
        seq(_exactly(builder, chunk, chunks), rep(item, 0, rest)),
    )
