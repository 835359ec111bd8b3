"""The grammar linter: every error and likely mistake in a GBNF source, found in one run.

Errors are the problems that stop :meth:`structspec.Grammar.from_gbnf` (the compiler raises
only the first); warnings flag grammars that load but are probably not what was meant, or
that let a model loop forever. Each finding points at the offending expression.

To keep one mistake from producing a cascade of findings, cross-rule checks run on a
*repaired* rule table: a rule whose definition has a syntax error, or that is never defined,
stands in as "any one character" (so references to it are neither undefined twice over nor
unfinishable), and an empty character class, already reported, counts as a character.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet

from structspec.grammar.compiler import CompileLimitError, compile_rules
from structspec.grammar.gbnf.analysis import (
    is_nullable,
    left_recursion_problems,
    left_references,
    nullable_rules,
    productive_rules,
    productivity_problems,
    reachable_rules,
    reference_problems,
    rule_table,
)
from structspec.grammar.gbnf.diagnostics import ERROR, Diagnostic
from structspec.grammar.gbnf.parser import parse_gbnf
from structspec.ir.charset import ANY
from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Ref, Rep, Rule, Seq, children, walk
from structspec.ir.printer import format_expr

#: the bound suggested for an unbounded whitespace run
WHITESPACE_BOUND = 20


def lint_source(text: str, root: str = "root") -> list[Diagnostic]:
    """All errors and warnings in GBNF ``text`` started from rule ``root``, sorted by position."""
    parsed = parse_gbnf(text)
    table, findings = rule_table(parsed.rules)
    findings += parsed.diagnostics
    model = {name: _stand_in(name) for name in parsed.failed_rules}
    model.update({name: _repaired(rule) for name, rule in table.items()})
    findings += reference_problems(model, root)
    missing = dict.fromkeys(ref.name for rule in model.values() for ref in rule.refs if ref.name not in model)
    model.update({name: _stand_in(name) for name in missing})
    unknown = model.keys() - table.keys()
    findings += _left_recursion(model)
    findings += _never_finishing(model, table)
    if not any(finding.severity == ERROR for finding in findings):
        findings += _compile_limits(table, root)
    nullable = nullable_rules(model)
    findings += _unused_rules(model, table, root, unknown)
    findings += _nullable_loops(table, nullable)
    findings += _duplicate_alternatives(table)
    findings += _overlapping_ranges(table)
    findings += _empty_sentence(table, root, nullable)
    findings += _whitespace_runs(table)
    return sorted(set(findings), key=lambda d: (d.line, d.column, d.code, d.message))


# -- the repaired table -----------------------------------------------------------------------
def _stand_in(name: str) -> Rule:
    return Rule(name, Chars(ANY))


def _repaired(rule: Rule) -> Rule:
    return dataclasses.replace(rule, body=_without_empty_classes(rule.body))


def _without_empty_classes(node: Expr) -> Expr:
    if isinstance(node, CharClass) and not node.code_points():
        return Chars(ANY, line=node.line, column=node.column)
    if isinstance(node, (Seq, Alt)):
        return dataclasses.replace(node, items=tuple(map(_without_empty_classes, node.items)))
    if isinstance(node, Rep):
        return dataclasses.replace(node, item=_without_empty_classes(node.item))
    return node


def _at(finding: Diagnostic, node: Expr) -> Diagnostic:
    return dataclasses.replace(finding, line=node.line, column=node.column)


def _rule_at(model: Mapping[str, Rule], finding: Diagnostic) -> Rule:
    return next(rule for rule in model.values() if (rule.line, rule.column) == (finding.line, finding.column))


# -- errors -------------------------------------------------------------------------------------
def _left_recursion(model: Mapping[str, Rule]) -> list[Diagnostic]:
    """E104, pointing at the reference that starts the cycle."""
    nullable = nullable_rules(model)
    refs = {name: left_references(rule.body, nullable) for name, rule in model.items()}
    edges = {name: {ref.name for ref in name_refs} for name, name_refs in refs.items()}
    found = []
    for problem in left_recursion_problems(model):
        rule = _rule_at(model, problem)
        ref = next(ref for ref in refs[rule.name] if rule.name in _reachable(ref.name, edges))
        found.append(_at(problem, ref))
    return found


def _never_finishing(model: Mapping[str, Rule], table: Mapping[str, Rule]) -> list[Diagnostic]:
    """E107, pointing at the first reference to a rule that can never finish."""
    productive = productive_rules(model)
    found = []
    for problem in productivity_problems(model, table):
        rule = _rule_at(model, problem)
        ref = next(n for n in rule.refs if n.name not in productive)
        found.append(_at(problem, ref))
    return found


def _compile_limits(table: Mapping[str, Rule], root: str) -> list[Diagnostic]:
    """E108 when an otherwise valid grammar is too large to compile."""
    try:
        compile_rules(table, root)
    except CompileLimitError as exc:
        return [exc.diagnostic]
    return []


# -- warnings -----------------------------------------------------------------------------------
def _unused_rules(
    model: Mapping[str, Rule], table: Mapping[str, Rule], root: str, unknown: AbstractSet[str]
) -> list[Diagnostic]:
    """W201; skipped when what is reachable is unknown: no start rule, or a reachable rule that
    is undefined or failed to parse (whatever it was meant to use would look unused)."""
    if root not in model:
        return []
    reachable = reachable_rules(model, root)
    if reachable & unknown:
        return []
    used = {ref.name for name, rule in table.items() for ref in rule.refs if ref.name != name}
    found = []
    for name, rule in table.items():
        if name not in reachable:
            why = f"is not reachable from {root!r}" if name in used else "is never used"
            found.append(Diagnostic("W201", f"rule {name!r} {why}", rule.line, rule.column))
    return found


def _nullable_loops(table: Mapping[str, Rule], nullable: set[str]) -> list[Diagnostic]:
    """W202: ``(x?)*`` and the like, where each round of the loop may consume nothing."""
    return [
        Diagnostic(
            "W202",
            f"`{_text(node)}` repeats an expression that can match the empty string, "
            "so the repetition may loop without consuming input; make the repeated part non-empty",
            node.line,
            node.column,
        )
        for node in _nodes(table)
        if isinstance(node, Rep) and node.high is None and is_nullable(node.item, nullable)
    ]


def _duplicate_alternatives(table: Mapping[str, Rule]) -> list[Diagnostic]:
    """W203: the same alternative twice in one choice."""
    found = []
    for node in _nodes(table):
        if isinstance(node, Alt):
            first: dict[str, Expr] = {}
            for alt in node.items:
                text = _text(alt)
                if text in first:
                    earlier = first[text]
                    message = f"duplicate alternative `{text}` (already at {earlier.line}:{earlier.column})"
                    found.append(Diagnostic("W203", message, alt.line, alt.column))
                else:
                    first[text] = alt
    return found


def _overlapping_ranges(table: Mapping[str, Rule]) -> list[Diagnostic]:
    """W204: a character class listing some character twice, e.g. ``[a-zc]``."""
    found = []
    for node in _nodes(table):
        if isinstance(node, CharClass):
            pairs = []
            widest: tuple[int, int] | None = None
            for low, high in sorted(node.ranges, key=lambda r: (r[0], -r[1])):
                if widest is not None and low <= widest[1]:
                    pairs.append(f"`{_show_range(low, high)}` overlaps `{_show_range(*widest)}`")
                if widest is None or high > widest[1]:
                    widest = (low, high)
            if pairs:
                message = f"character class `{_text(node)}`: {'; '.join(pairs)}"
                found.append(Diagnostic("W204", message, node.line, node.column))
    return found


def _show_range(low: int, high: int) -> str:
    return _text(CharClass(((low, high),)))[1:-1]


def _empty_sentence(table: Mapping[str, Rule], root: str, nullable: set[str]) -> list[Diagnostic]:
    """W205: the start rule matches the empty string."""
    if root not in nullable or root not in table:
        return []
    body = table[root].body
    message = f"the grammar accepts the empty string: rule {root!r} can finish without any input"
    return [Diagnostic("W205", message, body.line, body.column)]


def _whitespace_runs(table: Mapping[str, Rule]) -> list[Diagnostic]:
    """W206: whitespace repeated without a bound, by ``*``/``+``/``{m,}`` or by recursion."""
    spaces = _whitespace_rules(table)
    found = []
    for node in _nodes(table):
        if isinstance(node, Rep) and node.high is None and _is_whitespace(node.item, spaces):
            bounded = dataclasses.replace(node, high=max(node.low, WHITESPACE_BOUND))
            message = (f"`{_text(node)}` allows unbounded whitespace, so a model can emit it forever; "
                       f"bound it, e.g. `{_text(bounded)}`")
            found.append(Diagnostic("W206", message, node.line, node.column))
    edges = {name: {ref.name for ref in table[name].refs} for name in spaces}
    for name in spaces:
        ref = next((ref for ref in table[name].refs if name in _reachable(ref.name, edges)), None)
        if ref is not None:
            message = (f"rule {name!r} repeats whitespace through recursion with no bound, so a model can emit "
                       f"it forever; use a bounded repetition, e.g. `[ \\t\\n]{{0,{WHITESPACE_BOUND}}}`")
            found.append(Diagnostic("W206", message, ref.line, ref.column))
    return found


def _reachable(start: str, edges: Mapping[str, set[str]]) -> set[str]:
    """The names reachable from ``start`` along ``edges`` (``start`` included)."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges[name])
    return seen


def _whitespace_rules(table: Mapping[str, Rule]) -> set[str]:
    """Rules that match only whitespace (greatest fixpoint, so recursive ones count)."""
    spaces = set(table)
    changed = True
    while changed:
        changed = False
        for name in list(spaces):
            if not _is_whitespace(table[name].body, spaces):
                spaces.discard(name)
                changed = True
    return spaces


def _is_whitespace(node: Expr, spaces: set[str]) -> bool:
    """Whether ``node`` matches some whitespace and nothing but whitespace (or the empty string)."""
    if isinstance(node, Lit):
        return node.text != "" and node.text.isspace()
    if isinstance(node, CharClass):
        points = node.code_points()
        return bool(points) and not node.negated and all(_all_space(low, high) for low, high in points)
    if isinstance(node, Ref):
        return node.name in spaces
    if isinstance(node, Rep):
        return node.high != 0 and _is_whitespace(node.item, spaces)
    if isinstance(node, (Seq, Alt)):
        parts = [part for part in children(node) if not _is_empty(part)]
        return bool(parts) and all(_is_whitespace(part, spaces) for part in parts)
    return False


def _is_empty(node: Expr) -> bool:
    return (isinstance(node, Lit) and node.text == "") or (isinstance(node, Seq) and not node.items)


def _all_space(low: int, high: int) -> bool:
    return all(chr(code).isspace() for code in range(low, high + 1))


def _text(expr: Expr) -> str:
    """An expression as GBNF, Unicode kept as written."""
    return format_expr(expr, ascii_only=False)


def _nodes(table: Mapping[str, Rule]) -> Iterator[Expr]:
    for rule in table.values():
        yield from walk(rule.body)
