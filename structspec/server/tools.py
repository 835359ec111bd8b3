"""OpenAI tool calling, request side: ``tools``, ``tool_choice``, ``parallel_tool_calls`` and
tool calls in the message history, checked and turned into the structural tag that constrains
the reply (see :mod:`structspec.generation.tool_calls` for the format).

Every problem is an HTTP 400 that names the tool (``tools.1.function...``) and, inside its
parameters schema, the JSON pointer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from structspec.generation.tool_calls import tool_call_tag
from structspec.grammar.tags import StructuralTag
from structspec.server.constraints import ConstraintCache
from structspec.server.errors import APIError

NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
"""A function without ``parameters`` takes none: its arguments are ``{}``."""


class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class FunctionDefinition(_Shape):
    """``tools[i].function``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(_Shape):
    """``tools[i]``: only function tools exist."""

    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(_Shape):
    name: str


class NamedToolChoice(_Shape):
    """``tool_choice: {"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"]
    function: FunctionName


def _tool_choice(value: Any) -> Any:
    """``"none"``, ``"auto"``, ``"required"`` or a :class:`NamedToolChoice`, with one clear error."""
    if value in ("none", "auto", "required") or value is None:
        return value
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        return NamedToolChoice.model_validate(value)
    raise ValueError('tool_choice is "none", "auto", "required" or {"type": "function", "function": {"name": ...}}')


ToolChoice = Annotated[Literal["none", "auto", "required"] | NamedToolChoice, BeforeValidator(_tool_choice)]


class CalledFunction(_Shape):
    name: str
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _json(cls, value: str) -> str:
        try:
            json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"arguments must be JSON text ({exc.msg} at {exc.lineno}:{exc.colno})") from None
        return value


class MessageToolCall(_Shape):
    """A tool call in an assistant message of the history."""

    id: str
    type: Literal["function"] = "function"
    function: CalledFunction

    def for_template(self) -> dict[str, Any]:
        """The call as chat templates read it (arguments as a value, not JSON text)."""
        arguments = json.loads(self.function.arguments)
        return {"id": self.id, "type": "function", "function": {"name": self.function.name, "arguments": arguments}}


@dataclass(frozen=True)
class ToolCalling:
    """What a request's tools make of its reply: the structural tag, and each tag's function."""

    tag: StructuralTag
    names: tuple[str, ...]


def tool_calling(
    tools: list[ToolDefinition] | None,
    choice: ToolChoice | None,
    parallel: bool,
    text_constrained: bool,
    cache: ConstraintCache,
) -> ToolCalling | None:
    """The tool calling a request asks for; ``None`` where its tools do not shape the reply (no
    tools, or ``tool_choice: "none"`` beside a grammar or JSON ``response_format``, which
    ``text_constrained`` says). With ``"none"`` alone the reply is text that never starts a
    call. Runs schema conversion: call it off the event loop."""
    tools = tools or []
    choice = choice or ("auto" if tools else "none")
    if choice == "required" and not tools:
        raise APIError('tool_choice: "required" needs at least one tool in tools', param="tool_choice",
                       code="invalid_value")
    names = [tool.function.name for tool in tools]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise APIError(f"tools.{index}.function.name: {name!r} is also the name of tools.{names.index(name)}; "
                           "tool names must be unique", param=f"tools.{index}.function.name",
                           code="duplicate_tool_name")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        known = ", ".join(repr(n) for n in names) or "none"
        raise APIError(f"tool_choice.function.name: no tool is named {choice.function.name!r} (tools: {known})",
                       param="tool_choice.function.name", code="unknown_tool")
    grammars = {tool.function.name: _parameters(tool, index, cache) for index, tool in enumerate(tools)}
    if not grammars or (choice == "none" and text_constrained):
        return None
    if text_constrained:
        raise APIError("tool calls take no grammar or JSON response_format; to constrain a text answer beside "
                       'tools, give tool_choice "none"', param="tool_choice", code="conflicting_constraints")
    if isinstance(choice, NamedToolChoice):
        grammars = {choice.function.name: grammars[choice.function.name]}
    free_text = choice in ("auto", "none")
    low = 0 if free_text else 1
    high = 0 if choice == "none" else None if parallel and not isinstance(choice, NamedToolChoice) else 1
    key = json.dumps([free_text, low, high, [[t.function.name, t.function.parameters, t.function.strict is not False]
                                             for t in tools if t.function.name in grammars]])
    tag = cache.get_or_build(
        ("tools", key), lambda: tool_call_tag(grammars, free_text=free_text, min_calls=low, max_calls=high)
    )
    return ToolCalling(tag, tuple(grammars))


def _parameters(tool: ToolDefinition, index: int, cache: ConstraintCache) -> Any:
    """The grammar of one function's arguments; an error names the tool and the JSON pointer."""
    function = tool.function
    param = f"tools.{index}.function.parameters"
    try:
        return cache.from_schema(NO_PARAMETERS if function.parameters is None else function.parameters, param,
                                 strict=function.strict is not False)
    except APIError as exc:
        located = exc.message.replace(": ", f": tool {function.name!r}: ", 1)
        raise APIError(located, status=exc.status, type=exc.type, param=exc.param, code=exc.code) from None
