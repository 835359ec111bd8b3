"""Turning what a caller passes as ``constraint`` into a grammar, and its output into a value."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace, UnionType
from typing import Any

from structspec.grammar import Grammar
from structspec.jsonschema.pydantic_models import closed_schema


@dataclass(frozen=True)
class Constraint:
    """A grammar plus how to read the finished text: ``kind`` is ``"grammar"``, ``"json"`` or
    ``"pydantic"`` (then ``adapter`` is the pydantic ``TypeAdapter`` of ``python_type``)."""

    grammar: Grammar
    kind: str
    python_type: Any = None
    adapter: Any = None

    def value(self, text: str) -> Any:
        """The parsed JSON, the validated Pydantic value, or ``None`` for plain grammars.

        Raises :class:`~structspec.jsonschema.pydantic_models.InstanceValidationError` (pydantic's error
        list in ``.errors``) when the text does not validate."""
        if self.kind == "json":
            return json.loads(text)
        if self.kind == "pydantic":
            import pydantic

            from structspec.jsonschema.pydantic_models import InstanceValidationError

            try:
                return self.adapter.validate_json(text)
            except pydantic.ValidationError as exc:
                raise InstanceValidationError(_named(self.python_type), exc.errors(include_url=False)) from None
        return None


def to_constraint(constraint: Any, *, source: str | None = None, grounded: bool = False) -> Constraint:
    """Accept a :class:`Grammar`, GBNF text, a JSON Schema dict, or a Pydantic model class
    (or any type pydantic can validate, such as ``list[Model]`` or a discriminated union).

    ``source`` is the text that schema strings marked ``"x-grounded": true`` (a Pydantic field
    ``Annotated[str, Grounded()]``) must be spans of; ``grounded=True`` grounds every string
    value without ``enum``, ``const``, ``format`` or ``pattern`` too (docs/grounded.md)."""
    if grounded and source is None:
        raise ValueError("grounded=True needs the source text to ground strings in: pass source=...")
    if isinstance(constraint, (Constraint, Grammar, str)):
        if source is not None:
            raise ValueError("source= grounds the strings of a JSON Schema or Pydantic constraint; a grammar is "
                             "compiled already (build it with Grammar.from_json_schema(schema, source=...))")
        if isinstance(constraint, Constraint):
            return constraint
        if isinstance(constraint, Grammar):
            return Constraint(constraint, "grammar")
        return Constraint(Grammar.from_gbnf(constraint), "grammar")
    if isinstance(constraint, dict):
        return Constraint(Grammar.from_json_schema(constraint, source=source, grounded=grounded), "json")
    adapter = _type_adapter(constraint)
    if adapter is None:
        raise TypeError(
            "constraint must be a structspec.Grammar, GBNF text, a JSON Schema dict or a Pydantic "
            f"model class, got {constraint!r}"
        )
    schema = closed_schema(adapter.json_schema(mode="validation"))
    grammar = Grammar.from_json_schema(schema, source=source, grounded=grounded)
    return Constraint(grammar, "pydantic", constraint, adapter)


def _type_adapter(python_type: Any) -> Any:
    if not (isinstance(python_type, (type, UnionType)) or hasattr(python_type, "__origin__")):
        return None
    try:
        import pydantic
    except ImportError:
        return None
    try:
        return pydantic.TypeAdapter(python_type)
    except pydantic.PydanticSchemaGenerationError:
        return None


def _named(python_type: Any) -> Any:
    """What InstanceValidationError needs of a model: something with a ``__name__``."""
    if hasattr(python_type, "__name__"):
        return python_type
    return SimpleNamespace(__name__=repr(python_type))
