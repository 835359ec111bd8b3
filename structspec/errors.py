"""Errors raised by structspec.

Every error names *what* went wrong and *where*: a grammar error carries the
1-based line and column and a stable code, a schema error carries the JSON
pointer and the offending keyword.
"""

from __future__ import annotations


class StructspecError(Exception):
    """Base class of every error structspec raises on bad input."""


class GrammarError(StructspecError, ValueError):
    """A GBNF grammar is malformed or cannot be compiled.

    Attributes:
        code: stable identifier of the problem (e.g. ``E101``), listed in README.
        line, column: 1-based position in the grammar source (0 when unknown).
        message: the bare message, without the quoted source line.
    """

    def __init__(
        self,
        code: str,
        message: str,
        line: int = 0,
        column: int = 0,
        source_line: str | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.line}:{self.column}: " if self.line else ""
        text = f"{where}{self.code} {self.message}"
        if self.source_line is not None and self.line:
            caret = " " * max(self.column - 1, 0) + "^"
            text += f"\n    {self.source_line}\n    {caret}"
        return text


#: :attr:`SchemaError.code` values (stable, listed in README).
SCHEMA_UNSUPPORTED = "S001"  # valid, but not enforceable exactly
SCHEMA_INVALID = "S002"  # not a JSON Schema: its metaschema rejects it, it is not JSON, a $ref points nowhere
SCHEMA_TOO_DEEP = "S101"  # nests deeper than structspec.budget.MAX_NESTING
SCHEMA_TOO_LARGE = "S102"  # over the conversion's size budget
SCHEMA_TIMEOUT = "S103"  # over the conversion's time budget


class SchemaError(StructspecError, ValueError):
    """A JSON Schema is invalid, uses something structspec cannot enforce exactly, or exceeds a
    limit.

    Attributes:
        pointer: JSON pointer (RFC 6901) of the schema location, ``""`` for the root.
        keyword: the schema keyword at fault (``""`` when the whole node is at fault).
        message: the bare message.
        code: ``S001`` (the schema cannot be enforced exactly), ``S002`` (it is not a valid
            JSON Schema: its draft's metaschema rejects it, it is not JSON, a ``$ref`` points
            nowhere), or the limit it exceeded: ``S101`` nesting, ``S102`` size budget, ``S103``
            time budget.
    """

    def __init__(self, message: str, pointer: str = "", keyword: str = "", code: str = SCHEMA_UNSUPPORTED) -> None:
        self.message = message
        self.pointer = pointer
        self.keyword = keyword
        self.code = code
        where = f"#{pointer}" + (f" ({keyword})" if keyword else "")
        super().__init__(f"{where}: {message}")


class SchemaRelaxedWarning(UserWarning):
    """Emitted once by a ``strict=False`` conversion that approximated something.

    Attributes:
        relaxed: one ``(pointer, keyword, message)`` per approximated constraint.
    """

    def __init__(self, message: str, relaxed: list[tuple[str, str, str]] | None = None) -> None:
        super().__init__(message)
        self.relaxed = list(relaxed or ())
