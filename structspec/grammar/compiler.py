"""Compile parsed GBNF rules into a :class:`~structspec.grammar.ruleset.RuleSet`.

Steps: pick which rules to inline (small and non-recursive), build one epsilon-NFA per
remaining rule with byte-range, rule-reference and token-reference edges (character classes
become UTF-8 byte-range sequences), then determinize each with the subset construction.
Size limits keep pathological grammars from exhausting memory; past them compilation fails
with ``E108`` naming the rule.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from structspec.grammar.gbnf.diagnostics import Diagnostic
from structspec.grammar.ruleset import ByteMoves, RuleSet
from structspec.grammar.utf8 import utf8_sequences
from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Ref, Rep, Rule, Seq, TokenRef, walk

INLINE_LIMIT = 400  # estimated NFA states up to which a non-recursive rule is inlined
DFA_CACHE_STATES = 200_000  # automaton states of the rule automata kept for reuse by later grammars
NFA_LIMIT = 400_000  # NFA states per rule
DFA_LIMIT = 100_000  # DFA states per rule


class _AutomatonCache:
    """Least recently used rule automata, within a budget of :data:`DFA_CACHE_STATES` states;
    thread-safe (the server compiles request grammars on several threads)."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[Expr, tuple[tuple[str, Expr], ...]], _DFA] = OrderedDict()
        self.states = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Expr, tuple[tuple[str, Expr], ...]]) -> _DFA | None:
        with self._lock:
            dfa = self.entries.get(key)
            if dfa is not None:
                self.entries.move_to_end(key)
            return dfa

    def put(self, key: tuple[Expr, tuple[tuple[str, Expr], ...]], dfa: _DFA) -> None:
        with self._lock:
            if key in self.entries:  # built meanwhile by another thread
                return
            self.entries[key] = dfa
            self.states += len(dfa.final)
            while len(self.entries) > 1 and self.states > DFA_CACHE_STATES:
                self.states -= len(self.entries.popitem(last=False)[1].final)

    def clear(self) -> None:
        with self._lock:
            self.entries.clear()
            self.states = 0


_DFA_CACHE = _AutomatonCache()


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
    dfas = [_rule_dfa(table, inline, name) for name in compiled]
    symbols = (sym for dfa in dfas for moves in dfa.sym_next for sym in moves)
    token_refs = tuple(dict.fromkeys(sym for sym in symbols if isinstance(sym, TokenRef)))
    return _assemble(compiled, dfas, root, token_refs)


def _rule_dfa(table: Mapping[str, Rule], inline: set[str], name: str) -> _DFA:
    """The automaton of one rule, from the process-wide cache when the same rule text (with
    the same inlined callees) was compiled before: most schema grammars share the JSON helpers
    (``string``, ``number``, ``value`` ...), so their automata are built once per process."""
    key = (table[name].body, _inlined_callees(table, inline, name))
    dfa = _DFA_CACHE.get(key)
    if dfa is None:
        nfa = _NFA(table, inline, name)
        start, end = nfa.new_state(), nfa.new_state()
        nfa.build(table[name].body, start, end)
        dfa = _determinize(nfa, start, end, table[name])
        _DFA_CACHE.put(key, dfa)
    return dfa


def _inlined_callees(table: Mapping[str, Rule], inline: set[str], name: str) -> tuple[tuple[str, Expr], ...]:
    """``(name, body)`` of every rule inlined into ``name``, directly or through others."""
    found: dict[str, Expr] = {}
    todo = [name]
    while todo:
        for callee in _refs(table, todo.pop()):
            if callee in inline and callee not in found:
                found[callee] = table[callee].body
                todo.append(callee)
    return tuple(sorted(found.items(), key=lambda item: item[0]))


def _reachable_in_order(table: Mapping[str, Rule], root: str) -> list[str]:
    order, seen, todo = [], set(), [root]
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        order.append(name)
        todo.extend(n.name for n in walk(table[name].body) if isinstance(n, Ref))
    return order


def _inlinable(table: Mapping[str, Rule], names: list[str], graph: Mapping[str, set[str]]) -> set[str]:
    """Non-recursive rules whose inlined size stays small (``graph``: each rule's references)."""
    recursive = _recursive_rules(graph, names)
    estimates: dict[str, int] = {}
    inline: set[str] = set()

    def estimate(node: Expr) -> int:
        if isinstance(node, Lit):
            return len(node.text.encode("utf-8")) + 1
        if isinstance(node, (CharClass, Chars)):
            ranges = node.code_points() if isinstance(node, CharClass) else node.charset.ranges
            return sum(len(seq) for seq in utf8_sequences(ranges)) + 1
        if isinstance(node, Ref):
            return rule_estimate(node.name) if node.name in inline else 1
        if isinstance(node, TokenRef):
            return 1
        if isinstance(node, Seq):
            return sum(estimate(child) for child in node.items) + 2
        if isinstance(node, Alt):
            return sum(estimate(child) for child in node.items) + 2
        assert isinstance(node, Rep)
        copies = max(node.low, 1) if node.high is None else max(node.high, 1)
        return estimate(node.item) * copies + 2

    def rule_estimate(name: str) -> int:
        if name not in estimates:
            estimates[name] = estimate(table[name].body)
        return estimates[name]

    callers: dict[str, int] = {}
    for name in names:
        for node in walk(table[name].body):
            if isinstance(node, Ref):
                callers[node.name] = callers.get(node.name, 0) + 1

    def shared_loop(name: str) -> bool:
        return callers.get(name, 0) > 1 and any(
            isinstance(node, Rep) and node.high is None for node in walk(table[name].body)
        )

    # Leaves first, so a rule's estimate already knows which of its callees are inlined.
    for name in reversed(_topological(graph, names)):
        if name not in recursive and rule_estimate(name) <= INLINE_LIMIT and not shared_loop(name):
            inline.add(name)
    return inline


def _refs(table: Mapping[str, Rule], name: str) -> set[str]:
    return {n.name for n in walk(table[name].body) if isinstance(n, Ref)}


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
    """An epsilon-NFA for one rule; symbol edges carry the called rule's name or the
    :class:`TokenRef` (numbered only when the rule set is assembled, so automata are shared)."""

    def __init__(self, table: Mapping[str, Rule], inline: set[str], rule_name: str) -> None:
        self.table = table
        self.inline = inline
        self.rule = table[rule_name]
        self.eps: list[list[int]] = []
        self.byte_edges: list[list[tuple[int, int]]] = []
        self.sym_edges: list[list[tuple[str | TokenRef, int]]] = []

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

    def build(self, node: Expr, start: int, end: int) -> None:
        """Add edges so that ``node`` leads from ``start`` to ``end``."""
        if isinstance(node, Lit):
            self._chain(start, end, [(1 << b,) for b in node.text.encode("utf-8")])
        elif isinstance(node, (CharClass, Chars)):
            ranges = node.code_points() if isinstance(node, CharClass) else node.charset.ranges
            for seq in utf8_sequences(ranges):
                self._chain(start, end, [(_range_mask(lo, hi),) for lo, hi in seq])
        elif isinstance(node, Ref):
            if node.name in self.inline:
                self.build(self.table[node.name].body, start, end)
            else:
                self.sym_edges[start].append((node.name, end))
        elif isinstance(node, TokenRef):
            self.sym_edges[start].append((node, end))
        elif isinstance(node, Seq):
            current = start
            for i, item in enumerate(node.items):
                following = end if i == len(node.items) - 1 else self.new_state()
                self.build(item, current, following)
                current = following
            if not node.items:
                self.eps[start].append(end)
        elif isinstance(node, Alt):
            for alt in node.items:
                self.build(alt, start, end)
        else:
            assert isinstance(node, Rep)
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

    def _repeat(self, node: Rep, start: int, end: int) -> None:
        current = start
        for _ in range(node.low):
            following = self.new_state()
            self.build(node.item, current, following)
            current = following
        if node.high is None:
            loop = self.new_state()
            self.eps[current].append(loop)
            body_end = self.new_state()
            self.build(node.item, loop, body_end)
            self.eps[body_end].append(loop)
            self.eps[loop].append(end)
            return
        for _ in range(node.high - node.low):
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
        self.sym_next: list[dict[str | TokenRef, int]] = []  # called rule name or token reference
        self.final: list[bool] = []
        self._layout: _Layout | None = None

    def layout(self) -> _Layout:
        """The automaton as arrays, built once and cached with it, so that assembling a grammar
        from cached rules costs array copies rather than a pass over every state."""
        if self._layout is None:
            byte_class, table = _local_classes(self.byte_pieces)
            calls = tuple((q, tuple(moves.items())) for q, moves in enumerate(self.sym_next) if moves)
            self._layout = _Layout(byte_class, table, calls, np.array(self.final, dtype=bool))
        return self._layout


class _Layout(NamedTuple):
    byte_class: np.ndarray  # byte -> local class
    table: np.ndarray  # [state, local class] -> local target, -1 for none
    calls: tuple[tuple[int, tuple[tuple[str | TokenRef, int], ...]], ...]  # states with symbol edges
    final: np.ndarray


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
        symbols: dict[str | TokenRef, set[int]] = {}
        for s in subset:
            for mask, target in nfa.byte_edges[s]:
                pieces = _refine(pieces, mask, target)
            for symbol, target in nfa.sym_edges[s]:
                symbols.setdefault(symbol, set()).add(target)
        dfa.byte_pieces[current] = [(mask, state_id(closure(targets))) for mask, targets in pieces]
        dfa.sym_next[current] = {sym: state_id(closure(t)) for sym, t in symbols.items()}
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


def _assemble(names: list[str], dfas: list[_DFA], root: str, token_refs: tuple[TokenRef, ...]) -> RuleSet:
    layouts = [dfa.layout() for dfa in dfas]
    sizes = [len(layout.final) for layout in layouts]
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int32)
    total = int(sum(sizes))
    rule_start = tuple(offsets.tolist())
    index = {name: i for i, name in enumerate(names)}
    token_index = {ref: i for i, ref in enumerate(token_refs)}
    # Global byte classes are the common refinement of the rules' own: one per distinct column of
    # local class ids, numbered by their lowest byte.
    local = np.stack([layout.byte_class for layout in layouts])
    columns, lowest, byte_class = np.unique(local, axis=1, return_index=True, return_inverse=True)
    order = np.argsort(lowest)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    byte_class = rank[byte_class.reshape(-1)].astype(np.int32)
    columns = columns[:, order]
    parts = []
    for r, layout in enumerate(layouts):
        moves = layout.table[:, columns[r]]
        parts.append(np.where(moves >= 0, moves + offsets[r], -1))
    class_table = np.concatenate(parts).astype(np.int32)
    refs: list[tuple[tuple[int, int], ...]] = [()] * total
    token_edges: list[tuple[tuple[int, int], ...]] = [()] * total
    for r, layout in enumerate(layouts):
        base = rule_start[r]
        for q, moves in layout.calls:
            refs[base + q] = tuple((rule_start[index[s]], base + t) for s, t in moves if isinstance(s, str))
            token_edges[base + q] = tuple((token_index[s], base + t) for s, t in moves if isinstance(s, TokenRef))
    final = np.concatenate([layout.final for layout in layouts])
    has_bytes = (class_table >= 0).any(axis=1)
    has_refs = np.array([bool(e) for e in refs], dtype=bool)
    has_tokens = np.array([bool(e) for e in token_edges], dtype=bool)
    movable = has_bytes | has_tokens
    return RuleSet(
        rule_names=tuple(names),
        rule_start=rule_start,
        root_start=rule_start[index[root]],
        byte_next=ByteMoves(byte_class, class_table),
        refs=tuple(refs),
        token_edges=tuple(token_edges),
        final=tuple(final.tolist()),
        rule_of=tuple(np.repeat(np.arange(len(sizes)), sizes).tolist()),
        token_refs=token_refs,
        byte_class=byte_class,
        class_table=class_table,
        movable=tuple(movable.tolist()),
        sink=tuple((final & ~movable & ~has_refs).tolist()),
        plain=tuple((has_bytes & ~final & ~has_refs & ~has_tokens).tolist()),
    )


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _local_classes(pieces: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray]:
    """Bytes that move every state alike share a class; ``table[q, class]`` is the move (-1:
    none). ``pieces`` are each state's disjoint (byte mask, target) moves. Plain Python: rules
    are small, and numpy's per-call cost would dominate."""
    masks = dict.fromkeys(mask for moves in pieces for mask, _ in moves)
    parts = [(1 << 256) - 1]
    for mask in masks:
        parts = [part for whole in parts for part in (whole & mask, whole & ~mask) if part]
    inside = {mask: [c for c, part in enumerate(parts) if part & mask] for mask in masks}
    columns = [[-1] * len(pieces) for _ in parts]
    for q, moves in enumerate(pieces):
        for mask, target in moves:
            for c in inside[mask]:
                columns[c][q] = target
    # Different masks can lead to the same states: parts that move alike merge into one class.
    classes: dict[tuple[int, ...], list[int]] = {}
    for part, column in zip(parts, columns, strict=True):
        classes.setdefault(tuple(column), []).append(part)
    byte_class = np.zeros(256, dtype=np.int32)
    for c, members in enumerate(classes.values()):
        for part in members:
            byte_class[_bits(part)] = c
    table = np.array(list(classes), dtype=np.int32).reshape(len(classes), len(pieces)).T
    return byte_class, np.ascontiguousarray(table)
