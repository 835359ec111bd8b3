"""Turning what a caller passes as ``constraint`` into a grammar, and its output into a value."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from structspec.grammar import Grammar
from structspec.grammar.tags import StructuralTag
from structspec.jsonschema.pydantic_models import adapter_reader, closed_schema, type_adapter


@dataclass(frozen=True)
class Constraint:
    """A grammar plus how to read the finished text: ``kind`` is ``"grammar"``, ``"json"``,
    ``"pydantic"`` (then ``adapter`` is the pydantic ``TypeAdapter`` of ``python_type``) or
    ``"tags"`` (a :class:`~structspec.grammar.tags.StructuralTag`, in ``python_type``)."""

    grammar: Grammar
    kind: str
    python_type: Any = None
    adapter: Any = None

    def value(self, text: str) -> Any:
        """The parsed JSON, the validated Pydantic value, the
        :class:`~structspec.grammar.tag_reading.TaggedText` of a structural tag, or ``None`` for plain
        grammars.

        Raises :class:`~structspec.jsonschema.pydantic_models.InstanceValidationError` (pydantic's error
        list in ``.errors``) when the text does not validate."""
        if self.kind == "json":
            return json.loads(text)
        if self.kind == "pydantic":
            return adapter_reader(self.python_type, self.adapter)(text)
        if self.kind == "tags":
            return self.python_type.parse(text)
        return None

def to_constraint(constraint: Any, *, source: str | None = None, grounded: bool = False) -> Constraint:
    """Accept a :class:`Grammar`, GBNF text, a JSON Schema dict, a Pydantic model class (or any
    type pydantic can validate, such as ``list[Model]`` or a discriminated union), or a
    :class:`~structspec.grammar.tags.StructuralTag`.

    ``source`` is the text that schema strings marked ``"x-grounded": true`` (a Pydantic field
    ``Annotated[str, Grounded()]``) must be spans of; ``grounded=True`` grounds every string
    value without ``enum``, ``const``, ``format`` or ``pattern`` too (docs/grounded.md)."""
    if grounded and source is None:
        raise ValueError("grounded=True needs the source text to ground strings in: pass source=...")
    if isinstance(constraint, (Constraint, Grammar, StructuralTag, str)):
        if source is not None:
            raise ValueError("source= grounds the strings of a JSON Schema or Pydantic constraint; a grammar is "
                             "compiled already (build it with Grammar.from_json_schema(schema, source=...))")
        if isinstance(constraint, Constraint):
            return constraint
        if isinstance(constraint, Grammar):
            return Constraint(constraint, "grammar")
        if isinstance(constraint, StructuralTag):
            return Constraint(constraint.grammar, "tags", constraint)
        return Constraint(Grammar.from_gbnf(constraint), "grammar")
    if isinstance(constraint, dict):
        return Constraint(Grammar.from_json_schema(constraint, source=source, grounded=grounded), "json")
    adapter = type_adapter(constraint)
    if adapter is None:
        raise TypeError(
            "constraint must be a structspec.Grammar, GBNF text, a JSON Schema dict, a Pydantic model class "
            f"or a structspec.StructuralTag, got {constraint!r}"
        )
    schema = closed_schema(adapter.json_schema(mode="validation"))
    grammar = Grammar.from_json_schema(schema, source=source, grounded=grounded)
    return Constraint(grammar, "pydantic", constraint, adapter)
