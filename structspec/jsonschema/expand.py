"""Schemas as unions of flat conjunctions ("alternatives").

``expand`` rewrites combinators into disjunctive normal form: ``allOf`` multiplies,
``anyOf`` adds, ``oneOf`` adds branches that are provably disjoint and otherwise adds
``B_i and not B_j``, ``if``/``then``/``else`` becomes ``(if and then) or (not if and else)``,
dependencies become "absent, or present with what it needs". ``negate`` pushes ``not`` down
to keywords with an exact complement (type, enum/const, required, bounds, pattern, ...).
Anything else goes to ``relax`` (a :class:`SchemaError` in strict mode).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable
from typing import Any, Protocol

from structspec.budget import check
from structspec.errors import SCHEMA_INVALID, SchemaError
from structspec.ir.automaton import TooComplexError, intersect
from structspec.jsonschema.facets import (
    ATOMS,
    Alternative,
    Facet,
    RefFacet,
    alternative_types,
    split,
    synthetic,
)
from structspec.jsonschema.formats import UNSUPPORTED, format_regex
from structspec.jsonschema.resolve import Document, Loc
from structspec.jsonschema.strings import spec_from_facets, string_automaton
from structspec.jsonschema.values import value_key
from structspec.regex.parse import RegexError, python_pattern

MAX_ALTERNATIVES = 256
MAX_ANALYSIS_DEPTH = 2  # nesting of member-value comparisons when proving disjointness


class Context(Protocol):
    doc: Document

    def relax(self, pointer: str, keyword: str, message: str) -> None: ...

    def is_valid(self, value: Any, loc: Loc) -> bool: ...


class Expander:
    """Turns schema nodes into lists of alternatives for one converter run."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.draft = ctx.doc.draft
        self._analysis_depth = 0

    # -- positive ----------------------------------------------------------------------------
    def expand(self, loc: Loc, chain: frozenset[str] = frozenset()) -> list[Alternative]:
        node = loc.node
        if node is True or node == {}:
            return [()]
        if node is False:
            return []
        if not isinstance(node, dict):
            raise SchemaError("a schema must be an object or a boolean", loc.pointer, "", code=SCHEMA_INVALID)
        facet, comb = split(loc, self.draft)
        has_facet = any(not k.startswith("~") for k in facet.kw)
        if "enum" in facet.kw or "const" in facet.kw:
            return [(facet,)]  # a finite set: candidates are checked against the whole node
        ref = self._ref_target(loc, comb)
        if ref is not None and not has_facet and len(comb) == 1:
            return [(RefFacet(ref, chain, loc),)]
        alts: list[Alternative] = [(facet,)] if has_facet else [()]
        if ref is not None:
            alts = self.product(alts, self.inline(ref, chain, loc))
        for i, _ in enumerate(comb.get("allOf", ())):
            alts = self.product(alts, self.expand(loc.child("allOf", i), chain))
        if "anyOf" in comb:
            branches = [self.expand(loc.child("anyOf", i), chain) for i in range(len(comb["anyOf"]))]
            alts = self.product(alts, self.prune([a for b in branches for a in b], loc, "anyOf"))
        if "oneOf" in comb:
            alts = self.product(alts, self.one_of(loc, chain, alts))
        if "not" in comb:
            alts = self.product(alts, self.negate(loc.child("not"), chain))
        if "if" in comb and ("then" in comb or "else" in comb):
            alts = self.product(alts, self.if_then_else(loc, comb, chain))
        alts = self.dependencies(loc, comb, alts, chain)
        return alts

    def _ref_target(self, loc: Loc, comb: dict[str, Any]) -> Loc | None:
        doc = self.ctx.doc
        if "$ref" in comb and isinstance(comb["$ref"], str):
            return doc.resolve(comb["$ref"], loc)
        if "$recursiveRef" in comb:
            return doc.resolve(comb["$recursiveRef"], loc, "$recursiveRef")
        if "$dynamicRef" in comb:
            ref = comb["$dynamicRef"]
            name = ref.split("#", 1)[-1]
            if len(doc.dynamic.get(name, [])) > 1:
                self.ctx.relax(
                    loc.pointer + "/$dynamicRef",
                    "$dynamicRef",
                    "dynamic reference with several possible targets",
                )
            return doc.resolve(ref, loc, "$dynamicRef")
        return None

    def inline(self, target: Loc, chain: frozenset[str], at: Loc) -> list[Alternative]:
        if target.pointer in chain:
            raise SchemaError("reference cycle that matches no input in between", at.pointer, "$ref")
        return self.expand(target, chain | {target.pointer})

    def product(self, left: list[Alternative], right: list[Alternative]) -> list[Alternative]:
        out: list[Alternative] = []
        for a, b in itertools.product(left, right):
            merged = _unique_parts(a + b)
            if len(merged) > 1 and any(isinstance(p, RefFacet) for p in merged):
                out += self.open_refs(merged)
            else:
                out.append(merged)
        return self.prune(out, None, "allOf")

    def open_refs(self, alt: Alternative) -> list[Alternative]:
        """Inline the opaque references of a conjunction that needs merging."""
        result: list[Alternative] = [()]
        for part in alt:
            if isinstance(part, RefFacet):
                result = self.product(result, self.inline(part.target, part.chain, part.target))
            else:
                result = [_unique_parts((*r, part)) for r in result]
        return result

    def prune(self, alts: list[Alternative], loc: Loc | None, keyword: str) -> list[Alternative]:
        out = []
        seen: set[tuple[int, ...]] = set()
        for alt in alts:
            key = tuple(sorted(map(_part_key, alt), key=repr))
            if key in seen or not alternative_types(alt):
                continue
            seen.add(key)
            out.append(alt)
        if len(out) > MAX_ALTERNATIVES:
            raise SchemaError(
                f"more than {MAX_ALTERNATIVES} combinations of subschemas",
                loc.pointer if loc else "",
                keyword,
            )
        return out

    # -- oneOf, if, dependencies -------------------------------------------------------------------
    def one_of(self, loc: Loc, chain: frozenset[str], context: list[Alternative]) -> list[Alternative]:
        """Branches that are disjoint (in the ``context`` of the other keywords of the node)
        stay as they are; otherwise branch ``i`` also gets ``not`` branch ``j``."""
        count = len(loc.node["oneOf"])
        subs = [loc.child("oneOf", i) for i in range(count)]
        branches = [self.expand(sub, chain) for sub in subs]
        if len(context) > 4:
            context = [()]
        views = [self.opened(self.product(context, b)) for b in branches]
        listed = self._listed_overlaps(views)
        unlisted = [j for j in range(count) if listed[j] is None]
        negated: dict[int, list[Alternative]] = {}
        out: list[Alternative] = []
        for i in range(count):
            alts = branches[i]
            mine = listed[i]
            if mine is None:
                others: Iterable[int] = range(count)
            else:  # only the views listing a value of its own, and those listing none, can overlap it
                others = sorted(mine.union(unlisted))
            for j in others:
                check()
                if j == i or not alts:
                    continue
                if j in mine if mine is not None and listed[j] is not None else not self.disjoint(views[i], views[j]):
                    if j not in negated:
                        negated[j] = self.negate(subs[j], chain, keyword="oneOf")
                    alts = self.product(alts, negated[j])
            out += alts
        return self.prune(out, loc, "oneOf")

    def _listed_overlaps(self, views: list[list[Alternative]]) -> list[set[int] | None]:
        """For each view whose alternatives all list their values (``enum``/``const``), the
        other such views listing a value it lists too (found through an index of values, not by
        comparing every pair); ``None`` for the other views. Views that list no common value
        are disjoint; views that do are treated as overlapping, which at worst adds a negation
        that changes nothing."""
        holders: dict[Hashable, set[int]] = {}
        finite: list[bool] = []
        for i, view in enumerate(views):
            listed = [_listed(alt) for alt in view]
            finite.append(all(values is not None for values in listed))
            if finite[-1]:
                for value in itertools.chain.from_iterable(listed):  # type: ignore[arg-type]
                    holders.setdefault(value_key(value), set()).add(i)
        out: list[set[int] | None] = [set() if f else None for f in finite]
        for sharing in holders.values():
            for i in sharing:
                out[i] |= sharing - {i}  # type: ignore[operator]
        return out

    def opened(self, alts: list[Alternative]) -> list[Alternative]:
        """The alternatives with opaque references inlined (for analysis only)."""
        out: list[Alternative] = []
        for alt in alts:
            if any(isinstance(p, RefFacet) for p in alt):
                try:
                    out += self.open_refs(alt)
                except SchemaError:
                    out.append(alt)
            else:
                out.append(alt)
        return out

    def if_then_else(self, loc: Loc, comb: dict[str, Any], chain: frozenset[str]) -> list[Alternative]:
        cond = loc.child("if")
        then = self.expand(loc.child("then"), chain) if "then" in comb else [()]
        other = self.expand(loc.child("else"), chain) if "else" in comb else [()]
        yes = self.product(self.expand(cond, chain), then)
        no = self.product(self.negate(cond, chain, keyword="if"), other)
        return self.prune(yes + no, loc, "if")

    def dependencies(
        self, loc: Loc, comb: dict[str, Any], alts: list[Alternative], chain: frozenset[str]
    ) -> list[Alternative]:
        for keyword in ("dependentRequired", "dependentSchemas", "dependencies"):
            for name, dep in (comb.get(keyword) or {}).items():
                here = loc.child(keyword, name)
                absent = (synthetic({"properties": {name: here.wrap(False)}}, here),)
                if isinstance(dep, list):
                    names = [name, *[d for d in dep if isinstance(d, str)]]
                    present = [(synthetic({"required": names}, here),)]
                else:
                    required = (synthetic({"required": [name]}, here),)
                    present = self.product([required], self.expand(here, chain))
                alts = self.product(alts, [absent, *present])
        return alts

    # -- disjointness ------------------------------------------------------------------------------
    def disjoint(self, left: list[Alternative], right: list[Alternative]) -> bool:
        return all(self._disjoint_pair(a, b) for a in left for b in right)

    def _disjoint_pair(self, a: Alternative, b: Alternative) -> bool:
        shared = alternative_types(a) & alternative_types(b)
        if not shared:
            return True
        for x, y in ((a, b), (b, a)):
            values = self.finite_values(x)
            if values is not None and all(self.excludes(y, v) for v in values):
                return True
        if shared <= {"object"}:
            return self._disjoint_objects(a, b)
        return False

    def _disjoint_objects(self, a: Alternative, b: Alternative) -> bool:
        """Objects of ``a`` and ``b`` differ on some member one side requires: the other side
        forbids it, or the two sides allow disjoint values for it."""
        for x, y in ((a, b), (b, a)):
            for name in _required(y):
                mine = _member_locs(x, name)
                if any(loc.node is False for loc in mine):
                    return True
                if self._values_disjoint(mine, _member_locs(y, name)):
                    return True
        return False

    def _values_disjoint(self, left: list[Loc], right: list[Loc]) -> bool:
        if not left or not right or self._analysis_depth >= MAX_ANALYSIS_DEPTH:
            return False
        self._analysis_depth += 1
        try:
            alts_l = self._conjunction(left)
            alts_r = self._conjunction(right)
            return all(self._disjoint_values(a, b, left, right) for a in alts_l for b in alts_r)
        except SchemaError:
            return False
        finally:
            self._analysis_depth -= 1

    def _conjunction(self, locs: list[Loc]) -> list[Alternative]:
        alts: list[Alternative] = [()]
        for loc in locs:
            alts = self.product(alts, self.opened(self.expand(loc)))
        return alts

    def _disjoint_values(self, a: Alternative, b: Alternative, la: list[Loc], lb: list[Loc]) -> bool:
        shared = alternative_types(a) & alternative_types(b)
        if not shared:
            return True
        for x, locs in ((a, lb), (b, la)):
            values = self.finite_values(x)
            if values is not None and all(any(not self.ctx.is_valid(v, loc) for loc in locs) for v in values):
                return True
        if shared == {"string"}:
            return self._strings_disjoint(a, b)
        return False

    def _strings_disjoint(self, a: Alternative, b: Alternative) -> bool:
        specs = []
        for alt in (a, b):
            facets = [p for p in alt if isinstance(p, Facet)]
            specs.append(spec_from_facets(facets, _ignore))
        try:
            left, right = (string_automaton(spec) for spec in specs)
            return intersect(left, right).empty
        except (TooComplexError, RegexError):
            return False

    def finite_values(self, alt: Alternative) -> list[Any] | None:
        """The candidate values of an alternative with ``enum``/``const``, else ``None``."""
        for part in alt:
            if isinstance(part, Facet) and ("enum" in part.kw or "const" in part.kw):
                values = part.kw["enum"] if "enum" in part.kw else [part.kw["const"]]
                if not isinstance(values, list):
                    return None
                return [v for v in values if not self.excludes(alt, v)]
        return None

    def excludes(self, alt: Alternative, value: Any) -> bool:
        """Whether some positive part of ``alt`` rejects ``value`` (so ``alt`` does)."""
        for part in alt:
            loc = part.target if isinstance(part, RefFacet) else part.loc
            if (isinstance(part, RefFacet) or part.positive) and not self.ctx.is_valid(value, loc):
                return True
        return False

    # -- negation ----------------------------------------------------------------------------------
    def negate(self, loc: Loc, chain: frozenset[str] = frozenset(), keyword: str = "not") -> list[Alternative]:
        node = loc.node
        if node is True or node == {}:
            return []
        if node is False:
            return [()]
        if not isinstance(node, dict):
            raise SchemaError("a schema must be an object or a boolean", loc.pointer, "", code=SCHEMA_INVALID)
        facet, comb = split(loc, self.draft)
        out: list[Alternative] = [(f,) for f in self.negate_facet(facet, keyword)]
        ref = self._ref_target(loc, comb)
        if ref is not None:
            if ref.pointer in chain:
                raise SchemaError("reference cycle inside 'not'", loc.pointer, "$ref")
            out += self.negate(ref, chain | {ref.pointer}, keyword)
        for i, _ in enumerate(comb.get("allOf", ())):
            out += self.negate(loc.child("allOf", i), chain, keyword)
        if "anyOf" in comb:
            acc: list[Alternative] = [()]
            for i in range(len(comb["anyOf"])):
                acc = self.product(acc, self.negate(loc.child("anyOf", i), chain, keyword))
            out += acc
        if "oneOf" in comb:
            subs = [loc.child("oneOf", i) for i in range(len(comb["oneOf"]))]
            none: list[Alternative] = [()]
            for sub in subs:
                none = self.product(none, self.negate(sub, chain, keyword))
            out += none
            for a, b in itertools.combinations(subs, 2):
                out += self.product(self.expand(a, chain), self.expand(b, chain))
        if "not" in comb:
            out += self.expand(loc.child("not"), chain)
        if "if" in comb and ("then" in comb or "else" in comb):
            cond = loc.child("if")
            if "then" in comb:
                out += self.product(self.expand(cond, chain), self.negate(loc.child("then"), chain, keyword))
            if "else" in comb:
                out += self.product(
                    self.negate(cond, chain, keyword),
                    self.negate(loc.child("else"), chain, keyword),
                )
        for dep_kw in ("dependentRequired", "dependentSchemas", "dependencies"):
            for name, dep in (comb.get(dep_kw) or {}).items():
                here = loc.child(dep_kw, name)
                if isinstance(dep, list):
                    for other in dep:
                        out.append(
                            (
                                synthetic(
                                    {
                                        "type": {"object"},
                                        "required": [name],
                                        "properties": {other: here.wrap(False)},
                                    },
                                    here,
                                ),
                            )
                        )
                else:
                    present = (synthetic({"type": {"object"}, "required": [name]}, here),)
                    out += self.product([present], self.negate(here, chain, keyword))
        return self.prune(out, loc, keyword)

    def negate_facet(self, facet: Facet, keyword: str) -> Iterable[Facet]:
        """One synthetic facet per way the facet's keywords can fail."""
        kw = facet.kw
        loc = facet.loc

        def make(extra: dict[str, Any], *types: str) -> Facet:
            body = dict(extra)
            if types:
                body["type"] = set(types)
            return synthetic(body, loc)

        if "type" in kw:
            rest = ATOMS - facet.types()
            if rest:
                yield make({}, *rest)
        if "enum" in kw or "const" in kw:
            values = kw["enum"] if "enum" in kw else [kw["const"]]
            yield make({"~not-enum": list(values)})
        for name in kw.get("required") or []:
            yield make({"properties": {name: Loc(False, facet.pointer("required"), loc.base, loc.depth)}}, "object")
        for name in kw.get("properties") or {}:
            sub = facet.sub("properties", name)
            neg = sub.wrap({"not": sub.node})
            yield make({"required": [name], "properties": {name: neg}}, "object")
        numeric = ("integer", "fraction")
        flips = {
            "minimum": ("exclusiveMaximum", numeric),
            "exclusiveMinimum": ("maximum", numeric),
            "maximum": ("exclusiveMinimum", numeric),
            "exclusiveMaximum": ("minimum", numeric),
        }
        for key, (other, types) in flips.items():
            if key in kw:
                yield make({other: kw[key]}, *types)
        counts = {
            "minLength": ("maxLength", "string"),
            "minItems": ("maxItems", "array"),
            "minProperties": ("maxProperties", "object"),
        }
        for low, (high, kind) in counts.items():
            if isinstance(kw.get(low), int) and kw[low] > 0:
                yield make({high: kw[low] - 1}, kind)
            if isinstance(kw.get(high), int):
                yield make({low: kw[high] + 1}, kind)
        if "pattern" in kw:
            yield make({"~not-pattern": [kw["pattern"]]}, "string")
        if isinstance(kw.get("format"), str) and format_regex(kw["format"]) is not None:
            yield make({"~not-format": [kw["format"]]}, "string")
        if "items" in kw and "prefixItems" not in kw:
            sub = facet.sub("items")
            yield make({"contains": sub.wrap({"not": sub.node})}, "array")
        if "additionalProperties" in kw:
            sub = facet.sub("additionalProperties")
            failing = None if sub.node is False else sub.wrap({"not": sub.node})
            witness = {
                "names": list(kw.get("properties") or {}),
                "patterns": list(kw.get("patternProperties") or {}),
                "pointer": facet.pointer("patternProperties"),
                "not": failing,
            }
            if sub.node is not True and sub.node != {}:
                yield make({"~extra-witness": witness}, "object")
        handled = {
            "type",
            "enum",
            "const",
            "required",
            "properties",
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "minProperties",
            "maxProperties",
            "pattern",
            *flips,
        }
        if "items" in kw and "prefixItems" not in kw:
            handled.add("items")
        if kw.get("uniqueItems") is False:
            handled.add("uniqueItems")
        handled.add("additionalProperties")
        if isinstance(kw.get("format"), str) and kw["format"] not in UNSUPPORTED:
            handled.add("format")  # supported ones are negated above; unknown ones assert nothing
        for key in kw:
            if key not in handled and not key.startswith("~"):
                self.ctx.relax(facet.pointer(key), keyword, f"cannot negate {key!r}")


def _listed(alt: Alternative) -> list[Any] | None:
    """The values the ``enum``/``const`` of ``alt`` lists (before any other check), else ``None``."""
    for part in alt:
        if isinstance(part, Facet) and ("enum" in part.kw or "const" in part.kw):
            values = part.kw["enum"] if "enum" in part.kw else [part.kw["const"]]
            return values if isinstance(values, list) else None
    return None


def _part_key(part: Facet | RefFacet) -> tuple[object, ...]:
    if isinstance(part, RefFacet):
        return ("ref", part.target.pointer, id(part.target.node))
    if part.positive:
        return ("facet", part.loc.pointer, id(part.loc.node))
    return ("synthetic", id(part))


def _unique_parts(alt: Alternative) -> Alternative:
    """``alt`` without repeated conjuncts (the same node reached twice)."""
    seen: set[tuple[object, ...]] = set()
    out = []
    for part in alt:
        key = _part_key(part)
        if key not in seen:
            seen.add(key)
            out.append(part)
    return tuple(out)


def _required(alt: Alternative) -> list[str]:
    """The names ``alt`` requires, each once, in the order the schema lists them: a proof of
    disjointness tries them in turn, and a discriminator (``type``, ``kind``) usually comes
    first and settles it cheaply, where a recursive member may cost seconds to compare."""
    out: dict[str, None] = {}
    for part in alt:
        if isinstance(part, Facet):
            out.update((n, None) for n in part.kw.get("required") or [] if isinstance(n, str))
    return list(out)


def _ignore(pointer: str, keyword: str, message: str) -> None:
    """Relaxation callback for analysis only: an unsupported keyword just proves nothing."""
    raise SchemaError(message, pointer, keyword)


def _member_locs(alt: Alternative, name: str) -> list[Loc]:
    """Every subschema the parts of ``alt`` apply to the member ``name``."""
    locs: list[Loc] = []
    for part in alt:
        if not isinstance(part, Facet):
            continue
        kw = part.kw
        matched = False
        if name in (kw.get("properties") or {}):
            locs.append(part.sub("properties", name))
            matched = True
        for pattern in kw.get("patternProperties") or {}:
            try:
                hit = python_pattern(pattern).search(name) is not None
            except RegexError:
                continue
            if hit:
                locs.append(part.sub("patternProperties", pattern))
                matched = True
        if not matched and "additionalProperties" in kw:
            locs.append(part.sub("additionalProperties"))
    return locs


def _forbidden(alt: Alternative, name: str) -> bool:
    for part in alt:
        if not isinstance(part, Facet):
            continue
        props = part.kw.get("properties") or {}
        if name in props:
            sub = part.sub("properties", name)
            if sub.node is False:
                return True
        elif part.kw.get("additionalProperties") is False and not part.kw.get("patternProperties"):
            return True
    return False
