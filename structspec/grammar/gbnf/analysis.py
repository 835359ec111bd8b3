"""Cross-rule checks on a parsed grammar: definitions, reachability, nullability, left
recursion and productivity. The compiler stops at the first error these report; the linter
lists them all.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping

from structspec.grammar.gbnf.diagnostics import Diagnostic
from structspec.ir.expr import Alt, Expr, Lit, Ref, Rep, Rule, Seq, derives, productive


def rule_table(rules: Iterable[Rule]) -> tuple[dict[str, Rule], list[Diagnostic]]:
    """Map names to their first definition; report later definitions of the same name."""
    table: dict[str, Rule] = {}
    problems = []
    for rule in rules:
        if rule.name in table:
            first = table[rule.name]
            problems.append(
                Diagnostic(
                    "E103",
                    f"rule {rule.name!r} is already defined at line {first.line}",
                    rule.line,
                    rule.column,
                )
            )
        else:
            table[rule.name] = rule
    return table, problems


def reference_problems(table: Mapping[str, Rule], root: str) -> list[Diagnostic]:
    """Undefined rules (with a did-you-mean) and a missing start rule."""
    problems = []
    if root not in table:
        hint = _did_you_mean(root, table)
        problems.append(Diagnostic("E102", f"the grammar has no {root!r} rule to start from{hint}", 1, 1))
    for rule in table.values():
        for node in rule.refs:
            if node.name not in table:
                hint = _did_you_mean(node.name, table)
                problems.append(
                    Diagnostic("E101", f"undefined rule {node.name!r}{hint}", node.line, node.column)
                )
    return problems


def _did_you_mean(name: str, table: Mapping[str, Rule]) -> str:
    close = difflib.get_close_matches(name, list(table), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def reachable_rules(table: Mapping[str, Rule], root: str) -> set[str]:
    """Names of the rules reachable from ``root`` (defined ones only)."""
    seen: set[str] = set()
    todo = [root] if root in table else []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in table[name].refs:
            if node.name in table:
                todo.append(node.name)
    return seen


def nullable_rules(table: Mapping[str, Rule]) -> set[str]:
    """Rules that can match the empty string (least fixpoint)."""
    return _least_fixpoint(table, is_nullable)


def _least_fixpoint(table: Mapping[str, Rule], holds: Callable[[Expr, set[str]], bool]) -> set[str]:
    """The rules whose body ``holds`` given the rules found so far, found by a worklist: a rule
    is checked again only when a rule it refers to is found, so a chain of n rules costs n
    checks, not n passes over the table."""
    users: dict[str, set[str]] = {}
    for name, rule in table.items():
        for node in rule.refs:
            users.setdefault(node.name, set()).add(name)
    found: set[str] = set()
    pending = list(table)
    while pending:
        name = pending.pop()
        if name not in found and holds(table[name].body, found):
            found.add(name)
            pending += [user for user in users.get(name, ()) if user not in found]
    return found


def is_nullable(node: Expr, nullable: set[str]) -> bool:
    """Whether an expression can match the empty string, given the nullable rules."""
    return derives(node, nullable, _empty)


def _empty(leaf: Expr) -> bool:
    return isinstance(leaf, Lit) and leaf.text == ""  # characters, classes, tokens: never


def left_references(node: Expr, nullable: set[str]) -> list[Ref]:
    """Rule references that can be reached before any input is consumed."""
    if isinstance(node, Ref):
        return [node]
    if isinstance(node, Seq):
        refs: list[Ref] = []
        for item in node.items:
            refs.extend(left_references(item, nullable))
            if not is_nullable(item, nullable):
                break
        return refs
    if isinstance(node, Alt):
        return [ref for alt in node.items for ref in left_references(alt, nullable)]
    if isinstance(node, Rep):
        return left_references(node.item, nullable) if node.high != 0 else []
    return []


def left_recursion_problems(table: Mapping[str, Rule]) -> list[Diagnostic]:
    """One E104 per left-recursive cycle, naming the rules along it."""
    nullable = nullable_rules(table)
    edges = {
        name: [ref for ref in left_references(rule.body, nullable) if ref.name in table]
        for name, rule in table.items()
    }
    problems = []
    reported: set[frozenset[str]] = set()
    candidates = _near_cycles(edges)
    for start in table:
        cycle = _find_cycle(start, edges) if start in candidates else None
        if cycle is not None:
            candidates -= set(cycle)  # one report per rule on a cycle: n searches, not n per cycle
        if cycle is None or frozenset(cycle) in reported:
            continue
        reported.add(frozenset(cycle))
        rule = table[cycle[0]]
        path = " -> ".join([*cycle, cycle[0]])
        via = " (through a prefix that can be empty)" if _through_nullable(cycle, table, nullable) else ""
        problems.append(
            Diagnostic("E104", f"left recursion: {path}{via}; rewrite it with repetition or right recursion",
                       rule.line, rule.column)
        )
    return problems


def _near_cycles(edges: Mapping[str, list[Ref]]) -> set[str]:
    """The rules that some cycle reaches and that reach some cycle (every rule on a cycle is
    one): what is left after repeatedly removing rules with no edge in, then no edge out."""
    targets = {name: {ref.name for ref in refs} for name, refs in edges.items()}
    sources: dict[str, set[str]] = {name: set() for name in edges}
    for name, outs in targets.items():
        for other in outs:
            sources[other].add(name)
    left = set(edges)
    for ins, outs in ((sources, targets), (targets, sources)):
        count = {name: len(ins[name] & left) for name in left}
        pending = [name for name in left if not count[name]]
        while pending:
            name = pending.pop()
            left.discard(name)
            for other in outs[name] & left:
                count[other] -= 1
                if not count[other]:
                    pending.append(other)
    return left


def _find_cycle(start: str, edges: Mapping[str, list[Ref]]) -> list[str] | None:
    """The shortest cycle through ``start`` in the left-reference graph, if any."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for name in frontier:
            for ref in edges[name]:
                if ref.name == start:
                    path = [name]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return list(reversed(path))
                if ref.name not in parents:
                    parents[ref.name] = name
                    following.append(ref.name)
        frontier = following
    return None


def _through_nullable(cycle: list[str], table: Mapping[str, Rule], nullable: set[str]) -> bool:
    """Whether some step of the cycle skips over an expression that can be empty."""
    return any(
        cycle[(i + 1) % len(cycle)] not in _first_item_refs(table[name].body)
        for i, name in enumerate(cycle)
    )


def _first_item_refs(node: Expr) -> set[str]:
    """Rules referenced in first position, skipping nothing."""
    if isinstance(node, Ref):
        return {node.name}
    if isinstance(node, Seq):
        return _first_item_refs(node.items[0]) if node.items else set()
    if isinstance(node, Alt):
        return set().union(*(_first_item_refs(alt) for alt in node.items))
    if isinstance(node, Rep):
        return _first_item_refs(node.item)
    return set()


def productive_rules(table: Mapping[str, Rule]) -> set[str]:
    """Rules with at least one finite derivation (least fixpoint)."""
    return _least_fixpoint(table, productive)


def productivity_problems(table: Mapping[str, Rule], names: Iterable[str]) -> list[Diagnostic]:
    """E107 for each of ``names`` that can never finish, naming the rules that keep it going."""
    finishing = productive_rules(table)
    problems = []
    for name in names:
        if name in table and name not in finishing:
            stuck = sorted({n.name for n in table[name].refs if n.name not in finishing})
            via = f" (it always needs {', '.join(map(repr, stuck))})" if stuck else ""
            problems.append(Diagnostic(
                "E107", f"rule {name!r} can never finish: it has no finite derivation{via}",
                table[name].line, table[name].column))
    return problems


def grammar_errors(rules: Iterable[Rule], root: str) -> list[Diagnostic]:
    """All cross-rule errors, in a stable order (the compiler raises the first)."""
    table, problems = rule_table(rules)
    problems += reference_problems(table, root)
    if any(p.code in ("E101", "E102") for p in problems):
        return problems
    problems += left_recursion_problems(table)
    problems += productivity_problems(table, table)
    return problems
