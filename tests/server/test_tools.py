"""OpenAI tool calling through ``structspec serve``, driven by the official ``openai`` client on
loopback: every ``tool_choice``, parallel calls, streamed calls the client reassembles,
``parse`` with Pydantic tools and response formats, tool results in the history, and HTTP 400s
that name the tool and the JSON pointer.

The model is a tiny Llama over the Qwen2.5 tokenizer (where ``<tool_call>`` is one token) whose
output layer only carries a bias: greedy decoding then prefers a tool call, then a quote or a
closing brace inside arguments, then the end of the turn -- a scripted model whose every choice
still goes through the masks, so the replies are deterministic and the grammar does the rest.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx
import jsonschema
import pytest
import torch
from pydantic import BaseModel
from tiny_models import one_thread, tokenizer

pytest.importorskip("fastapi", reason="the server extra is not installed")
openai = pytest.importorskip("openai", reason="the openai client is not installed")

__all__ = ["one_thread"]

MODEL_ID = "scripted"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                        "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"], "additionalProperties": False},
        "strict": True,
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}
FLIGHTS = {
    "type": "function",
    "function": {
        "name": "find_flights",
        "parameters": {"type": "object", "properties": {"origin": {"type": "string", "pattern": "^[A-Z]{3}$"},
                                                        "seats": {"type": "integer", "minimum": 1, "maximum": 9}},
                       "required": ["origin", "seats"], "additionalProperties": False},
    },
}
TOOLS = [WEATHER, CLOCK, FLIGHTS]
SCHEMAS = {tool["function"]["name"]: tool["function"].get("parameters", {"type": "object", "maxProperties": 0})
           for tool in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def scripted_model(tok: Any) -> Any:
    """A tiny Llama whose logits are a fixed bias: ``<tool_call>`` first, then end of turn,
    ``"``, ``}``; every other token ties (greedy takes the lowest allowed id)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    head = torch.nn.Linear(16, len(tok), bias=True)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    for text, value in (("<tool_call>", 9.0), ("<|im_end|>", 6.0), ('"', 3.0), ("}", 2.0)):
        head.bias.data[tok.convert_tokens_to_ids(text)] = value
    model.lm_head = head
    return model.eval()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    import uvicorn

    from structspec.generation import Generator, SpecConfig
    from structspec.server.app import create_app
    from structspec.server.engine import Engine
    from structspec.server.limits import Limits

    tok = tokenizer("qwen2.5")
    app = create_app(Engine(Generator(scripted_model(tok), tok), MODEL_ID, SpecConfig()),
                     Limits(max_tokens=256, default_max_tokens=160))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uvicorn_server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=uvicorn_server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not uvicorn_server.started:
        if not thread.is_alive():
            pytest.fail("the server did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    uvicorn_server.should_exit = True
    thread.join()
    sock.close()


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def http(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=300) as client:
        yield client


def assert_valid_calls(message: Any, allowed: set[str]) -> list[tuple[str, dict]]:
    calls = []
    for call in message.tool_calls:
        assert call.type == "function" and call.id.startswith("call_") and call.function.name in allowed
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
        calls.append((call.function.name, arguments))
    assert len({call.id for call in message.tool_calls}) == len(message.tool_calls)
    return calls


def test_auto_calls_a_tool(client: Any) -> None:
    reply = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=TOOLS,
                                           parallel_tool_calls=False)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert len(assert_valid_calls(choice.message, set(SCHEMAS))) == 1


def test_auto_with_parallel_calls(client: Any) -> None:
    reply = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=TOOLS, max_tokens=256)
    calls = assert_valid_calls(reply.choices[0].message, set(SCHEMAS))
    assert len(calls) > 1  # the model keeps calling until the budget says stop: each call is complete


@pytest.mark.parametrize("parallel", [True, False])
def test_required_calls_only(client: Any, parallel: bool) -> None:
    reply = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=parallel, max_tokens=100)
    choice = reply.choices[0]
    assert choice.message.content is None
    calls = assert_valid_calls(choice.message, set(SCHEMAS))
    assert len(calls) >= 1 and (parallel or len(calls) == 1)


def test_named_function(client: Any) -> None:
    reply = client.chat.completions.create(
        model=MODEL_ID, messages=MESSAGES, tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "find_flights"}},
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    ((name, arguments),) = assert_valid_calls(choice.message, {"find_flights"})
    assert name == "find_flights" and len(arguments["origin"]) == 3 and 1 <= arguments["seats"] <= 9


def test_none_answers_in_text_that_never_calls(client: Any) -> None:
    reply = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=TOOLS, tool_choice="none",
                                           max_tokens=12)
    choice = reply.choices[0]
    assert not choice.message.tool_calls and "<tool_call>" not in choice.message.content
    assert choice.finish_reason in ("stop", "length")


def test_streamed_calls_are_reassembled_by_the_client(client: Any) -> None:
    request = {"model": MODEL_ID, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "max_tokens": 100}
    whole = client.chat.completions.create(**request).choices[0].message
    with client.chat.completions.stream(**request) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    streamed = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in streamed.tool_calls] == \
           [(c.function.name, c.function.arguments) for c in whole.tool_calls]
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert [e.arguments for e in done] == [c.function.arguments for c in whole.tool_calls]
    assert_valid_calls(streamed, set(SCHEMAS))


def test_stream_chunks_have_openai_shape(http: httpx.Client) -> None:
    body = {"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required", "stream": True,
            "parallel_tool_calls": False}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line and line != "data: [DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    first, rest = calls[0], calls[1:]
    assert first["index"] == 0 and first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    assert rest and all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in rest)
    jsonschema.validate(json.loads("".join(c["function"]["arguments"] for c in rest)), SCHEMAS["get_weather"])
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert not any(d.get("content") for d in deltas)


def test_parse_with_pydantic_tools_and_response_format(client: Any) -> None:
    class Booking(BaseModel):
        room: Literal["single", "double"]
        nights: int

    reply = client.chat.completions.parse(model=MODEL_ID, messages=MESSAGES, tool_choice="required",
                                          tools=[openai.pydantic_function_tool(Booking)], max_tokens=150)
    (call,) = reply.choices[0].message.tool_calls
    assert isinstance(call.function.parsed_arguments, Booking)

    class Weather(BaseModel):
        city: Literal["Paris", "Rome"]
        rain: bool

    parsed = client.chat.completions.parse(model=MODEL_ID, messages=MESSAGES, response_format=Weather,
                                           max_tokens=40)
    assert isinstance(parsed.choices[0].message.parsed, Weather)


def test_history_with_calls_and_results(client: Any) -> None:
    history = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    reply = client.chat.completions.create(model=MODEL_ID, messages=history, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False)
    assert_valid_calls(reply.choices[0].message, set(SCHEMAS))


def test_concurrent_requests_decode_in_one_batch_as_they_would_alone(client: Any, monkeypatch: Any) -> None:
    from structspec.server.engine import EngineBatch

    requests = [
        {"tool_choice": "required", "parallel_tool_calls": False},
        {"tool_choice": {"type": "function", "function": {"name": "find_flights"}}},
        {"tool_choice": "none", "max_tokens": 12},
        {"tool_choice": "auto", "parallel_tool_calls": False},
    ]

    def ask(options: dict[str, Any]) -> Any:
        reply = client.chat.completions.create(model=MODEL_ID, messages=MESSAGES, tools=TOOLS, **options)
        choice = reply.choices[0]
        calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or ()]
        return choice.finish_reason, choice.message.content, calls

    alone = [ask(options) for options in requests]
    rows: list[int] = []
    step = EngineBatch.step
    monkeypatch.setattr(EngineBatch, "step", lambda self: (rows.append(len(self)), step(self))[1])
    with ThreadPoolExecutor(len(requests)) as pool:
        together = list(pool.map(ask, requests))
    assert max(rows) > 1  # the requests shared target forwards
    assert together == alone
    assert [reason for reason, _, _ in alone] == ["tool_calls", "tool_calls", alone[2][0], "tool_calls"]


def bad(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/v1/chat/completions", json={"messages": MESSAGES, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and "Traceback" not in error["message"]
    return error


def test_unsupported_schema_names_the_tool_and_pointer(http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "tag", "strict": True, "parameters": {
        "type": "object", "properties": {"labels": {"type": "array", "uniqueItems": True}}}}}
    error = bad(http, tools=[WEATHER, tool])
    assert error["param"] == "tools[1].function.parameters#/properties/labels/uniqueItems"
    assert "tool 'tag'" in error["message"] and error["code"] == "unsupported_schema"
    invalid = {"type": "function", "function": {"name": "odd", "parameters": {"type": "object",
                                                                               "properties": {"n": {"type": 5}}}}}
    error = bad(http, tools=[invalid])
    assert error["param"] == "tools[0].function.parameters#/properties/n/type" and "tool 'odd'" in error["message"]


def test_relaxed_schema_is_accepted_without_strict(http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "tag", "strict": False, "parameters": {
        "type": "object", "properties": {"labels": {"type": "array", "items": {"type": "string"},
                                                    "uniqueItems": True, "maxItems": 2}},
        "required": ["labels"], "additionalProperties": False}}}
    response = http.post("/v1/chat/completions", json={"messages": MESSAGES, "tools": [tool],
                                                       "tool_choice": "required", "parallel_tool_calls": False})
    assert response.status_code == 200, response.text
    (call,) = response.json()["choices"][0]["message"]["tool_calls"]
    assert isinstance(json.loads(call["function"]["arguments"])["labels"], list)


@pytest.mark.parametrize(
    ("body", "param", "code", "fragment"),
    [
        ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name", "duplicate_tool_name", "'get_weather'"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice.function.name", "unknown_tool", "'nope'"),
        ({"tool_choice": "required"}, "tool_choice", "invalid_value", "at least one tool"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice", "invalid_value", "at least one tool"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
          "response_format": {"type": "json_object"}}, "tool_choice", "conflicting_constraints", "tool_choice"),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type", "invalid_value", "tools[0].type"),
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name",
         "invalid_value", "pattern"),
        ({"tool_choice": "sometimes", "tools": [WEATHER]}, "tool_choice", "invalid_value", "tool_choice"),
        ({"messages": [{"role": "tool", "content": "21"}]}, "messages[0]", "invalid_value", "tool_call_id"),
        ({"messages": [{"role": "user", "content": None}]}, "messages[0]", "invalid_value", "content is required"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                             "function": {"name": "f", "arguments": "{oops"}}]}]},
         "messages[0].tool_calls[0].function.arguments", "invalid_value", "JSON"),
    ],
)
def test_bad_tool_requests_get_400(http: httpx.Client, body: dict, param: str, code: str, fragment: str) -> None:
    error = bad(http, **body)
    assert error["param"] == param and error["code"] == code and fragment in error["message"], error


def test_a_call_cut_short_by_max_tokens_finishes_with_length(http: httpx.Client) -> None:
    body = {"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 40}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    (call,) = choice["message"]["tool_calls"]  # as far as it got: named, arguments begun
    assert call["function"]["name"] == "get_weather" and call["function"]["arguments"].startswith("{")
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as stream:
        chunks = [json.loads(line[6:]) for line in stream.iter_lines() if line and line != "data: [DONE]"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    pieces = [d["tool_calls"][0]["function"]["arguments"] for c in chunks
              if "tool_calls" in (d := c["choices"][0]["delta"])]
    assert "".join(pieces) == call["function"]["arguments"]
