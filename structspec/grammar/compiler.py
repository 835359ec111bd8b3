"""Compile parsed GBNF rules into a :class:`~structspec.grammar.ruleset.RuleSet`.

Steps: pick which rules to inline (small and non-recursive), build one epsilon-NFA per
remaining rule with byte-range, rule-reference and token-reference edges (character classes
become UTF-8 byte-range sequences), then determinize each with the subset construction; both
in C (:mod:`structspec.ir._byte_automata`).
Size limits keep pathological grammars from exhausting memory; past them compilation fails
with ``E108`` naming the rule. Rules given as byte automata (``automata``: built elsewhere, such
as the spans of a source text) are taken as they are, never inlined.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping
from typing import NamedTuple

import numpy as np

from structspec.grammar.gbnf.diagnostics import Diagnostic
from structspec.grammar.ruleset import RuleSet, shared_move_rows
from structspec.grammar.utf8 import utf8_sequences
from structspec.ir._byte_automata import (
    AutomatonLimit,
    cut_per_state,
    inline_estimate,
    rule_automaton,
    rule_key,
)
from structspec.ir.byte_automaton import ByteAutomaton
from structspec.ir.expr import Alt, Expr, Ref, Rep, Rule, Seq, TokenRef
from structspec.lru import BoundedCache

INLINE_LIMIT = 400  # estimated NFA states up to which a non-recursive rule is inlined
DFA_CACHE_BYTES = 128 << 20  # estimated bytes of the rule automata kept for reuse by later grammars
DFA_CACHE_ENTRIES = 4096  # rule automata kept for reuse
DFA_KEY_BYTES = 2048  # estimated bytes of a kept automaton's key (the rule's syntax tree, flattened)
NFA_LIMIT = 400_000  # NFA states per rule
DFA_LIMIT = 100_000  # DFA states per rule
BLOCK_AT = 4096  # repetition counts above which a repetition calls a rule of ~sqrt(count) copies


def _dfa_bytes(_key: object, dfa: _Layout) -> int:
    """Estimated bytes of a cached rule automaton: its arrays, its key and its symbol edges."""
    parts = (dfa.byte_class, dfa.table, dfa.final, dfa.has_bytes, *dfa.calls)
    return sum(part.nbytes for part in parts) + 8 * len(dfa.symbols) + DFA_KEY_BYTES


_DFA_CACHE: BoundedCache[tuple, _Layout] = BoundedCache(
    max_entries=DFA_CACHE_ENTRIES, max_bytes=DFA_CACHE_BYTES, weigh=_dfa_bytes
)
"""Least recently used rule automata, shared by every grammar the process compiles
(thread-safe: the server compiles request grammars on several threads)."""


_PLANS: BoundedCache[tuple, tuple] = BoundedCache(max_entries=32)
"""For rule tables with given rules (a grounded schema's, kept by ``Grammar.from_gbnf`` and
reused for every source text): which rules are compiled and their automata, so that a new text
costs only assembling its given automata with them. Keyed by the table's identity; an entry
holds the table, so the identity is not reused while the entry lives."""


class CompileLimitError(Exception):
    """Raised with the diagnostic to report when a rule exceeds a size limit."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def compile_rules(
    table: Mapping[str, Rule], root: str, automata: Mapping[str, ByteAutomaton] | None = None
) -> RuleSet:
    """Compile the rules reachable from ``root``; ``table`` must be free of analysis errors.

    ``automata`` gives some rules' automata outright; ``table`` holds a stand-in rule for
    each (see :mod:`structspec.grammar.given`), which is never compiled nor inlined."""
    given = automata or {}
    key = (id(table), root, frozenset(given))
    plan = _PLANS.get(key, None) if given else None
    if plan is None or plan[0] is not table:
        rules, blocks = _blocked(table, given.keys())
        graph = _reference_graph(rules, root)
        order = list(graph)
        inline = _inlinable(rules, order, graph, _shared_loops(rules, order)) - given.keys() - blocks
        compiled = [name for name in order if name not in inline or name == root]
        own = [None if name in given else _rule_dfa(rules, inline, name) for name in compiled]
        symbols = (sym for dfa in own if dfa is not None for sym in dfa.symbols)
        token_refs = tuple(dict.fromkeys(sym for sym in symbols if isinstance(sym, TokenRef)))
        plan = (table, compiled, own, token_refs)
        if given:
            _PLANS.put(key, plan)
    _, compiled, own, token_refs = plan
    dfas = [_given_dfa(given[name]) if dfa is None else dfa for name, dfa in zip(compiled, own, strict=True)]
    return _assemble(compiled, dfas, root, token_refs)


def _rule_dfa(table: Mapping[str, Rule], inline: set[str], name: str) -> _Layout:
    """The automaton of one rule, from the process-wide cache when a rule of the same shape
    (see :func:`~structspec.ir._byte_automata.rule_key`) was compiled before: most schema
    grammars share the JSON helpers (``string``, ``number``, ``value`` ...), and many repeat one
    property's rules under each property's name, so their automata are built once per process."""
    key, named = rule_key(table[name].body, table, inline)
    dfa = _DFA_CACHE.get(key, None)
    if dfa is None:
        dfa = _build_dfa(table, inline, table[name])._replace(named=named)
        _DFA_CACHE.put(key, dfa)
    return dfa if dfa.named == named else _renamed(dfa, named)


def _renamed(dfa: _Layout, named: tuple[str, ...]) -> _Layout:
    """``dfa``, built for a rule of the same shape, with its calls to ``dfa.named`` made to
    the rules of ``named`` (the same numbering)."""
    names = dict(zip(dfa.named, named, strict=True))
    symbols = tuple(s if isinstance(s, TokenRef) else names[s] for s in dfa.symbols)
    return dfa._replace(symbols=symbols, named=named)


def _build_dfa(table: Mapping[str, Rule], inline: set[str], rule: Rule) -> _Layout:
    try:
        found = rule_automaton(rule.body, table, inline, utf8_sequences, NFA_LIMIT, DFA_LIMIT)
    except AutomatonLimit as exc:
        if exc.stage == "nfa":
            raise _limit_error(rule, f"expands to more than {NFA_LIMIT} automaton states; split it into smaller rules "
                               "or lower repetition counts") from None
        raise _limit_error(
            rule, f"needs more than {DFA_LIMIT} automaton states after determinization; split it into smaller rules"
        ) from None
    byte_class, moves, calls, symbols, accept = found
    has_bytes = (moves >= 0).any(axis=1)
    return _Layout(byte_class, _smallest(moves), calls, np.array(accept, dtype=bool), has_bytes, symbols)


def _given_dfa(automaton: ByteAutomaton) -> _Layout:
    """A rule automaton taken as given: each byte it moves on is a local class of its own
    (numbered from 1 in byte order), the other bytes class 0, on which nothing moves."""
    moved = np.unique(automaton.byte)
    byte_class = np.zeros(256, dtype=np.uint8 if len(moved) < 255 else np.int32)
    byte_class[moved] = np.arange(1, len(moved) + 1)
    has_bytes = np.zeros(automaton.n_states, dtype=bool)
    has_bytes[automaton.src] = True
    table = np.full((automaton.n_states, len(moved) + 1), -1, dtype=np.int32)
    table[automaton.src, byte_class[automaton.byte]] = automaton.dst
    return _Layout(byte_class, _smallest(table), _NO_CALLS, automaton.final, has_bytes)


def _blocked(table: Mapping[str, Rule], given: Collection[str] = ()) -> tuple[Mapping[str, Rule], set[str]]:
    """``table`` with every repetition counted past ``BLOCK_AT`` rewritten over a new *block*
    rule of ``k`` copies of its item (``k`` about the square root of the count), and the block
    rules' names. ``x{m,n}`` becomes ``x{m}`` then ``x{0,n-m}``; with ``B ::= x{k}``,
    ``x{c} = B{c // k} x{c % k}`` and ``x{0,d} = B{0,q-1} x{0,k-1} | B{q} x{0,d % k}``
    (``q = d // k``): the same language, ``O(k)`` automaton states where the plain expansion
    needs one per count (``x{100000}`` would need 100,001), the count kept on the parse
    stack. Block names hold ``~``, which GBNF names cannot. Rules named in ``given`` (stand-ins
    for given automata) are left as they are."""
    if not any(max(n.low, n.high or 0) > BLOCK_AT
               for name, rule in table.items() if name not in given for n in rule.reps):
        return table, set()
    rules = dict(table)
    blocks: set[str] = set()

    def block(rule: Rule, item: Expr, k: int, at: Expr) -> Ref:
        name = f"{rule.name}~{len(blocks)}"
        blocks.add(name)
        rules[name] = Rule(name=name, body=Rep(item, k, k, line=at.line, column=at.column),
                           line=at.line, column=at.column)
        return Ref(name=name, line=at.line, column=at.column)

    def rewrite(rule: Rule, node: Expr) -> Expr:
        if isinstance(node, Seq):
            return Seq(tuple(rewrite(rule, n) for n in node.items), line=node.line, column=node.column)
        if isinstance(node, Alt):
            return Alt(tuple(rewrite(rule, n) for n in node.items), line=node.line, column=node.column)
        if not isinstance(node, Rep):
            return node
        item = rewrite(rule, node.item)
        if max(node.low, node.high or 0) <= BLOCK_AT:
            return Rep(item, node.low, node.high, line=node.line, column=node.column)
        k = int(max(node.low, node.high or 0) ** 0.5) + 1
        ref = block(rule, item, k, node)

        def times(low: int, high: int | None, of: Expr = item) -> Rep:
            return Rep(of, low, high, line=node.line, column=node.column)

        def exactly(count: int) -> list[Expr]:
            return [times(count // k, count // k, ref), times(count % k, count % k)]

        if node.high is None:
            tail: list[Expr] = [times(0, None)]
        elif node.high - node.low < k:
            tail = [times(0, node.high - node.low)]
        else:
            q, r = divmod(node.high - node.low, k)
            tail = [Alt((Seq((times(0, q - 1, ref), times(0, k - 1))),
                         Seq((times(q, q, ref), times(0, r))))), ]
        return Seq((*exactly(node.low), *tail), line=node.line, column=node.column)

    for name, rule in table.items():
        if name in given:
            continue
        rules[name] = Rule(name=name, body=rewrite(rule, rule.body), line=rule.line, column=rule.column)
    return rules, blocks


def _reference_graph(table: Mapping[str, Rule], root: str) -> dict[str, dict[str, None]]:
    """The rules reachable from ``root`` in breadth-first order, each with the rules it refers
    to (in the order they are written; a dict as an ordered set)."""
    graph: dict[str, dict[str, None]] = {}
    todo = deque([root])
    while todo:
        name = todo.popleft()
        if name not in graph:
            graph[name] = dict.fromkeys(n.name for n in table[name].refs)
            todo.extend(callee for callee in graph[name] if callee not in graph)
    return graph


def _shared_loops(table: Mapping[str, Rule], names: list[str]) -> set[str]:
    """Rules of ``names`` referred to more than once (by the rules of ``names``) whose body holds
    an unbounded repetition."""
    callers: dict[str, int] = {}
    loops: set[str] = set()
    for name in names:
        rule = table[name]
        for node in rule.refs:
            callers[node.name] = callers.get(node.name, 0) + 1
        if any(node.high is None for node in rule.reps):
            loops.add(name)
    return {name for name in loops if callers.get(name, 0) > 1}


def _inlinable(
    table: Mapping[str, Rule], names: list[str], graph: Mapping[str, Collection[str]], shared_loops: set[str]
) -> set[str]:
    """Non-recursive rules whose inlined size stays small (``graph``: each rule's references),
    except ``shared_loops`` (see :func:`_shared_loops`)."""
    recursive = _recursive_rules(graph, names)
    estimates: dict[str, int] = {}
    inline: set[str] = set()
    # Leaves first, so a rule's estimate already knows which of its callees are inlined.
    for name in reversed(_topological(graph, names)):
        if name in recursive or name in shared_loops:
            continue
        estimates[name] = inline_estimate(table[name].body, inline, estimates, utf8_sequences)
        if estimates[name] <= INLINE_LIMIT:
            inline.add(name)
    return inline


def _recursive_rules(graph: Mapping[str, Collection[str]], names: list[str]) -> set[str]:
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


def _topological(graph: Mapping[str, Collection[str]], names: list[str]) -> list[str]:
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


def _limit_error(rule: Rule, what: str) -> CompileLimitError:
    return CompileLimitError(Diagnostic("E108", f"rule {rule.name!r} {what}", rule.line, rule.column))


def _smallest(table: np.ndarray) -> np.ndarray:
    """``table`` (local targets, -1 for none) in the narrowest signed integer type that holds it."""
    for dtype in (np.int8, np.int16):
        if len(table) <= np.iinfo(dtype).max:
            return table.astype(dtype)
    return table


_NO_CALLS = (np.zeros(0, dtype=np.int32),) * 3


class _Layout(NamedTuple):
    """One rule's deterministic automaton (local state numbers, 0 the start) as arrays: what
    the cache keeps and what assembling a grammar copies (no Python object per state)."""

    byte_class: np.ndarray  # byte -> local class (uint8, or int32 for a given automaton's)
    table: np.ndarray  # [state, local class] -> local target, -1 for none
    calls: tuple[np.ndarray, np.ndarray, np.ndarray]  # symbol edges: (state, index into symbols, target)
    final: np.ndarray
    has_bytes: np.ndarray  # [state]: whether it moves on some byte
    symbols: tuple[str | TokenRef, ...] = ()  # the rules and token references the calls name
    named: tuple[str, ...] = ()  # the rules it refers to, numbered as in its cache key (see rule_key)


def _symbol_edges(
    layouts: list[_Layout], offsets: np.ndarray, index: Mapping[str, int], token_index: Mapping[TokenRef, int],
    total: int,
) -> tuple[list[tuple[tuple[int, int], ...]], list[tuple[tuple[int, int], ...]], np.ndarray, np.ndarray]:
    """Each state's rule calls ``(callee start, target - state)`` and token edges ``(token
    reference, target)``, in the order of the automata's symbol edges, and whether each state
    has any of either (bool arrays). The edges of all rules are numbered as arrays at once and
    cut into per-state tuples by one native pass (a schema grammar has thousands: per-edge
    Python work was half of assembling one); equal call tuples are shared."""
    refs: list[tuple[tuple[int, int], ...]] = [()] * total
    token_edges: list[tuple[tuple[int, int], ...]] = [()] * total
    has = np.zeros((2, total), dtype=bool)  # [0]: rule calls, [1]: token edges
    counts = [len(layout.calls[0]) for layout in layouts]
    if not any(counts):
        return refs, token_edges, has[0], has[1]
    symbol_counts = [len(layout.symbols) for layout in layouts]
    rule_starts = offsets.tolist()
    numbers = np.array([rule_starts[index[s]] if isinstance(s, str) else token_index[s]
                        for layout in layouts for s in layout.symbols], dtype=np.int64)
    is_rule = np.array([isinstance(s, str) for layout in layouts for s in layout.symbols], dtype=bool)
    base = np.repeat(offsets.astype(np.int64), counts)
    state = np.concatenate([layout.calls[0] for layout in layouts]).astype(np.int64) + base
    symbol = np.concatenate([layout.calls[1] for layout in layouts]).astype(np.int64)
    symbol += np.repeat(np.cumsum([0, *symbol_counts[:-1]]), counts)
    target = np.concatenate([layout.calls[2] for layout in layouts]).astype(np.int64) + base
    order = np.argsort(state, kind="stable")  # a state's edges keep their order
    state, symbol, target = state[order], symbol[order], target[order]
    rule = is_rule[symbol]
    for wanted, out, flags in ((True, refs, has[0]), (False, token_edges, has[1])):
        picked = rule if wanted else ~rule
        if not picked.any():
            continue
        at, moves = state[picked], target[picked]
        flags[at] = True
        if wanted:
            moves = moves - at
        cut_per_state(out, at, numbers[symbol[picked]], moves, wanted)  # equal relative calls, once
    return refs, token_edges, has[0], has[1]


def _distinct_columns(local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column of ``local`` numbered by the first column equal to it (int32), and those first
    columns' indices in increasing order."""
    columns = np.ascontiguousarray(local.T)
    records = columns.view(np.dtype((np.void, columns.shape[1] * columns.itemsize))).ravel()
    _, first, inverse = np.unique(records, return_index=True, return_inverse=True)
    order = np.argsort(first)
    number = np.empty(len(order), dtype=np.int32)
    number[order] = np.arange(len(order), dtype=np.int32)
    return number[inverse.ravel()], first[order]


def _assemble(names: list[str], layouts: list[_Layout], root: str, token_refs: tuple[TokenRef, ...]) -> RuleSet:
    sizes = [len(layout.final) for layout in layouts]
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int32)
    total = int(sum(sizes))
    rule_start = tuple(offsets.tolist())
    index = {name: i for i, name in enumerate(names)}
    token_index = {ref: i for i, ref in enumerate(token_refs)}
    # Global byte classes are the common refinement of the rules' own: one per distinct column of
    # local class ids, numbered by their lowest byte (np.unique over the columns, each read as one
    # opaque record: a Python loop over the 256 columns cost four times as much).
    local = np.stack([layout.byte_class for layout in layouts])
    byte_class, lowest = _distinct_columns(local)
    columns = np.ascontiguousarray(local[:, lowest], dtype=np.int32)
    move_rows, move_row = shared_move_rows([layout.table for layout in layouts], columns)
    refs, token_edges, has_refs, has_tokens = _symbol_edges(layouts, offsets, index, token_index, total)
    final = np.concatenate([layout.final for layout in layouts])
    has_bytes = np.concatenate([layout.has_bytes for layout in layouts])
    movable = has_bytes | has_tokens
    return RuleSet(
        rule_names=tuple(names),
        rule_start=rule_start,
        root_start=rule_start[index[root]],
        refs=tuple(refs),
        token_edges=tuple(token_edges),
        final=final.tobytes(),
        token_refs=token_refs,
        byte_class=byte_class,
        move_rows=move_rows,
        move_row=move_row,
        movable=movable.tobytes(),
        sink=(final & ~movable & ~has_refs).tobytes(),
        plain=(has_bytes & ~final & ~has_refs & ~has_tokens).tobytes(),
    )
