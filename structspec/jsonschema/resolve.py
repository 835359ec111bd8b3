"""Schema documents: which draft they follow, and where each ``$ref`` lands.

Every embedded resource (``$id``) and anchor (``$anchor``, plain-name ``$id: "#a"``,
``$dynamicAnchor``) of the document is indexed up front, so references resolve without any
network access. A reference to anything outside the document is a :class:`SchemaError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from structspec.budget import MAX_NESTING
from structspec.errors import SCHEMA_INVALID, SCHEMA_TOO_DEEP, SchemaError

DEFAULT_BASE = "https://structspec.invalid/schema.json"

# keywords whose value is a subschema / a map of subschemas / a list of subschemas; only these
# are searched for embedded resources ($id inside an unknown keyword identifies nothing)
SCHEMA_KEYWORDS = {
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalItems",
    "contains",
    "propertyNames",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
}
MAP_KEYWORDS = {
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
}
LIST_KEYWORDS = {"allOf", "anyOf", "oneOf", "prefixItems", "items"}


def detect_draft(schema: Any) -> int:
    """4, 6, 7, 2019 or 2020 from ``$schema`` (2020 when absent or unknown)."""
    uri = schema.get("$schema", "") if isinstance(schema, dict) else ""
    if not isinstance(uri, str):
        uri = ""
    if "draft-03" in uri:
        raise SchemaError("draft-03 schemas are not supported (draft 4 or later)", "/$schema", "$schema")
    for marker, draft in (
        ("draft-04", 4),
        ("draft-06", 6),
        ("draft-07", 7),
        ("2019-09", 2019),
        ("2020-12", 2020),
    ):
        if marker in uri:
            return draft
    return 2020


@dataclass(frozen=True)
class Loc:
    """A schema node, the JSON pointer that reaches it, and its base URI.

    ``depth`` is the node's nesting level as the converter reaches it: 1 at the root, one more
    for each subschema step and for each ``$ref`` followed. Every recursion of the converter
    goes through a deeper :class:`Loc`, so refusing one deeper than :data:`MAX_NESTING` bounds
    them all.
    """

    node: Any
    pointer: str
    base: str
    depth: int = field(default=1, compare=False)

    def child(self, *path: str | int) -> Loc:
        """The subschema at ``path`` below this node (its ``$id`` applied): one level deeper."""
        node = self.node
        for step in path:
            node = node[step]
        pointer = self.pointer + "".join("/" + escape_pointer(str(step)) for step in path)
        return Loc(node, pointer, rebase(self.base, node), nested(self.depth + 1, pointer))

    def wrap(self, node: Any) -> Loc:
        """A made-up ``node`` (e.g. ``{"not": ...}``) standing at this location and level."""
        return Loc(node, self.pointer, self.base, self.depth)


def nested(depth: int, pointer: str) -> int:
    """``depth``, after checking it against :data:`MAX_NESTING`."""
    if depth > MAX_NESTING:
        raise SchemaError(
            f"the schema nests deeper than {MAX_NESTING} levels (each subschema and each $ref followed "
            "is one level)",
            pointer,
            "",
            code=SCHEMA_TOO_DEEP,
        )
    return depth


def escape_pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def rebase(base: str, node: Any) -> str:
    """The base URI inside ``node``."""
    if isinstance(node, dict):
        ident = node.get("$id")
        if isinstance(ident, str) and not ident.startswith("#"):
            return urldefrag(urljoin(base, ident))[0]
    return base


class Document:
    """Index of the resources and anchors of one schema document."""

    def __init__(self, schema: Any) -> None:
        self.draft = detect_draft(schema)
        self.root = Loc(schema, "", rebase(DEFAULT_BASE, schema))
        self.resources: dict[str, Loc] = {}
        self.anchors: dict[str, Loc] = {}
        self.dynamic: dict[str, list[Loc]] = {}
        self._index(self.root)
        legacy = schema.get("id") if self.draft == 4 and isinstance(schema, dict) else None
        if isinstance(legacy, str) and not legacy.startswith("#"):
            # draft 4 spells the root's identifier ``id``: references may name the document by it
            self.resources.setdefault(urldefrag(urljoin(DEFAULT_BASE, legacy))[0], self.root)

    def _index(self, loc: Loc) -> None:
        stack = [loc]
        while stack:
            here = stack.pop()
            node = here.node
            if not isinstance(node, dict):
                continue
            if "$id" in node or here is loc:
                self.resources.setdefault(here.base, here)
            ident = node.get("$id")
            if isinstance(ident, str) and ident.startswith("#") and len(ident) > 1:
                self.anchors.setdefault(f"{here.base}#{ident[1:]}", here)
            for key in ("$anchor", "$dynamicAnchor"):
                name = node.get(key)
                if isinstance(name, str):
                    self.anchors.setdefault(f"{here.base}#{name}", here)
                    if key == "$dynamicAnchor":
                        self.dynamic.setdefault(name, []).append(here)
            stack.extend(_children(here))

    def resolve(self, ref: str, at: Loc, keyword: str = "$ref") -> Loc:
        """The node ``ref`` (found in the node ``at``) points to, one level below ``at``."""
        found = self._find(ref, at, keyword)
        return replace(found, depth=nested(at.depth + 1, at.pointer + "/" + keyword))

    def _find(self, ref: str, at: Loc, keyword: str) -> Loc:
        target = at.base + ref if ref.startswith("#") else urljoin(at.base, ref)
        uri, fragment = urldefrag(target)
        where = at.pointer + "/" + keyword
        doc = self.resources.get(uri)
        if doc is None:
            raise SchemaError(f"reference {ref!r} leaves the document (not supported)", where, keyword)
        if not fragment:
            return doc
        if not fragment.startswith("/"):
            found = self.anchors.get(f"{uri}#{fragment}")
            if found is None:
                raise SchemaError(f"reference {ref!r}: no such anchor", where, keyword, code=SCHEMA_INVALID)
            return found
        loc = doc
        for raw in fragment.split("/")[1:]:
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            node = loc.node
            step: str | int = token
            if isinstance(node, list) and token.isdigit() and int(token) < len(node):
                step = int(token)
            elif not (isinstance(node, dict) and token in node):
                raise SchemaError(f"reference {ref!r} points nowhere", where, keyword, code=SCHEMA_INVALID)
            inner = node[step]  # a pointer's steps need not be subschemas: its level is set by resolve()
            loc = Loc(inner, f"{loc.pointer}/{escape_pointer(token)}", rebase(loc.base, inner))
        return loc


def _children(loc: Loc) -> list[Loc]:
    node = loc.node
    out: list[Loc] = []
    for key, value in node.items():
        if isinstance(value, dict):
            if key in MAP_KEYWORDS:
                out += [loc.child(key, name) for name, sub in value.items() if isinstance(sub, dict)]
            elif key in SCHEMA_KEYWORDS:
                out.append(loc.child(key))
        elif isinstance(value, list) and key in LIST_KEYWORDS:
            out += [loc.child(key, i) for i, sub in enumerate(value) if isinstance(sub, dict)]
    return out
