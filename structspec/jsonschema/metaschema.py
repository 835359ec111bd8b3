"""Checking a schema against its draft's metaschema, quickly.

The draft 2020-12 metaschema is split into vocabulary documents joined by ``$dynamicRef``,
which ``jsonschema`` resolves through the dynamic scope at every subschema: validating a
typical schema against it takes tens of milliseconds, more than converting it. Here the
vocabularies are merged into one document in which every ``$dynamicRef: "#meta"`` is a plain
``$ref: "#"``. That is the same check: the dynamic anchor ``meta`` resolves to the outermost
document that declares it, and the merged document is that outermost one.

Most schemas are valid, and even the merged check walks ``jsonschema``'s general machinery (a
validator evolved per subschema, errors as generators): so each draft's metaschema is also compiled
once into plain predicates over the few keywords it uses (:func:`_fast_check`; drafts 4, 6, 7
and 2020-12 merged). A schema they accept is valid; any other goes through ``jsonschema``, which
finds the error and its place. A metaschema needing any other keyword is not compiled. (The
compiled keywords follow ``jsonschema``'s own functions for them, private names of that
package: a release that moves or renames them leaves every draft to the slow way, still exact.)
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

try:
    from jsonschema import _keywords, _legacy_keywords
except ImportError:  # a release without these private modules: every draft is checked the slow way
    _keywords = _legacy_keywords = None

_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/"
_RESOURCE_KEYWORDS = ("$schema", "$id", "$vocabulary", "$dynamicAnchor", "$defs", "title", "$comment")


def metaschema_error(cls: type, schema: Any) -> ValidationError | None:
    """The most relevant violation of the metaschema of ``cls`` (a ``jsonschema`` validator
    class) by ``schema``, or None.

    Repeated entries (``uniqueItems`` of the metaschema, e.g. an ``enum`` listing a value twice)
    are harmless and not checked, at any depth: ``jsonschema`` compares every pair of items that
    do not sort (an ``enum`` mixing numbers and strings), which takes seconds for a few thousand.
    """
    valid = _fast_check(cls)
    if valid is not None and valid(schema):
        return None
    return best_match(_meta_validator(cls).iter_errors(schema))


@functools.cache
def _meta_validator(cls: type) -> Any:
    """``cls``'s metaschema checked without ``uniqueItems`` (see :func:`metaschema_error`). Its
    root loses ``$schema``: below a ``$ref: "#"`` (every subschema of a schema) ``jsonschema``
    would otherwise go on with the dialect's own validator class, which checks them again."""
    checker = jsonschema.validators.extend(cls, {"uniqueItems": _no_errors})
    document = cls.META_SCHEMA
    if cls is jsonschema.Draft202012Validator:
        with contextlib.suppress(ValueError):  # a release whose metaschema no longer merges: the slow way
            document = _merged_2020_12()
    return checker({key: value for key, value in document.items() if key != "$schema"})


def _no_errors(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    return iter(())


def _merged_2020_12() -> dict[str, Any]:
    """The 2020-12 metaschema as one document without dynamic references, its vocabularies'
    keyword descriptions side by side in one ``properties`` (one pass per subschema instead of
    one per vocabulary)."""
    from jsonschema_specifications import REGISTRY

    root = jsonschema.Draft202012Validator.META_SCHEMA
    defs: dict[str, Any] = {}
    parts = []
    for entry in root["allOf"]:
        name = entry["$ref"].removeprefix("meta/")
        vocabulary = REGISTRY.contents(_DRAFT_2020_12 + entry["$ref"])
        for key, body in vocabulary.get("$defs", {}).items():
            defs[f"{name}-{key}"] = _rewrite(body, name)
        parts.append(_rewrite({k: v for k, v in vocabulary.items() if k not in _RESOURCE_KEYWORDS}, name))
    parts.append(_rewrite({k: v for k, v in root.items() if k not in (*_RESOURCE_KEYWORDS, "allOf")}, ""))
    merged: dict[str, Any] = {"$defs": defs, "properties": {}}
    for part in parts:  # each vocabulary describes its own keywords: one ``properties`` holds them all
        if set(part) - {"type", "properties"} or part["type"] != ["object", "boolean"] or (
            set(part["properties"]) & set(merged["properties"])
        ):
            raise ValueError("the 2020-12 metaschema vocabularies no longer merge into one document")
        merged["properties"].update(part["properties"])
    merged["type"] = ["object", "boolean"]
    return merged


def _merged_reference(reference: str, vocabulary: str) -> str:
    """``#/$defs/x`` in a vocabulary, or ``meta/vocabulary#/$defs/x`` from the root, merged."""
    document, _, fragment = reference.partition("#")
    if not fragment.startswith("/$defs/") or (document and not document.startswith("meta/")):
        raise ValueError(f"unexpected reference {reference!r} in the 2020-12 metaschema")
    owner = document.removeprefix("meta/") or vocabulary
    return f"#/$defs/{owner}-{fragment.removeprefix('/$defs/')}"


def _rewrite(node: Any, vocabulary: str) -> Any:
    """``node`` with ``$dynamicRef: "#meta"`` as ``$ref: "#"`` and local ``$defs`` references
    renamed to the merged document's names."""
    if isinstance(node, list):
        return [_rewrite(item, vocabulary) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "$dynamicRef":
            if value != "#meta":
                raise ValueError(f"unexpected dynamic reference {value!r} in the 2020-12 metaschema")
            out["$ref"] = "#"
        elif key == "$ref" and isinstance(value, str):
            out["$ref"] = _merged_reference(value, vocabulary)
        else:
            out[key] = _rewrite(value, vocabulary) if key not in ("properties", "$defs") else {
                name: _rewrite(sub, vocabulary) for name, sub in value.items()
            }
    return out


# -- the compiled check ------------------------------------------------------------------------

_Check = Callable[[Any], bool]


class _Unsupported(Exception):
    """The metaschema uses something the compiled check does not reproduce."""


@functools.cache
def _fast_check(cls: type) -> _Check | None:
    """``schema -> bool``, True exactly when ``cls``'s metaschema (as :func:`_meta_validator`
    checks it) accepts ``schema``; None when the metaschema needs a keyword, or a form of one,
    that is not compiled (draft 2019-09's recursive references, draft 3)."""
    if _keywords is None:
        return None
    try:
        validator = _meta_validator(cls)
        return _Compiler(validator).node(validator.schema)
    except (_Unsupported, AttributeError):  # AttributeError: a keyword function jsonschema renamed
        return None


class _Compiler:
    """Metaschema subschemas as predicates, each built once (references may be cyclic). A
    keyword is compiled by the function ``jsonschema`` checks it with for this draft (one it
    has none for asserts nothing), and the keywords beside a ``$ref`` are read or ignored as
    the draft says (``_APPLICABLE_VALIDATORS``)."""

    def __init__(self, validator: Any) -> None:
        self.validator = validator
        self.document = validator.schema
        self.is_type = validator.is_type
        self.applicable = getattr(type(validator), "_APPLICABLE_VALIDATORS", None)
        if self.applicable is None or validator.format_checker is not None:
            raise _Unsupported("applicable keywords")
        self.built: dict[int, _Check] = {}

    def node(self, schema: Any) -> _Check:
        if schema is True:
            return lambda instance: True
        if schema is False:
            return lambda instance: False
        if not isinstance(schema, dict) or "$schema" in schema:  # another dialect's validator there
            raise _Unsupported(schema)
        found = self.built.get(id(schema))
        if found is None:
            cell: list[_Check] = []
            self.built[id(schema)] = lambda instance: cell[0](instance)  # for references back to it
            checks = [self._keyword(schema, key, value) for key, value in self.applicable(schema)]
            checks = [check for check in checks if check is not None]
            if not checks:
                cell.append(lambda instance: True)
            elif len(checks) == 1:
                cell.append(checks[0])
            else:
                cell.append(lambda instance: all(check(instance) for check in checks))
            found = self.built[id(schema)] = cell[0]
        return found

    def _resolve(self, reference: Any) -> Any:
        if not isinstance(reference, str) or not reference.startswith("#"):
            raise _Unsupported(reference)
        target: Any = self.document
        for part in reference[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise _Unsupported(reference)
            target = target[part]
        return target

    def _keyword(self, schema: dict, key: str, value: Any) -> _Check | None:
        function = self.validator.VALIDATORS.get(key)
        if function is None or function is _no_errors or function is _keywords.format:  # no format checker
            return None
        is_type = self.is_type
        if function is _keywords.ref:
            return self.node(self._resolve(value))
        if function is _keywords.type:
            types = (value,) if isinstance(value, str) else tuple(value)
            return lambda instance: any(is_type(instance, t) for t in types)
        if function is _keywords.enum:
            if not all(isinstance(item, str) for item in value):
                raise _Unsupported(key)
            listed = frozenset(value)
            return lambda instance: isinstance(instance, str) and instance in listed
        if function is _keywords.anyOf:
            alternatives = [self.node(sub) for sub in value]
            return lambda instance: any(check(instance) for check in alternatives)
        if function is _keywords.allOf:
            parts = [self.node(sub) for sub in value]
            return lambda instance: all(check(instance) for check in parts)
        if function is _keywords.properties:
            described = {name: self.node(sub) for name, sub in value.items()}
            return lambda instance: not is_type(instance, "object") or all(
                described[name](item) for name, item in instance.items() if name in described)
        if function is _keywords.additionalProperties:
            if "patternProperties" in schema:
                raise _Unsupported(key)
            declared = schema.get("properties", {})
            other = self.node(value)
            return lambda instance: not is_type(instance, "object") or all(
                other(item) for name, item in instance.items() if name not in declared)
        if function is _keywords.propertyNames:
            names = self.node(value)
            return lambda instance: not is_type(instance, "object") or all(names(name) for name in instance)
        if function in (_keywords.items, _legacy_keywords.items_draft6_draft7_draft201909,
                        _legacy_keywords.items_draft3_draft4):
            schema_form = (dict,) if function is _legacy_keywords.items_draft3_draft4 else (dict, bool)
            if not isinstance(value, schema_form) or "prefixItems" in schema:  # not a tuple of schemas
                raise _Unsupported(key)
            each = self.node(value)
            return lambda instance: not is_type(instance, "array") or all(each(item) for item in instance)
        if function is _keywords.minItems:
            return lambda instance: not is_type(instance, "array") or len(instance) >= value
        if function is _keywords.minimum:
            return lambda instance: not is_type(instance, "number") or not instance < value
        if function is _keywords.exclusiveMinimum:
            return lambda instance: not is_type(instance, "number") or not instance <= value
        if function is _legacy_keywords.minimum_draft3_draft4:
            if schema.get("exclusiveMinimum", False):
                return lambda instance: not is_type(instance, "number") or not instance <= value
            return lambda instance: not is_type(instance, "number") or not instance < value
        if function is _keywords.pattern:
            search = re.compile(value).search
            return lambda instance: not is_type(instance, "string") or search(instance) is not None
        if function is _legacy_keywords.dependencies_draft4_draft6_draft7:
            return self._dependencies(value)
        raise _Unsupported(key)

    def _dependencies(self, value: dict) -> _Check:
        is_type = self.is_type
        needed: list[tuple[str, tuple]] = []
        schemas: list[tuple[str, _Check]] = []
        for name, dependency in value.items():
            if is_type(dependency, "array"):
                needed.append((name, tuple(dependency)))
            else:
                schemas.append((name, self.node(dependency)))

        def depends(instance: Any) -> bool:
            if not is_type(instance, "object"):
                return True
            for name, others in needed:
                if name in instance and not all(other in instance for other in others):
                    return False
            return all(valid(instance) for name, valid in schemas if name in instance)

        return depends
