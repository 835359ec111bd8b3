"""Pydantic (v2) models as JSON Schema, and checking generated text against the model.

``model_schema`` is what ``Grammar.from_pydantic`` converts: the model's validation-mode JSON
Schema, with ``$defs`` for nested models (so recursive models stay recursive) and ``oneOf`` plus
a ``const`` discriminator for discriminated unions, which the converter proves disjoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace, UnionType
from typing import Any, TypeVar

from structspec.errors import StructspecError

try:
    import pydantic
except ImportError:  # pragma: no cover - pydantic is a runtime dependency
    pydantic = None  # type: ignore[assignment]

ModelT = TypeVar("ModelT")


class InstanceValidationError(StructspecError, ValueError):
    """Text that does not validate against a Pydantic model.

    Attributes:
        errors: pydantic's error list (``loc``, ``msg``, ``type`` ... per problem).
    """

    def __init__(self, model: type, errors: list[dict[str, Any]]) -> None:
        self.errors = errors
        lines = [f"  {'.'.join(str(p) for p in e.get('loc', ())) or '<root>'}: {e.get('msg', '')}" for e in errors]
        super().__init__(f"text does not validate as {model.__name__}:\n" + "\n".join(lines))


@dataclass(frozen=True)
class Grounded:
    """``Annotated[str, Grounded()]``: the field's value must copy a span of the source text
    that generation is given (``source=``); its schema says ``"x-grounded": true``
    (docs/grounded.md). ``Field(json_schema_extra={"x-grounded": True})`` says the same."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core_schema)
        target = handler.resolve_ref_schema(schema)
        if target.get("type") != "string":
            raise TypeError(f"Grounded() marks str fields; this field's schema is {target.get('type', target)!r}")
        target["x-grounded"] = True
        return schema


def _require_model(model_cls: Any) -> type:
    if pydantic is None:
        raise ImportError("pydantic (v2) is required for Pydantic support")
    if not (isinstance(model_cls, type) and issubclass(model_cls, pydantic.BaseModel)):
        raise TypeError(f"expected a pydantic BaseModel subclass, got {model_cls!r}")
    return model_cls


def model_schema(model_cls: type) -> dict[str, Any]:
    """The JSON Schema (2020-12) pydantic validates ``model_cls`` instances against, closed to
    undeclared keys (see :func:`closed_schema`)."""
    model = _require_model(model_cls)
    return closed_schema(model.model_json_schema(mode="validation"))


def closed_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A plain-JSON copy of a pydantic-made schema whose objects admit only declared keys.

    Pydantic ignores undeclared keys by default (``extra="ignore"``) and its schema then leaves
    ``additionalProperties`` out, which in JSON Schema means "anything goes": a model would be
    free to spend tokens on keys that validation throws away. Every object schema with declared
    ``properties`` and no ``additionalProperties`` is therefore closed; models configured with
    ``extra="allow"`` say ``additionalProperties: true`` and stay open.
    """
    copy = json.loads(json.dumps(schema))
    _close_objects(copy)
    return copy


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_DATA_KEYWORDS = ("const", "enum", "default", "examples")


def _close_objects(schema: Any) -> None:
    if isinstance(schema, list):
        for item in schema:
            _close_objects(item)
        return
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("properties"), dict) and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            _close_objects(list(value.values()))
        elif key not in _DATA_KEYWORDS:
            _close_objects(value)


def validate_instance(model_cls: type[ModelT], text: str | bytes) -> ModelT:
    """Parse and validate ``text`` as ``model_cls``; raises :class:`InstanceValidationError`
    carrying pydantic's error details."""
    model = _require_model(model_cls)
    try:
        return model.model_validate_json(text)  # type: ignore[return-value]
    except pydantic.ValidationError as exc:
        raise InstanceValidationError(model, exc.errors(include_url=False)) from None


def type_adapter(python_type: Any) -> Any:
    """A pydantic ``TypeAdapter`` for a model class or any type pydantic validates (``list[Model]``,
    a discriminated union); ``None`` for anything else."""
    if pydantic is None or not (isinstance(python_type, (type, UnionType)) or hasattr(python_type, "__origin__")):
        return None
    try:
        return pydantic.TypeAdapter(python_type)
    except pydantic.PydanticSchemaGenerationError:
        return None


def adapter_reader(python_type: Any, adapter: Any) -> Any:
    """A function validating JSON text with ``adapter``: the value, or
    :class:`InstanceValidationError` (pydantic's error list in ``.errors``)."""
    named = python_type if hasattr(python_type, "__name__") else SimpleNamespace(__name__=repr(python_type))

    def read(text: str) -> Any:
        try:
            return adapter.validate_json(text)
        except pydantic.ValidationError as exc:
            raise InstanceValidationError(named, exc.errors(include_url=False)) from None

    return read
