"""OpenAI tool calling, request side: ``tools``, ``tool_choice`` and ``parallel_tool_calls``
checked and turned into the structural tag that constrains the reply (see
:mod:`structspec.generation.tool_calls` for the format).

Every problem is an HTTP 400 that names the tool (``tools[1].function...``) and, inside its
parameters schema, the JSON pointer. The tag (every function's schema converted, the whole
grammar built) is made in a compile process and cached like any other constraint
(:meth:`~structspec.server.constraints.ConstraintCache.from_tools`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from structspec.generation.tool_calls import tool_call_tag
from structspec.grammar.tags import StructuralTag
from structspec.masks.compiled import CompiledGrammar
from structspec.server.constraints import ConstraintCache, schema_grammar
from structspec.server.errors import APIError
from structspec.server.limits import Limits
from structspec.server.protocol import NamedToolChoice, ToolChoice, ToolDefinition

NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
"""A function without ``parameters`` takes none: its arguments are ``{}``."""


@dataclass(frozen=True)
class ToolCalling:
    """What a request's tools make of its reply: the structural tag, its compiled grammar, and
    each tag's function name."""

    tag: StructuralTag
    compiled: CompiledGrammar
    names: tuple[str, ...]


def tool_calling(
    tools: list[ToolDefinition] | None,
    choice: ToolChoice | None,
    parallel: bool,
    text_constrained: bool,
    cache: ConstraintCache,
    limits: Limits,
) -> ToolCalling | None:
    """The tool calling a request asks for; ``None`` where its tools do not shape the reply (no
    tools, or ``tool_choice: "none"`` beside a grammar or JSON ``response_format``, which
    ``text_constrained`` says). With ``"none"`` alone the reply is text that never starts a
    call. Waits for a compile process: call it off the event loop."""
    tools = tools or []
    choice = choice or ("auto" if tools else "none")
    if choice == "required" and not tools:
        raise APIError('tool_choice: "required" needs at least one tool in tools', param="tool_choice",
                       code="invalid_value")
    names = [tool.function.name for tool in tools]
    for index, name in enumerate(names):
        if name in names[:index]:
            first = names.index(name)
            raise APIError(f"tools[{index}].function.name: {name!r} is also the name of tools[{first}]; "
                           "tool names must be unique", param=f"tools[{index}].function.name",
                           code="duplicate_tool_name")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        known = ", ".join(repr(n) for n in names) or "none"
        raise APIError(f"tool_choice.function.name: no tool is named {choice.function.name!r} (tools: {known})",
                       param="tool_choice.function.name", code="unknown_tool")
    functions = []
    for index, tool in enumerate(tools):
        param = f"tools[{index}].function.parameters"
        schema = NO_PARAMETERS if tool.function.parameters is None else tool.function.parameters
        canonical = json.loads(limits.check_schema(schema, param))  # key order kept: it orders the arguments
        functions.append((index, tool.function.name, canonical, tool.function.strict is not False))
    if not functions or (choice == "none" and text_constrained):
        return None
    if text_constrained:
        raise APIError("tool calls take no grammar or JSON response_format; to constrain a text answer beside "
                       'tools, give tool_choice "none"', param="tool_choice", code="conflicting_constraints")
    if isinstance(choice, NamedToolChoice):
        functions = [function for function in functions if function[1] == choice.function.name]
    free_text = choice in ("auto", "none")
    low = 0 if free_text else 1
    high = 0 if choice == "none" else None if parallel and not isinstance(choice, NamedToolChoice) else 1
    key = json.dumps([free_text, low, high, functions], separators=(",", ":"), ensure_ascii=False)
    built = cache.from_tools(key, "tools", calls_tag, functions, free_text, low, high)
    return ToolCalling(built.tag, built.compiled, tuple(function[1] for function in functions))


def calls_tag(
    functions: list[tuple[int, str, Any, bool]], free_text: bool, low: int, high: int | None
) -> StructuralTag:
    """The structural tag of calls of ``functions`` (``(index in tools, name, parameters,
    strict)``), its grammar built; runs in a compile process. A schema that cannot be enforced
    is an HTTP 400 naming the tool and the JSON pointer."""
    grammars = {}
    for index, name, parameters, strict in functions:
        param = f"tools[{index}].function.parameters"
        try:
            grammars[name] = schema_grammar(parameters, param, strict)
        except APIError as exc:
            located = exc.message.replace(": ", f": tool {name!r}: ", 1)
            raise APIError(located, status=exc.status, type=exc.type, param=exc.param, code=exc.code) from None
    tag = tool_call_tag(grammars, free_text=free_text, min_calls=low, max_calls=high)
    tag.grammar  # noqa: B018 - built here, in the compile process, and sent back with the tag
    return tag
