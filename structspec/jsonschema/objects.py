"""Object values: declared properties in schema order, with any other members among them.

Declared (and required) properties appear at most once, in the order the schema lists them
or with the required ones first (see :func:`property_orders`), each optional one
independently present or absent. With ``property_order="any"`` they may come in any order:
the member automaton tracks the set of declared properties seen (``2**n`` states for ``n``
of them). Past :data:`MAX_ANY_ORDER` declared properties it tracks only the required ones and
lets the optional ones repeat, as undeclared members may: a JSON parser keeps the last of
duplicate keys and every occurrence is checked, so this stays sound where no
``minProperties`` above 1 or ``maxProperties`` counts members; otherwise, or with more than
:data:`MAX_ANY_ORDER` required properties, the schema order is kept. Members not declared may
appear anywhere among them;
their names exclude the declared ones (so a duplicate key can never override a checked value)
and are partitioned by which ``patternProperties`` they match, so each name gets exactly the
value schemas JSON Schema applies to it. ``minProperties`` counts declared members exactly and
undeclared ones as at most one (duplicates among them would be merged by a JSON parser);
``maxProperties`` counts every member.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Any, Protocol

from structspec.budget import check
from structspec.errors import SCHEMA_TOO_LARGE, SchemaError
from structspec.ir.automaton import (
    DFA,
    MAX_INLINE_DEPTH,
    TooComplexError,
    complement,
    dfa_from_strings,
    dfa_length,
    emit_graph,
    intersect,
    union,
)
from structspec.ir.charset import ANY
from structspec.ir.counted import emit_counted
from structspec.ir.expr import EMPTY, Lit, MaybeExpr, Ref, alt, rep, seq
from structspec.jsonschema.builder import GrammarBuilder
from structspec.jsonschema.encoding import QUOTE, json_string_literal
from structspec.jsonschema.facets import Facet
from structspec.jsonschema.resolve import Loc
from structspec.jsonschema.strings import (
    StringSpec,
    emit_json_dfa,
    name_exclusion,
    plain_names,
    string_automaton,
)
from structspec.regex.convert import pattern_language
from structspec.regex.parse import RegexError, python_pattern

MAX_PATTERNS = 6
MAX_ANY_ORDER = 6
SPLIT_CHAIN = 16  # entries past which the members after entries alone are a chain of their own (_in_order)
NO_WITNESS, WITNESSED, LAST_REPEATABLE = 0, 1, 2  # member automaton: where the required witness stands


class ObjectHost(Protocol):
    builder: GrammarBuilder
    derived: dict[Hashable, Any]
    ws: MaybeExpr
    any_order: bool

    def relax(self, pointer: str, keyword: str, message: str) -> None: ...

    def is_valid(self, value: Any, loc: Loc) -> bool: ...

    def value_rule(self, locs: list[Loc], name: str) -> MaybeExpr: ...

    def name_spec(self, loc: Loc) -> tuple[list[str] | None, list[StringSpec]]: ...

    def char_rule(self) -> Any: ...

    def fresh(self, hint: str) -> str: ...

    def define(self, name: str, expr: Any) -> None: ...


def object_expr(host: ObjectHost, facets: list[Facet], name: str) -> MaybeExpr:
    known: list[str] = []
    required: list[str] = []
    min_p, max_p = 0, None
    for f in facets:
        known += [k for k in (f.kw.get("properties") or {}) if k not in known]
        required += [r for r in f.kw.get("required") or [] if isinstance(r, str) and r not in required]
        low, high = f.count("minProperties", lower=True), f.count("maxProperties", lower=False)
        if low is not None and low > min_p:
            min_p, min_facet = low, f
        if high is not None:
            max_p = high if max_p is None else min(max_p, high)
        if f.kw.get("unevaluatedProperties", True) is not True:
            host.relax(
                f.pointer("unevaluatedProperties"),
                "unevaluatedProperties",
                "unevaluatedProperties is not supported",
            )
    known += [r for r in required if r not in known]
    name_locs = [f.sub("propertyNames") for f in facets if "propertyNames" in f.kw]
    ws = host.ws if host.ws is not None else EMPTY
    colon = seq(ws, Lit(":"), ws)
    witness_spec = _witness_spec(host, facets)
    entries: dict[str, tuple[MaybeExpr, bool, MaybeExpr]] = {}
    for key in known:
        value: MaybeExpr = None
        proof: MaybeExpr = None
        if all(host.is_valid(key, loc) for loc in name_locs):
            locs = [loc for f in facets for loc in _member_locs(host, f, key)]
            value = host.value_rule(locs, f"{name}-{key}")
            if witness_spec is not None and _outside(host, witness_spec, key):
                failing = witness_spec["not"]
                proof = value if failing is None else host.value_rule([*locs, failing], f"{name}-{key}-witness")
        if key in required and value is None:
            return None
        label = seq(json_string_literal(key), colon)
        entries[key] = (seq(label, value), key in required, seq(label, proof))
    extra, witness = _extra_members(host, facets, known, name_locs, name, colon, witness_spec)
    countable = sum(member is not None for member, _, _ in entries.values()) + 1
    if max_p is not None and min_p > max_p:
        return None
    if extra is not None and min_p > countable:  # such objects exist, but a grammar cannot count their members
        host.relax(min_facet.pointer("minProperties"), "minProperties",
                   f"minProperties {min_p} is more members than a grammar can count apart here ({countable}: the "
                   "declared properties, and the undeclared ones as one, since it cannot keep their names distinct)")
        min_p = countable
    sep = seq(ws, Lit(","), ws)
    needs_witness = witness_spec is not None
    tracked = _tracked_in_any_order(known, required, min_p, max_p) if host.any_order else None
    orders = [known] if tracked is not None else property_orders(known, required)
    direct = tracked is None and not needs_witness and max_p is None and min_p <= 1  # the common shape
    try:
        bodies = [
            _in_order(host.builder, listed, extra, min_p, sep, name) if direct else
            _members(host.builder, listed, extra, witness, needs_witness, min_p, max_p, sep, name, tracked)
            for listed in ([entries[k] for k in order] for order in orders)
        ]
    except TooComplexError as exc:
        pointer = next(f.pointer("maxProperties") for f in facets if "maxProperties" in f.kw)
        raise SchemaError(f"object members: {exc}", pointer, "maxProperties", code=SCHEMA_TOO_LARGE) from exc
    return seq(Lit("{"), ws, alt(*bodies), ws, Lit("}"))


def property_orders(known: list[str], required: list[str]) -> list[list[str]]:
    """The orders in which declared properties may appear: schema order and, when it differs,
    the ``required`` ones first (in the order ``required`` lists them), then the others in
    schema order. Each property appears at most once either way."""
    first = [k for k in required if k in known]
    second = first + [k for k in known if k not in first]
    return [known] if second == known else [known, second]


def _tracked_in_any_order(known: list[str], required: list[str], min_p: int, max_p: int | None) -> int | None:
    """The bit set of declared properties whose presence the any-order automaton tracks (each
    then appears at most once; the others may repeat), or ``None`` to keep the schema order."""
    if len(known) <= MAX_ANY_ORDER:
        return (1 << len(known)) - 1
    if len(required) > MAX_ANY_ORDER or min_p > 1 or max_p is not None:
        return None
    return sum(1 << j for j, k in enumerate(known) if k in required)


def _outside(host: ObjectHost, spec: dict[str, Any], key: str) -> bool:
    """Whether ``key`` is one the negated ``additionalProperties`` applied to."""
    if key in spec["names"]:
        return False
    try:
        return not any(python_pattern(p).search(key) for p in spec["patterns"])
    except RegexError as exc:
        host.relax(spec["pointer"], "patternProperties", str(exc))
        return False


def _witness_spec(host: ObjectHost, facets: list[Facet]) -> dict[str, Any] | None:
    """The ``~extra-witness`` demand (from negating ``additionalProperties``): some member
    outside the named properties and patterns whose value fails the schema."""
    specs = [f for f in facets if "~extra-witness" in f.kw]
    if len(specs) > 1:
        host.relax(specs[1].loc.pointer, "not", "two negated 'additionalProperties' at once")
    return specs[0].kw["~extra-witness"] if specs else None


def _member_locs(host: ObjectHost, facet: Facet, key: str) -> list[Loc]:
    """The subschemas ``facet`` applies to the member named ``key``."""
    locs: list[Loc] = []
    matched = False
    if key in (facet.kw.get("properties") or {}):
        locs.append(facet.sub("properties", key))
        matched = True
    for pattern in facet.kw.get("patternProperties") or {}:
        try:
            hit = python_pattern(pattern).search(key) is not None
        except RegexError as exc:
            host.relax(facet.pointer("patternProperties", pattern), "patternProperties", str(exc))
            continue
        if hit:
            locs.append(facet.sub("patternProperties", pattern))
            matched = True
    if not matched and "additionalProperties" in facet.kw:
        locs.append(facet.sub("additionalProperties"))
    return locs


def _extra_members(
    host: ObjectHost,
    facets: list[Facet],
    known: list[str],
    name_locs: list[Loc],
    name: str,
    colon: MaybeExpr,
    witness: dict[str, Any] | None,
) -> tuple[MaybeExpr, MaybeExpr]:
    """Members whose names are not declared (one branch per distinct value constraint), and
    the subset of them that can serve as ``witness``."""
    patterns: list[tuple[int, str]] = []
    for i, f in enumerate(facets):
        patterns += [(i, p) for p in f.kw.get("patternProperties") or {}]
    if len(patterns) > MAX_PATTERNS:
        pointer = facets[patterns[0][0]].pointer("patternProperties")
        host.relax(pointer, "patternProperties", f"more than {MAX_PATTERNS} patternProperties")
        patterns = patterns[:MAX_PATTERNS]
    groups: dict[tuple[str, ...], list[frozenset[int]]] = {}
    group_locs: dict[tuple[str, ...], list[Loc]] = {}
    for size in range(len(patterns) + 1):
        for subset in itertools.combinations(range(len(patterns)), size):
            chosen = frozenset(subset)
            locs = []
            for i, f in enumerate(facets):
                mine = [n for n in chosen if patterns[n][0] == i]
                if mine:
                    locs += [f.sub("patternProperties", patterns[n][1]) for n in mine]
                elif "additionalProperties" in f.kw:
                    locs.append(f.sub("additionalProperties"))
            if any(loc.node is False for loc in locs):
                continue
            key = tuple(loc.pointer for loc in locs)
            groups.setdefault(key, []).append(chosen)
            group_locs[key] = locs
    branches: list[MaybeExpr] = []
    proofs: list[MaybeExpr] = []
    try:
        names_dfa = _names_dfa(host, name_locs)
        every = len(groups) == 1 and len(next(iter(groups.values()))) == 2 ** len(patterns)
        # the common case, "any name but the declared ones", is spelled from their trie directly
        direct = every and names_dfa is None and witness is None and bool(known) and plain_names(known)
        for index, (key, subsets) in enumerate(groups.items()):
            keys = None if direct else _key_language(host, patterns, subsets, every, names_dfa, known)
            if keys is not None and keys.empty:
                continue
            suffix = "additional" if not key else f"extra-{index + 1}"
            value = host.value_rule(group_locs[key], f"{name}-{suffix}")
            base = f"{name}-{suffix}-key"
            spelled = name_exclusion(host, known, base) if keys is None else _key_expr(host, keys, base)
            key_expr = host.builder.rule(base, spelled)
            branches.append(seq(QUOTE, key_expr, QUOTE, colon, value))
            if witness is not None:
                assert keys is not None
                proofs.append(_witness_member(host, witness, keys, group_locs[key], f"{name}-{suffix}", colon))
    except (TooComplexError, RegexError) as exc:
        host.relax(facets[0].loc.pointer, "patternProperties", f"property names: {exc}")
        return None, None
    extra = host.builder.rule(f"{name}-member", alt(*branches))
    return extra, host.builder.rule(f"{name}-witness", alt(*proofs))


def _witness_member(
    host: ObjectHost, witness: dict[str, Any], keys: DFA, locs: list[Loc], name: str, colon: MaybeExpr
) -> MaybeExpr:
    """Members of one group whose name avoids the witness's patterns and whose value fails
    the negated ``additionalProperties`` schema."""
    for pattern in witness["patterns"]:
        keys = intersect(keys, pattern_language(pattern).complement_dfa)
    if keys.empty:
        return None
    value_locs = locs + ([witness["not"]] if witness["not"] is not None else [])
    value = host.value_rule(value_locs, f"{name}-witness-value")
    key_expr = host.builder.rule(f"{name}-witness-key", _key_expr(host, keys, f"{name}-witness-key"))
    return seq(QUOTE, key_expr, QUOTE, colon, value)


def _names_dfa(host: ObjectHost, name_locs: list[Loc]) -> DFA | None:
    """The ``propertyNames`` constraint as one automaton (``None``: unconstrained)."""
    result: DFA | None = None
    for loc in name_locs:
        finite, specs = host.name_spec(loc)
        parts: list[DFA] = []
        if finite is not None:
            parts.append(dfa_from_strings(finite))
        for spec in specs:
            parts.append(string_automaton(spec))
        if not parts:
            return DFA((), ())
        merged = parts[0]
        for part in parts[1:]:
            merged = union(merged, part)
        result = merged if result is None else intersect(result, merged)
    return result


def _key_language(
    host: ObjectHost,
    patterns: list[tuple[int, str]],
    subsets: list[frozenset[int]],
    every: bool,
    names: DFA | None,
    known: list[str],
) -> DFA | None:
    if every:
        dfa = names if names is not None else dfa_length(0, None)
    else:
        listed = tuple(pattern for _, pattern in patterns)
        matched = tuple(tuple(n in chosen for n in range(len(listed))) for chosen in subsets)
        key = ("matched by any", listed, matched)
        if key not in host.derived:  # objects with the same patternProperties: built once
            dfa = DFA((), ())
            for one in matched:
                dfa = union(dfa, _matched_by(host, listed, one))
            host.derived[key] = dfa
        dfa = host.derived[key]
        if names is not None:
            dfa = intersect(dfa, names)
    if known:
        key = ("other names", tuple(known))
        if key not in host.derived:  # objects often declare the same properties: built once
            host.derived[key] = complement(dfa_from_strings(known))
        others = host.derived[key]
        dfa = others if every and names is None else intersect(dfa, others)
    return dfa


def _matched_by(host: ObjectHost, patterns: tuple[str, ...], matched: tuple[bool, ...]) -> DFA:
    """Names that each of ``patterns`` matches or not, as ``matched`` says. Kept for the
    conversion: the groups of one object, and objects with the same ``patternProperties``,
    share the prefixes."""
    if not patterns:
        return dfa_length(0, None)
    key = ("matched by", patterns, matched)
    if key not in host.derived:
        language = pattern_language(patterns[-1])
        last = language.dfa() if matched[-1] else language.complement_dfa
        host.derived[key] = intersect(_matched_by(host, patterns[:-1], matched[:-1]), last)
    return host.derived[key]


def _key_expr(host: ObjectHost, keys: DFA, base: str) -> MaybeExpr:
    if len(keys.accept) == 1 and keys.accept[0] and len(keys.edges[0]) == 1:
        charset, _ = keys.edges[0][0]
        if charset == ANY:
            return rep(host.char_rule(), 0, None)
    return emit_json_dfa(host, keys, base)


def _members(
    builder: GrammarBuilder,
    entries: list[tuple[MaybeExpr, bool, MaybeExpr]],
    extra: MaybeExpr,
    witness: MaybeExpr,
    needs_witness: bool,
    min_p: int,
    max_p: int | None,
    sep: MaybeExpr,
    name: str,
    tracked: int | None,
) -> MaybeExpr:
    """Comma-separated members: the entries in order (each at most once, optional unless
    required), or in any order when ``tracked`` is the bit set of entries kept to at most once
    (the others may repeat), with extra (undeclared) members allowed before, between and after
    them; the count stays in ``[min_p, max_p]`` and, when ``needs_witness``, some entry or extra
    member is a witness (its witness form: ``entries[i][2]`` or ``witness``).

    A member that may repeat (an extra one, or an untracked entry) can be followed by a
    duplicate key, and a JSON parser keeps the last value: so once the witness is such a
    member, no repeatable member may follow it (the witness is the last of them).

    States ``(d, c, e, w)``: ``d`` the entries done (in order: how many were passed; in any
    order: the bit set of tracked ones written), ``c`` entries and ``e`` extra members so far
    (saturating at what ``min_p`` and the separator need), ``w`` the witness: ``NO_WITNESS``
    (still needed), ``WITNESSED``, or ``LAST_REPEATABLE`` (given by a repeatable member).
    ``max_p`` bounds the links a path takes (:func:`~structspec.ir.counted.emit_counted`), so
    a large maximum costs no state per count. The common shape (entries in order, no witness,
    no ``maxProperties``, ``minProperties`` at most 1) is written directly by :func:`_in_order`
    instead, in the same language."""
    cap = max(min_p, 1)
    n = len(entries)
    needed_bits = sum(1 << j for j, (_, needed, _) in enumerate(entries) if needed)
    edges: dict[object, list[tuple[MaybeExpr, object]]] = {}
    accept: set[object] = set()
    start = (0, 0, 0, NO_WITNESS if needs_witness else WITNESSED)
    todo = [start]
    seen = {start}

    def go(state: object, label: MaybeExpr, target: tuple[int, int, int, int]) -> None:
        if label is None:
            return
        edges.setdefault(state, []).append((label, target))
        if target not in seen:
            seen.add(target)
            todo.append(target)

    while todo:
        check()
        state = todo.pop()
        edges.setdefault(state, [])
        d, c, e, w = state
        lead = sep if c + e else EMPTY
        complete = d & needed_bits == needed_bits if tracked is not None else d == n
        if complete and c + min(e, 1) >= min_p and w != NO_WITNESS:
            accept.add(state)
        if tracked is not None:
            steps = [(j, d | ((1 << j) & tracked)) for j in range(n) if not d >> j & 1]
        else:
            steps = [(d, d + 1)] if d < n else []
            if d < n and not entries[d][1]:
                go(state, EMPTY, (d + 1, c, e, w))
        for j, after in steps:
            member, _, proof = entries[j]
            repeatable = tracked is not None and not tracked >> j & 1
            if not (repeatable and w == LAST_REPEATABLE):
                go(state, seq(lead, member), (after, min(c + 1, cap), e, w))
                if w == NO_WITNESS:
                    given = LAST_REPEATABLE if repeatable else WITNESSED
                    go(state, seq(lead, proof), (after, min(c + 1, cap), e, given))
        if w != LAST_REPEATABLE:
            go(state, seq(lead, extra), (d, c, 1, w))
            if w == NO_WITNESS:
                go(state, seq(lead, witness), (d, c, 1, LAST_REPEATABLE))
    if max_p is None:
        return emit_graph(edges, accept, start, builder, f"{name}-rest")
    return emit_counted(edges, accept, start, max_p, builder, f"{name}-rest")


def _in_order(
    builder: GrammarBuilder,
    entries: list[tuple[MaybeExpr, bool, MaybeExpr]],
    extra: MaybeExpr,
    min_p: int,
    sep: MaybeExpr,
    name: str,
) -> MaybeExpr:
    """:func:`_members` for its common shape, written directly: entries in order, no witness,
    no ``maxProperties``, ``minProperties`` at most 1.

    With ``P(j) = sep e[j]`` (optional unless the entry is required) and ``X = sep extra``,
    what may follow a member when ``k`` entries are passed is ``T(k)``::

        T(k) = X* P(k+1) T(k+1)              T(n) = X*

    The list is an extra member and ``T(0)``, or entry ``j`` and ``T(j)`` when every entry
    before ``j`` is optional, or empty when all are and ``min_p`` is 0. Past
    :data:`SPLIT_CHAIN` entries, what follows a member while only entries were written is a
    chain of its own, ``U(k) = P(k+1) U(k+1) | X T(k)``, ``U(n) = (X T(n))?`` (entry ``j``
    is then followed by ``U(j)``): its rules hold no loop, so the compiler inlines runs of
    them, and a mask after a separator need not call through one rule per optional entry
    left. Each ``T(k)`` and ``U(k)`` used twice (``k < n``) is a rule, and so is every
    :data:`~structspec.ir.automaton.MAX_INLINE_DEPTH`-th ``U(k)`` of a run that would nest one in
    another (the parser's nesting limit); the others are written in place. This is the language
    of the general member automaton, whose states that differ only in how many entries and
    extra members were written (up to one each) are one here."""
    members = [(member, needed) for member, needed, _ in entries if member is not None]
    steps = [seq(sep, member) if needed else rep(seq(sep, member), 0, 1) for member, needed in members]
    n = len(members)
    first = next((j + 1 for j, (_, needed) in enumerate(members) if needed), n)  # entries that may come first
    split = n > SPLIT_CHAIN
    other = seq(sep, extra)
    loop = rep(other, 0, None)
    t_uses = [int(extra is not None)]  # by the first member, T(k - 1) and U(k)
    for k in range(1, n + 1):
        t_uses.append(int(t_uses[k - 1] > 0) + (int(extra is not None) if split else int(k <= first)))
    u_uses = [0] + [int(k <= first) + int(k > 1) for k in range(1, n + 1)] if split else [0] * (n + 1)
    t_names = {k: builder.fresh(f"{name}-rest-{k}") for k in range(n) if t_uses[k] > 1}
    named, below = [], 0  # below: levels of U(k + 1) written in place
    for k in range(n - 1, 0, -1):
        if u_uses[k] > 1 or below + 1 >= MAX_INLINE_DEPTH:  # a U(k) in place nests its successor
            named.append(k)
            below = 0
        elif u_uses[k]:
            below += 1
    u_names = {k: builder.fresh(f"{name}-next-{k}") for k in reversed(named)}
    t_tails: list[MaybeExpr] = [None] * n + [loop]
    u_tails: list[MaybeExpr] = [None] * n + [rep(seq(other, loop), 0, 1)]

    def rest(k: int) -> MaybeExpr:
        return Ref(t_names[k]) if k in t_names else t_tails[k]

    def after(k: int) -> MaybeExpr:
        if not split:
            return rest(k)
        return Ref(u_names[k]) if k in u_names else u_tails[k]

    for k in range(n - 1, -1, -1):
        if t_uses[k]:
            t_tails[k] = seq(loop, steps[k], rest(k + 1))
        if u_uses[k]:
            u_tails[k] = alt(seq(steps[k], after(k + 1)), seq(other, rest(k)))
    for k, rule in t_names.items():
        builder.define(rule, t_tails[k])  # type: ignore[arg-type]
    for k, rule in u_names.items():
        builder.define(rule, u_tails[k])  # type: ignore[arg-type]
    firsts = [seq(extra, rest(0))] + [seq(members[j - 1][0], after(j)) for j in range(1, first + 1)]
    if min_p == 0 and not any(needed for _, needed in members):
        firsts.append(EMPTY)
    return alt(*firsts)
