"""The server's error format: every failure is ``{"error": {"message", "type", "param", "code"}}``.

Request problems are HTTP 400 (404 for an unknown model, 503 when the queue is full); the
message names the field as the client wrote it (``messages[0].content``), and inside a schema
or grammar the JSON pointer or line:column.
"""

from __future__ import annotations

from typing import Any

from structspec.errors import (
    SCHEMA_INVALID,
    SCHEMA_TIMEOUT,
    SCHEMA_TOO_DEEP,
    SCHEMA_TOO_LARGE,
    GrammarError,
    SchemaError,
)

SCHEMA_CODES = {
    SCHEMA_INVALID: "invalid_schema",
    SCHEMA_TOO_DEEP: "schema_too_deep",
    SCHEMA_TOO_LARGE: "schema_too_large",
    SCHEMA_TIMEOUT: "compile_timeout",
}
"""The error ``code`` a :class:`SchemaError` is answered with, by its code; any other (``S001``,
a schema that cannot be enforced exactly) is ``unsupported_schema``."""


class APIError(Exception):
    """A request the server refuses, with the OpenAI-style error fields."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body sent to the client."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def grammar_error(exc: GrammarError, param: str) -> APIError:
    """A GBNF problem, located by line:column in the grammar text."""
    where = f"{exc.line}:{exc.column}: " if exc.line else ""
    return APIError(f"{param} {where}{exc.code} {exc.message}", param=param, code=f"grammar_{exc.code}")


def schema_error(exc: SchemaError, param: str, unsupported: list[str] | None = None) -> APIError:
    """A JSON Schema problem, located by the JSON pointer inside the schema; ``unsupported``:
    the other constructs a strict conversion would refuse, listed after it."""
    located = f"{param}#{exc.pointer}"
    message = f"{located}" + (f" ({exc.keyword})" if exc.keyword else "") + f": {exc.message}"
    others = [entry for entry in unsupported or () if not entry.startswith(f"#{exc.pointer} ")]
    if others:
        message += "; also cannot be enforced exactly: " + "; ".join(others)
    return APIError(message, param=located, code=SCHEMA_CODES.get(exc.code, "unsupported_schema"))

