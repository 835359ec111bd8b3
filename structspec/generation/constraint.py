"""Turning what a caller passes as ``constraint`` into a grammar and a reader of its output."""

from __future__ import annotations

from typing import Any

from structspec.grammar.content import Constraint
from structspec.grammar.content import to_constraint as content_constraint
from structspec.grammar.tags import StructuralTag


def to_constraint(constraint: Any, *, source: str | None = None, grounded: bool = False) -> Constraint:
    """Accept what :func:`structspec.grammar.content.to_constraint` does (a :class:`Grammar`, GBNF
    text, a JSON Schema dict, a Pydantic model class or any type pydantic can validate, with
    ``source`` and ``grounded`` as there) or a :class:`~structspec.grammar.tags.StructuralTag`, whose
    value is its :class:`~structspec.grammar.tag_reading.TaggedText`."""
    if isinstance(constraint, StructuralTag):
        return content_constraint(Constraint(constraint.grammar, constraint.parse), source=source, grounded=grounded)
    return content_constraint(constraint, source=source, grounded=grounded, also=" or a structspec.StructuralTag")
