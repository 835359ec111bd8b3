"""JSON values compared the way ``jsonschema`` compares them, in constant time per lookup.

``jsonschema`` checks ``enum`` by comparing the instance with every listed value, so checking
each of *n* values against an ``enum`` of *n* costs *n²* comparisons (a 50,000-value enum: over
a billion). :func:`value_key` gives each value a hashable key with ``jsonschema``'s notion of
equality (``1 == 1.0``, ``true != 1``, members and items compared recursively), and
:func:`fast_validator_class` swaps ``enum`` for a set lookup on those keys, kept per conversion
(:func:`enum_keys`).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError


def value_key(value: Any) -> Hashable:
    """A key equal for two values exactly when ``jsonschema`` calls them equal.

    Raises :class:`TypeError` for something that is not a JSON value.
    """
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, (int, float)):
        return ("number", value)  # 1 and 1.0 are equal and hash alike
    if isinstance(value, (list, tuple)):
        return ("array", tuple(value_key(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, value_key(item)) for key, item in value.items()))
    raise TypeError(f"not a JSON value: {value!r}")


class KeySets:
    """The key set of each ``enum`` list seen, built once per list (the list is kept alive so
    that its ``id`` is never reused)."""

    def __init__(self) -> None:
        self._sets: dict[int, tuple[list[Any], frozenset[Hashable]]] = {}

    def of(self, values: list[Any]) -> frozenset[Hashable]:
        entry = self._sets.get(id(values))
        if entry is None:
            entry = (values, frozenset(value_key(v) for v in values))
            self._sets[id(values)] = entry
        return entry[1]


_KEYS: ContextVar[KeySets | None] = ContextVar("structspec_enum_keys", default=None)


@contextmanager
def enum_keys() -> Iterator[KeySets]:
    """Within the block (one conversion), validators of :func:`fast_validator_class` look
    ``enum`` values up in one :class:`KeySets` (per thread: a context variable)."""
    keys = KeySets()
    token = _KEYS.set(keys)
    try:
        yield keys
    finally:
        _KEYS.reset(token)


@functools.cache
def fast_validator_class(cls: type) -> type:
    """``cls`` with ``enum`` checked by a set lookup in the key sets of the enclosing
    :func:`enum_keys` block (outside one, as ``cls`` does), same results either way. Built once
    per dialect: making a validator class costs about half a millisecond."""
    original = cls.VALIDATORS["enum"]

    def enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
        keys = _KEYS.get()
        if keys is not None and isinstance(enums, list):
            try:
                found = value_key(instance) in keys.of(enums)
            except TypeError:  # not JSON values: compare the slow way below
                pass
            else:
                if not found:
                    yield ValidationError(f"{instance!r} is not one of the {len(enums)} values of 'enum'")
                return
        yield from original(validator, enums, instance, schema)

    return jsonschema.validators.extend(cls, {"enum": enum})
