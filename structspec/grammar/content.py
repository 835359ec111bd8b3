"""What a caller may pass as a constraint, turned into a grammar and a reader of its finished text.

One dispatch for every place that takes a constraint: ``Generator.generate`` (through
:mod:`structspec.generation.constraint`, which adds structural tags) and a structural tag's
content.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from structspec.grammar.grammar import Grammar

ACCEPTED = "a structspec.Grammar, GBNF text, a JSON Schema dict or a Pydantic model class"


def no_value(_text: str) -> None:
    """The reader of a plain grammar: its text has no value (a module function, so that it pickles)."""


@dataclass(frozen=True)
class Constraint:
    """A grammar, and how to read a value from text it accepts (:func:`json.loads` for a JSON
    Schema, the model's validation for a Pydantic type, nothing for a grammar)."""

    grammar: Grammar
    read: Callable[[str], Any] = no_value

    def value(self, text: str) -> Any:
        """The value of ``text``. Raises
        :class:`~structspec.jsonschema.pydantic_models.InstanceValidationError` (pydantic's error list
        in ``.errors``) when a Pydantic type does not validate it."""
        return self.read(text)


def to_constraint(
    content: Any, *, source: str | None = None, grounded: bool = False, what: str = "constraint", also: str = ""
) -> Constraint:
    """``content`` (:data:`ACCEPTED`) as a :class:`Constraint`; a :class:`Constraint` is returned as it is.

    ``source`` is the text that schema strings marked ``"x-grounded": true`` (a Pydantic field
    ``Annotated[str, Grounded()]``) must be spans of; ``grounded=True`` grounds every string value
    without ``enum``, ``const``, ``format`` or ``pattern`` too (docs/grounded.md). ``what`` names
    the argument in a :class:`TypeError`, ``also`` what else its caller accepts."""
    if grounded and source is None:
        raise ValueError("grounded=True needs the source text to ground strings in: pass source=...")
    if isinstance(content, (Constraint, Grammar, str)):
        if source is not None:
            raise ValueError("source= grounds the strings of a JSON Schema or Pydantic constraint; a grammar is "
                             "compiled already (build it with Grammar.from_json_schema(schema, source=...))")
        if isinstance(content, Constraint):
            return content
        return Constraint(content if isinstance(content, Grammar) else Grammar.from_gbnf(content))
    if isinstance(content, (dict, bool)):
        return Constraint(Grammar.from_json_schema(content, source=source, grounded=grounded), json.loads)
    from structspec.jsonschema.pydantic_models import adapter_reader, closed_schema, type_adapter

    adapter = type_adapter(content)
    if adapter is None:
        raise TypeError(f"{what} must be {ACCEPTED}{also}, got {content!r}")
    schema = closed_schema(adapter.json_schema(mode="validation"))
    grammar = Grammar.from_json_schema(schema, source=source, grounded=grounded)
    return Constraint(grammar, adapter_reader(content, adapter))
