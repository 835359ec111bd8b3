"""Tool calls in generated text: their format, the structural tag that enforces it, and the
prompt that presents the tools to a model whose chat template does not take them.

The format (the one Hermes- and Qwen-style chat templates teach)::

    <tool_call>
    {"name": "get_weather", "arguments": {"city":"Paris"}}
    </tool_call>

One segment per call: ``begin`` is everything up to the arguments (so the function's name is
part of it: naming a function picks the tag), the content is the function's parameters schema,
``end`` closes the object and the tag. ``tools`` follow OpenAI's (and transformers') shape:
``[{"type": "function", "function": {"name", "description", "parameters"}}]``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from structspec.grammar.tags import StructuralTag, Tag

TRIGGER = "<tool_call>"
END = "}\n</tool_call>"
SEPARATOR = "\n"
RESPONSE_BEGIN, RESPONSE_END = "<tool_response>\n", "\n</tool_response>"


def call_begin(name: str) -> str:
    """The text of a call of ``name`` up to its arguments."""
    return f'{TRIGGER}\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '


def render_call(name: str, arguments: Any) -> str:
    """A whole call as the model writes it (``arguments``: a value, or JSON text)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return call_begin(name) + text + END


def tool_call_tag(
    functions: Mapping[str, Any], *, free_text: bool = True, min_calls: int = 0, max_calls: int | None = None
) -> StructuralTag:
    """The structural tag of text with calls of ``functions`` (name -> arguments constraint: a
    JSON Schema, a Grammar, a Pydantic model ...). ``free_text=False``: calls only, one per line."""
    tags = [Tag(call_begin(name), parameters, END) for name, parameters in functions.items()]
    if free_text:
        return StructuralTag(tags, triggers=[TRIGGER], min_segments=min_calls, max_segments=max_calls)
    return StructuralTag(tags, min_segments=min_calls, max_segments=max_calls, free_text=False, separator=SEPARATOR)


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template reads a ``tools`` variable (then it is given the
    tools through ``apply_chat_template(tools=...)``)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        if "tool_use" in template:
            return True
        template = template.get("default")
    return isinstance(template, str) and _reads_tools(template)


@functools.lru_cache(maxsize=16)
def _reads_tools(template: str) -> bool:
    """Whether a chat template's text reads ``tools`` (parsed once per template: a parse costs
    milliseconds, more than the decoding rounds of a short generation)."""
    from jinja2 import Environment, TemplateSyntaxError, meta

    try:
        return "tools" in meta.find_undeclared_variables(Environment().parse(template))
    except TemplateSyntaxError:
        return False


def tools_system_text(tools: Sequence[Mapping[str, Any]]) -> str:
    """How the tools are presented where the chat template does not take them (a system message)."""
    listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "You can call functions. Their definitions, one JSON object per line:\n"
        f"<tools>\n{listed}\n</tools>\n"
        "To call one, write a JSON object with its name and arguments between tags, one call per block:\n"
        f'{TRIGGER}\n{{"name": "the function", "arguments": {{...}}}}\n</tool_call>\n'
        f"Each result comes back in a message between {RESPONSE_BEGIN.strip()} tags."
    )


def plain_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> list[dict]:
    """``messages`` for a chat template that knows no tools: the tools in the system message,
    past calls written out in the assistant's text, tool results as user messages."""
    out: list[dict] = []
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "tool":
            out.append({"role": "user", "content": RESPONSE_BEGIN + content + RESPONSE_END})
        elif role == "assistant" and message.get("tool_calls"):
            calls = [render_call(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
            out.append({"role": "assistant", "content": SEPARATOR.join([content, *calls] if content else calls)})
        else:
            out.append({"role": role, "content": content})
    if tools:
        text = tools_system_text(tools)
        if out and out[0]["role"] in ("system", "developer"):
            out[0] = {"role": out[0]["role"], "content": f"{out[0]['content']}\n\n{text}"}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out
