"""Compile parsed GBNF rules into a :class:`~structspec.ruleset.RuleSet`.

Steps: pick which rules to inline (small and non-recursive), build one epsilon-NFA per
remaining rule with byte-range, rule-reference and token-reference edges (character classes
become UTF-8 byte-range sequences), then determinize each with the subset construction.
Size limits keep pathological grammars from exhausting memory; past them compilation fails
with ``E108`` naming the rule.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from structspec.gbnf.ast import (
    AnyChar,
    CharClass,
    Choice,
    Literal,
    Node,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    TokenRef,
    walk,
)
from structspec.gbnf.diagnostics import Diagnostic
from structspec.ruleset import RuleSet
from structspec.utf8 import utf8_sequences

INLINE_LIMIT = 400  # estimated NFA states up to which a non-recursive rule is inlined
NFA_LIMIT = 400_000  # NFA states per rule
DFA_LIMIT = 100_000  # DFA states per rule
_ANY = ((0, 0x10FFFF),)


class CompileLimitError(Exception):
    """Raised with the diagnostic to report when a rule exceeds a size limit."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def compile_rules(table: Mapping[str, Rule], root: str) -> RuleSet:
    """Compile the rules reachable from ``root``; ``table`` must be free of analysis errors."""
    order = _reachable_in_order(table, root)
    inline = _inlinable(table, order, {name: _refs(table, name) for name in order})
    compiled = [name for name in order if name not in inline or name == root]
    index = {name: i for i, name in enumerate(compiled)}
    token_refs: list[TokenRef] = []
    token_index: dict[tuple[int | str, bool], int] = {}
    dfas = []
    for name in compiled:
        nfa = _NFA(table, inline, index, token_refs, token_index, name)
        start, end = nfa.new_state(), nfa.new_state()
        nfa.build(table[name].body, start, end)
        dfas.append(_determinize(nfa, start, end, table[name]))
    return _assemble(compiled, dfas, index[root], tuple(token_refs))


def _reachable_in_order(table: Mapping[str, Rule], root: str) -> list[str]:
    order, seen, todo = [], set(), [root]
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        order.append(name)
        todo.extend(n.name for n in walk(table[name].body) if isinstance(n, RuleRef))
    return order


def _inlinable(table: Mapping[str, Rule], names: list[str], graph: Mapping[str, set[str]]) -> set[str]:
    """Non-recursive rules whose inlined size stays small (``graph``: each rule's references)."""
    recursive = _recursive_rules(graph, names)
    estimates: dict[str, int] = {}
    inline: set[str] = set()

    def estimate(node: Node) -> int:
        if isinstance(node, Literal):
            return len(node.text.encode("utf-8")) + 1
        if isinstance(node, (CharClass, AnyChar)):
            ranges = node.code_points() if isinstance(node, CharClass) else _ANY
            return sum(len(seq) for seq in utf8_sequences(ranges)) + 1
        if isinstance(node, RuleRef):
            return rule_estimate(node.name) if node.name in inline else 1
        if isinstance(node, TokenRef):
            return 1
        if isinstance(node, Sequence):
            return sum(estimate(child) for child in node.items) + 2
        if isinstance(node, Choice):
            return sum(estimate(child) for child in node.alternatives) + 2
        assert isinstance(node, Repeat)
        copies = max(node.min, 1) if node.max is None else max(node.max, 1)
        return estimate(node.item) * copies + 2

    def rule_estimate(name: str) -> int:
        if name not in estimates:
            estimates[name] = estimate(table[name].body)
        return estimates[name]

    callers: dict[str, int] = {}
    for name in names:
        for node in walk(table[name].body):
            if isinstance(node, RuleRef):
                callers[node.name] = callers.get(node.name, 0) + 1

    def shared_loop(name: str) -> bool:
        return callers.get(name, 0) > 1 and any(
            isinstance(node, Repeat) and node.max is None for node in walk(table[name].body)
        )

    # Leaves first, so a rule's estimate already knows which of its callees are inlined.
    for name in reversed(_topological(graph, names)):
        if name not in recursive and rule_estimate(name) <= INLINE_LIMIT and not shared_loop(name):
            inline.add(name)
    return inline


def _refs(table: Mapping[str, Rule], name: str) -> set[str]:
    return {n.name for n in walk(table[name].body) if isinstance(n, RuleRef)}


def _recursive_rules(graph: Mapping[str, set[str]], names: list[str]) -> set[str]:
    """Rules that can reach themselves through references: the members of strongly connected
    components with a cycle (Tarjan's algorithm, iterative, linear in rules + references)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    recursive: set[str] = set()
    for root in names:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while not component or component[-1] != node:
                    component.append(stack.pop())
                    on_stack.discard(component[-1])
                if len(component) > 1 or node in graph[node]:
                    recursive.update(component)
    return recursive


def _topological(graph: Mapping[str, set[str]], names: list[str]) -> list[str]:
    """Callers before callees (cycles broken arbitrarily)."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str) -> None:
        stack = [(name, iter(sorted(graph[name])))]
        state[name] = 1
        while stack:
            current, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                state[current] = 2
                order.append(current)
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(sorted(graph[child]))))

    for name in names:
        if name not in state:
            visit(name)
    return list(reversed(order))


class _NFA:
    """An epsilon-NFA for one rule; symbol edges carry rule indexes (>= 0) or ~token index."""

    def __init__(self, table, inline, index, token_refs, token_index, rule_name) -> None:
        self.table = table
        self.inline = inline
        self.index = index
        self.token_refs = token_refs
        self.token_index = token_index
        self.rule = table[rule_name]
        self.eps: list[list[int]] = []
        self.byte_edges: list[list[tuple[int, int]]] = []
        self.sym_edges: list[list[tuple[int, int]]] = []

    def new_state(self) -> int:
        if len(self.eps) >= NFA_LIMIT:
            raise CompileLimitError(
                Diagnostic("E108", f"rule {self.rule.name!r} expands to more than {NFA_LIMIT} automaton "
                           "states; split it into smaller rules or lower repetition counts",
                           self.rule.line, self.rule.column)
            )
        self.eps.append([])
        self.byte_edges.append([])
        self.sym_edges.append([])
        return len(self.eps) - 1

    def build(self, node: Node, start: int, end: int) -> None:
        """Add edges so that ``node`` leads from ``start`` to ``end``."""
        if isinstance(node, Literal):
            self._chain(start, end, [(1 << b,) for b in node.text.encode("utf-8")])
        elif isinstance(node, (CharClass, AnyChar)):
            ranges = node.code_points() if isinstance(node, CharClass) else _ANY
            for seq in utf8_sequences(ranges):
                self._chain(start, end, [(_range_mask(lo, hi),) for lo, hi in seq])
        elif isinstance(node, RuleRef):
            if node.name in self.inline:
                self.build(self.table[node.name].body, start, end)
            else:
                self.sym_edges[start].append((self.index[node.name], end))
        elif isinstance(node, TokenRef):
            key = (node.token, node.negated)
            if key not in self.token_index:
                self.token_index[key] = len(self.token_refs)
                self.token_refs.append(node)
            self.sym_edges[start].append((~self.token_index[key], end))
        elif isinstance(node, Sequence):
            current = start
            for i, item in enumerate(node.items):
                following = end if i == len(node.items) - 1 else self.new_state()
                self.build(item, current, following)
                current = following
            if not node.items:
                self.eps[start].append(end)
        elif isinstance(node, Choice):
            for alt in node.alternatives:
                self.build(alt, start, end)
        else:
            assert isinstance(node, Repeat)
            self._repeat(node, start, end)

    def _chain(self, start: int, end: int, masks: list[tuple[int]]) -> None:
        if not masks:
            self.eps[start].append(end)
            return
        current = start
        for i, (mask,) in enumerate(masks):
            following = end if i == len(masks) - 1 else self.new_state()
            self.byte_edges[current].append((mask, following))
            current = following

    def _repeat(self, node: Repeat, start: int, end: int) -> None:
        current = start
        for _ in range(node.min):
            following = self.new_state()
            self.build(node.item, current, following)
            current = following
        if node.max is None:
            loop = self.new_state()
            self.eps[current].append(loop)
            body_end = self.new_state()
            self.build(node.item, loop, body_end)
            self.eps[body_end].append(loop)
            self.eps[loop].append(end)
            return
        for _ in range(node.max - node.min):
            following = self.new_state()
            self.eps[current].append(end)
            self.build(node.item, current, following)
            current = following
        self.eps[current].append(end)


def _range_mask(low: int, high: int) -> int:
    return ((1 << (high + 1)) - 1) ^ ((1 << low) - 1)


class _DFA:
    """One rule's deterministic automaton with local state numbers (0 is the start)."""

    def __init__(self) -> None:
        self.byte_pieces: list[list[tuple[int, int]]] = []  # (byte mask, target)
        self.sym_next: list[dict[int, int]] = []
        self.final: list[bool] = []


def _determinize(nfa: _NFA, start: int, accept: int, rule: Rule) -> _DFA:
    eps = nfa.eps

    def closure(states) -> frozenset[int]:
        seen = set(states)
        todo = list(states)
        while todo:
            for target in eps[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return frozenset(seen)

    dfa = _DFA()
    ids: dict[frozenset[int], int] = {}
    queue: list[frozenset[int]] = []

    def state_id(subset: frozenset[int]) -> int:
        found = ids.get(subset)
        if found is None:
            if len(ids) >= DFA_LIMIT:
                raise CompileLimitError(
                    Diagnostic("E108", f"rule {rule.name!r} needs more than {DFA_LIMIT} automaton states "
                               "after determinization; split it into smaller rules",
                               rule.line, rule.column)
                )
            found = ids[subset] = len(ids)
            queue.append(subset)
            dfa.byte_pieces.append([])
            dfa.sym_next.append({})
            dfa.final.append(accept in subset)
        return found

    state_id(closure([start]))
    done = 0
    while done < len(queue):
        subset = queue[done]
        current = done
        done += 1
        pieces: list[tuple[int, set[int]]] = []
        symbols: dict[int, set[int]] = {}
        for s in subset:
            for mask, target in nfa.byte_edges[s]:
                pieces = _refine(pieces, mask, target)
            for symbol, target in nfa.sym_edges[s]:
                symbols.setdefault(symbol, set()).add(target)
        dfa.byte_pieces[current] = [(mask, state_id(closure(targets))) for mask, targets in pieces]
        dfa.sym_next[current] = {sym: state_id(closure(t)) for sym, t in sorted(symbols.items())}
    return dfa


def _refine(pieces: list[tuple[int, set[int]]], mask: int, target: int) -> list[tuple[int, set[int]]]:
    """Split disjoint byte pieces so that ``mask -> target`` is added without overlaps."""
    out = []
    remaining = mask
    for piece_mask, targets in pieces:
        common = piece_mask & mask
        if common:
            out.append((common, targets | {target}))
            rest = piece_mask & ~mask
            if rest:
                out.append((rest, targets))
            remaining &= ~piece_mask
        else:
            out.append((piece_mask, targets))
    if remaining:
        out.append((remaining, {target}))
    return out


def _assemble(names: list[str], dfas: list[_DFA], root: int, token_refs: tuple[TokenRef, ...]) -> RuleSet:
    offsets, total = [], 0
    for dfa in dfas:
        offsets.append(total)
        total += len(dfa.final)
    rule_start = tuple(offsets)
    byte_next: list[dict[int, int]] = []
    refs: list[tuple[tuple[int, int], ...]] = []
    token_edges: list[tuple[tuple[int, int], ...]] = []
    final: list[bool] = []
    rule_of: list[int] = []
    pieces: list[list[tuple[int, int]]] = []  # per state: (byte mask, target state)
    bits_of: dict[int, list[int]] = {}
    for r, dfa in enumerate(dfas):
        base = offsets[r]
        for local in range(len(dfa.final)):
            moves: dict[int, int] = {}
            here = [(mask, base + target) for mask, target in dfa.byte_pieces[local]]
            for mask, target in here:
                bits = bits_of.get(mask)
                if bits is None:
                    bits = bits_of[mask] = _bits(mask)
                moves.update(dict.fromkeys(bits, target))
            pieces.append(here)
            byte_next.append(moves)
            syms = dfa.sym_next[local]
            refs.append(tuple((rule_start[s], base + t) for s, t in syms.items() if s >= 0))
            token_edges.append(tuple((~s, base + t) for s, t in syms.items() if s < 0))
            final.append(dfa.final[local])
            rule_of.append(r)
    byte_class, class_table = _class_table(pieces, bits_of)
    movable = tuple(bool(byte_next[q]) or bool(token_edges[q]) for q in range(total))
    sink = tuple(final[q] and not movable[q] and not refs[q] for q in range(total))
    plain = tuple(bool(byte_next[q]) and not final[q] and not refs[q] and not token_edges[q] for q in range(total))
    return RuleSet(
        rule_names=tuple(names),
        rule_start=rule_start,
        root_start=rule_start[root],
        byte_next=tuple(byte_next),
        refs=tuple(refs),
        token_edges=tuple(token_edges),
        final=tuple(final),
        rule_of=tuple(rule_of),
        token_refs=token_refs,
        byte_class=byte_class,
        class_table=class_table,
        movable=movable,
        sink=sink,
        plain=plain,
    )


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _class_table(pieces: list[list[tuple[int, int]]], bits_of: dict[int, list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Bytes no transition distinguishes share a class; ``table[q, class]`` is the move.
    ``pieces`` are each state's disjoint (byte mask, target) moves, ``bits_of`` every mask's bytes."""
    classes = [(1 << 256) - 1]
    for mask in bits_of:
        refined = []
        for cls in classes:
            inside, outside = cls & mask, cls & ~mask
            refined.extend(part for part in (inside, outside) if part)
        classes = refined
    byte_class = np.zeros(256, dtype=np.int32)
    for c, cls in enumerate(sorted(classes, key=lambda m: (m & -m).bit_length())):
        byte_class[_bits(cls)] = c
    # Every mask is a union of classes: its columns are the classes of its bytes.
    columns = {mask: np.unique(byte_class[bits]) for mask, bits in bits_of.items()}
    table = np.full((len(pieces), len(classes)), -1, dtype=np.int32)
    for q, moves in enumerate(pieces):
        for mask, target in moves:
            table[q, columns[mask]] = target
    return byte_class, table
