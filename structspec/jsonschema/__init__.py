"""JSON Schema (drafts 4 to 2020-12) and Pydantic models to GBNF.

Its one job is the schema converter: resolving references, expanding combinators, and writing
each keyword as grammar rules (docs/json-schema.md gives every decision), with strings grounded
in a source text where asked (``grounding``, docs/grounded.md); ``pydantic_models``
turns a Pydantic class into a closed schema and validates instances against it.

May import: ``structspec.regex`` (for ``pattern``), ``structspec.ir`` and ``structspec.errors``.
"""

from structspec.errors import SchemaError, SchemaRelaxedWarning
from structspec.jsonschema.convert import ConvertedSchema, convert_schema, schema_to_gbnf
from structspec.jsonschema.grounding import Grounding

__all__ = ["ConvertedSchema", "Grounding", "SchemaError", "SchemaRelaxedWarning", "convert_schema", "schema_to_gbnf"]
