"""Request bodies are read as JSON writes them: a value of the wrong JSON type is refused naming its
field, never converted ("5" is not the integer 5, "yes" is not true), without a model or a server."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("starlette", reason="the server extra is not installed")

from structspec.server.body import parse
from structspec.server.errors import APIError
from structspec.server.protocol import ChatRequest, ExtractRequest

MESSAGES = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SCHEMA = {"type": "object"}


@pytest.mark.parametrize(
    ("field", "param"),
    [
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": 5.0}, "max_tokens"),
        ({"max_completion_tokens": "5"}, "max_completion_tokens"),
        ({"temperature": "0.5"}, "temperature"),
        ({"temperature": False}, "temperature"),
        ({"top_p": "1"}, "top_p"),
        ({"top_k": 2.0}, "top_k"),
        ({"seed": "7"}, "seed"),
        ({"n": "1"}, "n"),
        ({"stream": "yes"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"stream": True, "stream_options": {"include_usage": "true"}}, "stream_options.include_usage"),
        ({"tools": [TOOL], "parallel_tool_calls": "false"}, "parallel_tool_calls"),
        ({"tools": [{**TOOL, "function": {**TOOL["function"], "strict": 1}}]}, "tools[0].function.strict"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA, "strict": "true"}}},
         "response_format.json_schema.strict"),
        ({"messages": [*MESSAGES, {"role": "tool", "content": "x", "tool_call_id": 3}]}, "messages[1].tool_call_id"),
    ],
)
def test_a_chat_field_of_the_wrong_type_is_refused_naming_it(field: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as refused:
        parse(ChatRequest, {"messages": MESSAGES, **field})
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, "invalid_value", param)
    assert refused.value.message.startswith(f"{param}: ")


@pytest.mark.parametrize(
    ("field", "param"),
    [({"grounded": "yes"}, "grounded"), ({"grounded": 1}, "grounded"), ({"max_tokens": "64"}, "max_tokens")],
)
def test_an_extract_field_of_the_wrong_type_is_refused_naming_it(field: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as refused:
        parse(ExtractRequest, {"text": "Tom is 7.", "schema": SCHEMA, **field})
    assert (refused.value.code, refused.value.param) == ("invalid_value", param)


def test_values_of_the_right_json_type_are_taken_as_sent() -> None:
    request = parse(ChatRequest, {
        "messages": MESSAGES, "max_tokens": 5, "temperature": 1, "top_p": 0.5, "top_k": 3, "seed": 2**64 - 1,
        "stream": True, "stream_options": {"include_usage": True}, "tools": [TOOL], "tool_choice": "auto",
        "parallel_tool_calls": False, "n": 1,
    })
    assert (request.max_tokens, request.temperature, request.seed, request.stream) == (5, 1.0, 2**64 - 1, True)
    assert request.tools is not None and request.tools[0].function.name == "f"
    extract = parse(ExtractRequest, {"text": "x", "schema": SCHEMA, "grounded": True})
    assert extract.grounded is True and extract.schema_ == SCHEMA
