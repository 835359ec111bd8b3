"""JSON Schema (drafts 4 to 2020-12) to GBNF. See docs/json-schema.md for every decision."""

from structspec.errors import SchemaError, SchemaRelaxedWarning
from structspec.jsonschema.convert import schema_to_gbnf

__all__ = ["SchemaError", "SchemaRelaxedWarning", "schema_to_gbnf"]
