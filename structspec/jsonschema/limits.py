"""How much a conversion may take on: nesting, time and size (README, "Limits").

* Nesting: a schema may nest :data:`~structspec.budget.MAX_NESTING` levels. :func:`schema_depth`
  measures a document before anything descends into it (the metaschema check, value
  comparisons, the converter), and :class:`~structspec.jsonschema.resolve.Loc` counts the
  levels the converter actually descends, ``$ref`` hops included. Either way the error is a
  :class:`~structspec.errors.SchemaError` with code ``S101`` and the JSON pointer.
* Time: a conversion runs under a deadline (:data:`TIME_LIMIT` seconds by default); its loops
  check it, and the error has code ``S103``.
* Size: the grammar may have at most :data:`MAX_RULES` rules and :data:`MAX_GRAMMAR_BYTES`
  bytes of text (code ``S102``), besides the per-position limits of the emitters.
"""

from __future__ import annotations

import math
from typing import Any

from structspec.budget import MAX_NESTING
from structspec.errors import SCHEMA_INVALID, SCHEMA_TIMEOUT, SCHEMA_TOO_DEEP, SCHEMA_TOO_LARGE, SchemaError
from structspec.jsonschema.resolve import LIST_KEYWORDS, MAP_KEYWORDS, SCHEMA_KEYWORDS, escape_pointer

_SCALARS = (str, int, float, bool, type(None))
TIME_LIMIT = 10.0
MAX_RULES = 50_000
MAX_GRAMMAR_BYTES = 16 << 20


def schema_depth(schema: Any, limit: int | None = None) -> tuple[int, str]:
    """How deeply ``schema`` nests, and the JSON pointer of its deepest point, without recursion.

    The root is level 1 and each subschema one level below the schema that holds it (a map or
    list of subschemas such as ``properties`` or ``allOf`` is not a level of its own). Values
    that are not subschemas (in ``enum``, ``const``, ``default``, unknown keywords) count by
    their own nesting: an array or object inside a keyword's value is one level below the
    schema, one inside that another. With ``limit``, the walk stops at the first point deeper
    than ``limit``. Raises :class:`SchemaError` for anything that is not a JSON value (NaN and
    the infinities included).
    """
    walk = _Walk()
    walk.push(schema, 1, True, 0)
    deepest, where = 0, 0
    while walk.pending:
        value, depth, is_schema, index = walk.pending.pop()
        if depth > deepest:
            deepest, where = depth, index
            if limit is not None and depth > limit:
                break
        if isinstance(value, bool) or not isinstance(value, (dict, list, tuple)):
            continue
        if not is_schema:
            for step, member in _members(value):
                walk.push(member, depth + 1, False, walk.step(index, step))
            continue
        for key, child in _members(value):
            at = walk.step(index, key)
            if key in SCHEMA_KEYWORDS and isinstance(child, (dict, bool)):
                walk.push(child, depth + 1, True, at)
            elif isinstance(child, (dict, list, tuple)):  # a keyword's map or list: its members one level down
                subschemas = (key in MAP_KEYWORDS and isinstance(child, dict)) or key in LIST_KEYWORDS
                for step, member in _members(child):
                    walk.push(member, depth + 1, subschemas, walk.step(at, step))
            else:
                walk.push(child, depth + 1, False, at)
    return deepest, walk.pointer(where)


class _Walk:
    """The values still to visit, and the way back from each to the root (for its pointer)."""

    def __init__(self) -> None:
        self.pending: list[tuple[Any, int, bool, int]] = []
        self.steps: list[tuple[int, str | int]] = [(-1, "")]

    def step(self, parent: int, step: str | int) -> int:
        self.steps.append((parent, step))
        return len(self.steps) - 1

    def push(self, value: Any, depth: int, is_schema: bool, index: int) -> None:
        """Queue ``value`` when it is a level: a container, or a boolean subschema."""
        if isinstance(value, (dict, list, tuple)) or (is_schema and isinstance(value, bool)):
            self.pending.append((value, depth, is_schema, index))
        elif not isinstance(value, _SCALARS):
            raise SchemaError(f"not a JSON value: a {type(value).__name__}", self.pointer(index), "",
                              code=SCHEMA_INVALID)
        elif isinstance(value, float) and not math.isfinite(value):  # Python's json reads NaN, Infinity
            raise SchemaError(f"not a JSON value: {value}", self.pointer(index), "", code=SCHEMA_INVALID)

    def pointer(self, index: int) -> str:
        steps: list[str] = []
        while index > 0:
            index, step = self.steps[index]
            steps.append("/" + escape_pointer(str(step)))
        return "".join(reversed(steps))


def _members(value: dict | list | tuple) -> list[tuple[str | int, Any]]:
    if not isinstance(value, dict):
        return list(enumerate(value))
    for key in value:
        if not isinstance(key, str):
            raise SchemaError(f"not a JSON value: an object key {key!r} that is not a string", "", "",
                              code=SCHEMA_INVALID)
    return list(value.items())


def check_depth(schema: Any) -> None:
    """Refuse (``S101``) a schema nested deeper than :data:`~structspec.budget.MAX_NESTING` levels."""
    depth, pointer = schema_depth(schema, MAX_NESTING)
    if depth > MAX_NESTING:
        raise SchemaError(f"the schema nests deeper than {MAX_NESTING} levels", pointer, "", code=SCHEMA_TOO_DEEP)


def timeout(seconds: float, pointer: str) -> SchemaError:
    """The error of a conversion that ran out of time while at ``pointer``."""
    message = f"conversion took longer than its time budget of {seconds:g} s"
    return SchemaError(message, pointer, "", code=SCHEMA_TIMEOUT)


def too_large(message: str) -> SchemaError:
    """The error of a conversion over its size budget."""
    return SchemaError(message, "", "", code=SCHEMA_TOO_LARGE)
