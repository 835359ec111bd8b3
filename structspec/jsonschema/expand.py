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
from collections.abc import Iterable
from typing import Any, Protocol

from structspec.errors import SchemaError
from structspec.jsonschema.facets import (
    ATOMS,
    Alternative,
    Facet,
    RefFacet,
    alternative_types,
    split,
    synthetic,
)
from structspec.jsonschema.resolve import Document, Loc

MAX_ALTERNATIVES = 256


class Context(Protocol):
    doc: Document

    def relax(self, pointer: str, keyword: str, message: str) -> None: ...

    def is_valid(self, value: Any, loc: Loc) -> bool: ...


class Expander:
    """Turns schema nodes into lists of alternatives for one converter run."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.draft = ctx.doc.draft

    # -- positive ----------------------------------------------------------------------------
    def expand(self, loc: Loc, chain: frozenset[str] = frozenset()) -> list[Alternative]:
        node = loc.node
        if node is True or node == {}:
            return [()]
        if node is False:
            return []
        if not isinstance(node, dict):
            raise SchemaError("a schema must be an object or a boolean", loc.pointer, "")
        facet, comb = split(loc, self.draft)
        has_facet = any(not k.startswith("~") for k in facet.kw)
        if "enum" in facet.kw or "const" in facet.kw:
            return [(facet,)]  # a finite set: candidates are checked against the whole node
        ref = self._ref_target(loc, comb)
        if ref is not None and not has_facet and len(comb) == 1:
            return [(RefFacet(ref, chain),)]
        alts: list[Alternative] = [(facet,)] if has_facet else [()]
        if ref is not None:
            alts = self.product(alts, self.inline(ref, chain, loc))
        for i, _ in enumerate(comb.get("allOf", ())):
            alts = self.product(alts, self.expand(loc.child("allOf", i), chain))
        if "anyOf" in comb:
            branches = [self.expand(loc.child("anyOf", i), chain) for i in range(len(comb["anyOf"]))]
            alts = self.product(alts, self.prune([a for b in branches for a in b], loc, "anyOf"))
        if "oneOf" in comb:
            alts = self.product(alts, self.one_of(loc, chain))
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
            merged = a + b
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
                result = [r + (part,) for r in result]
        return result

    def prune(self, alts: list[Alternative], loc: Loc | None, keyword: str) -> list[Alternative]:
        out = []
        seen: set[tuple[int, ...]] = set()
        for alt in alts:
            key = tuple(sorted(id(p) for p in alt))
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
    def one_of(self, loc: Loc, chain: frozenset[str]) -> list[Alternative]:
        count = len(loc.node["oneOf"])
        subs = [loc.child("oneOf", i) for i in range(count)]
        branches = [self.expand(sub, chain) for sub in subs]
        out: list[Alternative] = []
        for i in range(count):
            alts = branches[i]
            for j in range(count):
                if j != i and alts and not self.disjoint(branches[i], branches[j]):
                    negated = self.negate(subs[j], chain, keyword="oneOf")
                    alts = self.product(alts, negated)
            out += alts
        return self.prune(out, loc, "oneOf")

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
                absent = (synthetic({"properties": {name: Loc(False, here.pointer, here.base)}}, here),)
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
        for x, y in ((a, b), (b, a)):
            for name in _required(x):
                if _forbidden(y, name):
                    return True
                if name not in _required(y):
                    continue
                values = self.property_values(x, name)
                if values is not None and all(self._excludes_property(y, name, v) for v in values):
                    return True
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

    def property_values(self, alt: Alternative, name: str) -> list[Any] | None:
        for part in alt:
            if isinstance(part, Facet) and name in (part.kw.get("properties") or {}):
                sub = part.sub("properties", name)
                alts = self.expand(sub) if isinstance(sub.node, (dict, bool)) else []
                collected: list[Any] = []
                for inner in alts:
                    values = self.finite_values(inner)
                    if values is None:
                        break
                    collected += [v for v in values if self.ctx.is_valid(v, sub)]
                else:
                    return collected
        return None

    def _excludes_property(self, alt: Alternative, name: str, value: Any) -> bool:
        for part in alt:
            if isinstance(part, Facet) and part.positive and name in (part.kw.get("properties") or {}):
                if not self.ctx.is_valid(value, part.sub("properties", name)):
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
            raise SchemaError("a schema must be an object or a boolean", loc.pointer, "")
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
            self.ctx.relax(loc.pointer + "/oneOf", keyword, "cannot negate 'oneOf'")
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
                                        "properties": {other: Loc(False, here.pointer, here.base)},
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
            yield make({"properties": {name: Loc(False, facet.pointer("required"), loc.base)}}, "object")
        for name in kw.get("properties") or {}:
            sub = facet.sub("properties", name)
            neg = Loc({"not": sub.node}, sub.pointer, sub.base)
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
        if "items" in kw and "prefixItems" not in kw:
            sub = facet.sub("items")
            yield make({"contains": Loc({"not": sub.node}, sub.pointer, sub.base)}, "array")
        if kw.get("additionalProperties") is False and not kw.get("properties") and not kw.get("patternProperties"):
            yield make({"minProperties": 1}, "object")
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
        if kw.get("additionalProperties") is False and not kw.get("patternProperties"):
            if not kw.get("properties"):
                handled.add("additionalProperties")
        for key in kw:
            if key not in handled and not key.startswith("~"):
                self.ctx.relax(facet.pointer(key), keyword, f"cannot negate {key!r}")


def _required(alt: Alternative) -> set[str]:
    out: set[str] = set()
    for part in alt:
        if isinstance(part, Facet):
            out |= {n for n in part.kw.get("required") or [] if isinstance(n, str)}
    return out


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
