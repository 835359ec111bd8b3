"""Flat conjuncts of a schema ("facets") in one draft-independent form.

A :class:`Facet` holds the assertion keywords of one schema node, rewritten to 2020-12
spelling (draft-4 boolean ``exclusiveMinimum``, array-form ``items`` + ``additionalItems``,
``dependencies``), without the combinators (``allOf``, ``anyOf``, ``$ref``, ...), which
:mod:`structspec.jsonschema.expand` turns into alternatives. Facets built by negation carry
internal keywords (``~not-enum``, ``~not-pattern``) and synthetic subschemas as :class:`Loc`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from structspec.errors import SCHEMA_TOO_LARGE, SchemaError
from structspec.jsonschema.resolve import Loc

MAX_COUNT = 2**64  # the largest length, item or member count a grammar is built to count to

ATOMS = frozenset({"null", "boolean", "object", "array", "string", "integer", "fraction"})
TYPE_ATOMS = {
    "null": {"null"},
    "boolean": {"boolean"},
    "object": {"object"},
    "array": {"array"},
    "string": {"string"},
    "integer": {"integer"},
    "number": {"integer", "fraction"},
}
COMBINATORS = (
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
)
ASSERTIONS = {
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "items",
    "prefixItems",
    "contains",
    "maxContains",
    "minContains",
    "maxItems",
    "minItems",
    "uniqueItems",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "required",
    "maxProperties",
    "minProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "x-grounded",
    "~not-enum",
    "~not-pattern",
    "~extra-witness",
    "~not-format",
}


@dataclass(frozen=True, eq=False)
class Facet:
    """Assertion keywords of one node. ``origin`` maps an internal keyword to the keyword
    spelled in the source (``prefixItems`` -> ``items`` in older drafts)."""

    kw: dict[str, Any]
    loc: Loc
    origin: dict[str, str] = field(default_factory=dict)
    positive: bool = True

    def pointer(self, keyword: str, *path: str | int) -> str:
        steps = [self.origin.get(keyword, keyword), *map(str, path)]
        return self.loc.pointer + "".join("/" + s.replace("~", "~0").replace("/", "~1") for s in steps)

    def count(self, keyword: str, *, lower: bool) -> int | None:
        """The count a length or size keyword (``minLength``, ``maxItems``, ...) sets, rounded
        inwards (up for a ``lower`` bound, down for an upper one); None where it sets none. A
        count past :data:`MAX_COUNT` is refused with a :class:`~structspec.SchemaError` here."""
        value = self.kw.get(keyword)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if value > MAX_COUNT:
            raise SchemaError(f"{keyword} is past 2**64, the largest count a grammar is built for",
                              self.pointer(keyword), keyword, code=SCHEMA_TOO_LARGE)
        return math.ceil(value) if lower else math.floor(value)

    def sub(self, keyword: str, *path: str | int) -> Loc:
        """The subschema under ``keyword`` (and ``path``) as a :class:`Loc`."""
        value = self.kw[keyword]
        for step in path:
            value = value[step]
        if isinstance(value, Loc):
            return value
        return self.loc.child(self.origin.get(keyword, keyword), *path)

    def types(self) -> frozenset[str]:
        """Type atoms this facet allows (all of them when it has no ``type``)."""
        declared = self.kw.get("type")
        if declared is None:
            return ATOMS
        if isinstance(declared, (set, frozenset)):
            return frozenset(declared)
        names = declared if isinstance(declared, list) else [declared]
        out: set[str] = set()
        for name in names:
            if isinstance(name, str):
                out |= TYPE_ATOMS.get(name, set())
        return frozenset(out)


@dataclass(frozen=True, eq=False)
class RefFacet:
    """A whole referenced schema kept opaque, so it can become a named rule reference.
    ``chain``: pointers already being inlined where it was found (cycle detection)."""

    target: Loc
    chain: frozenset[str]
    source: Loc  # the node holding the ``$ref``

    def types(self) -> frozenset[str]:
        return ATOMS


Part = Facet | RefFacet
Alternative = tuple[Part, ...]


def split(loc: Loc, draft: int) -> tuple[Facet, dict[str, Any]]:
    """The facet of ``loc``'s node and its combinator keywords, in 2020-12 spelling."""
    node: dict[str, Any] = loc.node
    if "$ref" in node and draft <= 7:
        return Facet({}, loc), {"$ref": node["$ref"]}
    kw: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for key, value in node.items():
        if key in ASSERTIONS and not key.startswith("~"):
            kw[key] = value
    if draft == 4:
        for bound in ("Minimum", "Maximum"):
            flag = kw.pop("exclusive" + bound, None)
            if flag is True and bound.lower() in kw:
                kw["exclusive" + bound] = kw.pop(bound.lower())
                origin["exclusive" + bound] = bound.lower()
    if isinstance(kw.get("items"), list):
        kw["prefixItems"] = kw.pop("items")
        origin["prefixItems"] = "items"
        if "additionalItems" in node:
            kw["items"] = node["additionalItems"]
            origin["items"] = "additionalItems"
    if isinstance(kw.get("required"), bool):
        del kw["required"]
    if draft < 2019:  # unknown keywords before 2019-09: annotations only
        kw.pop("unevaluatedProperties", None)
        kw.pop("unevaluatedItems", None)
    comb = {key: node[key] for key in COMBINATORS if key in node}
    if isinstance(node.get("dependencies"), dict):
        comb["dependencies"] = node["dependencies"]
    return Facet(kw, loc, origin), comb


def synthetic(kw: dict[str, Any], loc: Loc) -> Facet:
    """A facet made up by the converter (negations, dependencies); never validated as is."""
    return Facet(kw, loc, positive=False)


def alternative_types(alt: Alternative) -> frozenset[str]:
    out = ATOMS
    for part in alt:
        out = out & part.types()
    return out
