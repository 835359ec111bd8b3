"""Checking a schema against its draft's metaschema, quickly.

The draft 2020-12 metaschema is split into vocabulary documents joined by ``$dynamicRef``,
which ``jsonschema`` resolves through the dynamic scope at every subschema: validating a
typical schema against it takes tens of milliseconds, more than converting it. Here the
vocabularies are merged into one document in which every ``$dynamicRef: "#meta"`` is a plain
``$ref: "#"``. That is the same check: the dynamic anchor ``meta`` resolves to the outermost
document that declares it, and the merged document is that outermost one.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/"
_RESOURCE_KEYWORDS = ("$schema", "$id", "$vocabulary", "$dynamicAnchor", "$defs", "title", "$comment")


def metaschema_error(cls: type, schema: Any) -> ValidationError | None:
    """The most relevant violation of the metaschema of ``cls`` (a ``jsonschema`` validator
    class) by ``schema``, or None.

    Repeated entries (``uniqueItems`` of the metaschema, e.g. an ``enum`` listing a value twice)
    are harmless and not checked at all: ``jsonschema`` compares every pair of items that do not
    sort (an ``enum`` mixing numbers and strings), which takes seconds for a few thousand.
    """
    return best_match(_meta_validator(cls).iter_errors(schema))


@functools.cache
def _meta_validator(cls: type) -> Any:
    checker = jsonschema.validators.extend(cls, {"uniqueItems": _no_errors})
    if cls is jsonschema.Draft202012Validator:
        try:
            return checker(_merged_2020_12())
        except ValueError:  # a jsonschema release whose metaschema no longer merges: the slow way
            pass
    return checker(cls.META_SCHEMA)


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
    merged: dict[str, Any] = {"$schema": root["$schema"], "$defs": defs, "properties": {}}
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
