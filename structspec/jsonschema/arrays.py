"""Array values: positional items, the rest, counts, ``contains`` and ``uniqueItems``.

``uniqueItems`` is exact when the items come from a small finite set (the grammar tracks which
values were used) or when at most one item is allowed; ``contains`` is exact without
``maxContains`` and without other count limits. Everything else there is relaxed or refused.
"""

from __future__ import annotations

from typing import Any, Protocol

from structspec.budget import check
from structspec.ir.automaton import emit_graph
from structspec.ir.expr import EMPTY, Lit, MaybeExpr, alt, opt, seq
from structspec.jsonschema.builder import GrammarBuilder, counted
from structspec.jsonschema.encoding import json_value_expr
from structspec.jsonschema.facets import Facet
from structspec.jsonschema.resolve import Loc

MAX_UNIQUE_VALUES = 8
MAX_STATES = 4096


class ArrayHost(Protocol):
    builder: GrammarBuilder
    ws: MaybeExpr

    def relax(self, pointer: str, keyword: str, message: str) -> None: ...

    def value_rule(self, locs: list[Loc], name: str) -> MaybeExpr: ...

    def finite_values(self, locs: list[Loc]) -> list[Any] | None: ...


def array_expr(host: ArrayHost, facets: list[Facet], name: str) -> MaybeExpr:
    prefix_len = max(
        (len(f.kw["prefixItems"]) for f in facets if isinstance(f.kw.get("prefixItems"), list)),
        default=0,
    )
    min_i, max_i = 0, None
    for f in facets:
        low, high = f.count("minItems", lower=True), f.count("maxItems", lower=False)
        if low is not None:
            min_i = max(min_i, low)
        if high is not None:
            max_i = high if max_i is None else min(max_i, high)
        if f.kw.get("unevaluatedItems", True) is not True:
            host.relax(f.pointer("unevaluatedItems"), "unevaluatedItems", "unevaluatedItems is not supported")
    rest_locs = [f.sub("items") for f in facets if "items" in f.kw]
    ws = host.ws if host.ws is not None else EMPTY
    sep = seq(ws, Lit(","), ws)
    unique = [f for f in facets if f.kw.get("uniqueItems") is True]
    contains = [f for f in facets if "contains" in f.kw]
    if unique and (max_i is None or max_i > 1):
        body = _unique(host, facets, unique[0], prefix_len, rest_locs, min_i, max_i, sep, name)
    elif contains:
        body = _contains(host, contains, prefix_len, rest_locs, min_i, max_i, sep, name)
    else:
        items = [host.value_rule(_position_locs(facets, i), f"{name}-{i}") for i in range(prefix_len)]
        rest = host.value_rule(rest_locs, f"{name}-items")
        body = _sequence(host.builder, items, rest, min_i, max_i, sep)
    return seq(Lit("["), ws, body, ws, Lit("]"))


def _position_locs(facets: list[Facet], i: int) -> list[Loc]:
    locs = []
    for f in facets:
        prefix = f.kw.get("prefixItems")
        if isinstance(prefix, list) and i < len(prefix):
            locs.append(f.sub("prefixItems", i))
        elif "items" in f.kw:
            locs.append(f.sub("items"))
    return locs


def _sequence(
    builder: GrammarBuilder, items: list[MaybeExpr], rest: MaybeExpr, min_i: int, max_i: int | None, sep: MaybeExpr
) -> MaybeExpr:
    """Content of ``[...]``: the positional items, then repeats of ``rest``."""
    for i, item in enumerate(items):
        if item is None:
            max_i = i if max_i is None else min(max_i, i)
            break
    if rest is None:
        max_i = len(items) if max_i is None else min(max_i, len(items))
    if max_i is not None and max_i < min_i:
        return None

    if max_i == 0:
        return EMPTY
    # The elements after the first, built from the last position back (a loop, not a recursive
    # closure: that would be a reference cycle holding the builder until the next collection).
    # Past the positional items (or at max_i) the tail is the repeats of ``rest`` (or nothing);
    # before, position i is ``sep items[i]`` then the tail from i + 1, optional from min_i on.
    last = max(1, len(items) if max_i is None else min(len(items), max_i))
    if max_i is not None and last >= max_i:
        tail: MaybeExpr = EMPTY
    else:
        tail = counted(builder, seq(sep, rest), max(0, min_i - last), None if max_i is None else max_i - last)
    for i in range(last - 1, 0, -1):
        more = seq(sep, items[i], tail)
        tail = opt(more) if i >= min_i else more
    first = items[0] if items else rest
    body = seq(first, tail)
    return opt(body) if min_i == 0 else body


def _contains(
    host: ArrayHost,
    contains: list[Facet],
    prefix_len: int,
    rest_locs: list[Loc],
    min_i: int,
    max_i: int | None,
    sep: MaybeExpr,
    name: str,
) -> MaybeExpr:
    """Arrays with between ``minContains`` and ``maxContains`` items matching ``contains``:
    a graph over (matches so far, items so far)."""
    facet = contains[0]
    if len(contains) > 1 or prefix_len:
        host.relax(facet.pointer("contains"), "contains", "several contains, or contains with positional items")
    low = _whole(facet.kw.get("minContains"), 1)
    high = facet.kw.get("maxContains")
    high = None if high is None else _whole(high, 0)
    any_item = host.value_rule(rest_locs, f"{name}-items")
    if low == 0 and high is None:
        return _sequence(host.builder, [], any_item, min_i, max_i, sep)
    target = facet.sub("contains")
    match = host.value_rule([*rest_locs, target], f"{name}-contains")
    other = any_item
    if high is not None:
        negated = target.wrap({"not": target.node})
        other = host.value_rule([*rest_locs, negated], f"{name}-other")
    count_cap = high if high is not None else low
    length_cap = max_i if max_i is not None else max(min_i, 1)
    if (count_cap + 1) * (length_cap + 1) > MAX_STATES:
        host.relax(facet.pointer("contains"), "contains", "contains counts too large to track")
        return _sequence(host.builder, [], any_item, min_i, max_i, sep)  # approximated: without contains
    edges: dict[object, list[tuple[MaybeExpr, object]]] = {}
    accept: set[object] = set()
    todo: list[tuple[int, int]] = [(0, 0)]
    seen = {(0, 0)}
    while todo:
        check()
        c, n = todo.pop()
        out: list[tuple[MaybeExpr, object]] = []
        if c >= low and n >= min_i:
            accept.add((c, n))
        if max_i is None or n < max_i:
            lead = sep if n else EMPTY
            grown = n + 1 if max_i is not None else min(n + 1, length_cap)
            moves = [(other, c)]
            if high is None or c < high:
                moves.append((match, c + 1 if high is not None else min(c + 1, count_cap)))
            for item, nc in moves:
                if item is None:
                    continue
                out.append((seq(lead, item), (nc, grown)))
                if (nc, grown) not in seen:
                    seen.add((nc, grown))
                    todo.append((nc, grown))
        edges[(c, n)] = out
    return emit_graph(edges, accept, (0, 0), host.builder, f"{name}-contains-state")


def _whole(value: object, default: int) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    return default


def _unique(
    host: ArrayHost,
    facets: list[Facet],
    facet: Facet,
    prefix_len: int,
    rest_locs: list[Loc],
    min_i: int,
    max_i: int | None,
    sep: MaybeExpr,
    name: str,
) -> MaybeExpr:
    """Arrays of distinct items drawn from a small finite set: one state per used subset."""
    pointer = facet.pointer("uniqueItems")
    values = host.finite_values(rest_locs) if not prefix_len else None
    if values is None or len(values) > MAX_UNIQUE_VALUES:
        host.relax(pointer, "uniqueItems", "uniqueItems over items that are not a small finite set")
        items = [host.value_rule(_position_locs(facets, i), f"{name}-{i}") for i in range(prefix_len)]
        return _sequence(host.builder, items, host.value_rule(rest_locs, f"{name}-items"), min_i, max_i, sep)
    exprs = [json_value_expr(v, host.ws) for v in values]
    top = len(values) if max_i is None else min(max_i, len(values))
    edges: dict[object, list[tuple[MaybeExpr, object]]] = {}
    accept: set[object] = set()
    for mask in range(1 << len(values)):
        used = bin(mask).count("1")
        if used >= min_i:
            accept.add(mask)
        out: list[tuple[MaybeExpr, object]] = []
        if used < top:
            for j, expr in enumerate(exprs):
                if not mask & (1 << j):
                    out.append((seq(sep if used else EMPTY, expr), mask | (1 << j)))
        edges[mask] = out
    return alt(emit_graph(edges, accept, 0, host.builder, f"{name}-unique"))
