"""What the server does with each request field, over real HTTP (uvicorn on 127.0.0.1, the
stories260K model): sampling options checked by the library's own checks, out-of-range seeds,
unsupported and unknown fields, field paths as the client wrote them, and connections that
outlive an error."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import live_server, on_one_connection
from tiny_models import one_thread, stories_dir, stories_model, tokenizer

from structspec.generation.sampling import MAX_SEED, OptionError, Sampling
from structspec.tokens.vocabulary import Vocabulary

pytest.importorskip("fastapi", reason="the server extra is not installed")
openai = pytest.importorskip("openai", reason="the openai client is not installed")

__all__ = ["one_thread"]

MESSAGES = [{"role": "user", "content": "Once upon a time there was a girl."}]
YES_NO = 'root ::= "yes" | "no"'
TOOL = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}


def _app(**engine_options: Any) -> Any:
    from structspec.generation import Generator, SpecConfig
    from structspec.server.app import create_app
    from structspec.server.engine import Engine
    from structspec.server.limits import Limits

    generator = Generator(stories_model(), tokenizer("stories260K"))
    engine = Engine(generator, "stories", SpecConfig(), **engine_options)
    return create_app(engine, Limits(max_tokens=96, default_max_tokens=8))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with live_server(_app()) as url:
        yield url


@pytest.fixture(scope="module")
def http(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=120) as client:
        yield client


def chat(http: httpx.Client, **body: Any) -> httpx.Response:
    # json.dumps writes NaN and Infinity, as Python's json module (and the server) reads them.
    return http.post("/v1/chat/completions", content=json.dumps({"messages": MESSAGES, **body}),
                     headers={"Content-Type": "application/json"})


def error_of(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    return error


def problem(**options: Any) -> str:
    """The library's message for a bad sampling option (without the option's name)."""
    with pytest.raises(OptionError) as caught:
        Sampling(**options)
    return caught.value.problem


# -- seeds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [2**70, 2**64, -1, -(2**63)])
def test_a_seed_out_of_range_is_a_400_and_the_connection_lives_on(server: str, seed: int) -> None:
    body = json.dumps({"messages": MESSAGES, "grammar": YES_NO, "seed": seed, "temperature": 1}).encode()
    (status, reply), (health_status, health) = on_one_connection(
        server, [("POST", "/v1/chat/completions", body), ("GET", "/health", None)]
    )
    assert status == 400, reply
    assert reply["error"]["param"] == "seed" and reply["error"]["code"] == "invalid_value"
    assert reply["error"]["message"] == f"seed: {problem(seed=seed)}"
    assert str(MAX_SEED) in reply["error"]["message"]
    assert health_status == 200 and health["status"] == "ok"


def test_every_64_bit_seed_samples_reproducibly(http: httpx.Client) -> None:
    replies = [chat(http, seed=seed, temperature=1.5, max_tokens=6) for seed in (MAX_SEED, MAX_SEED, 0)]
    assert [r.status_code for r in replies] == [200, 200, 200], replies[0].text
    texts = [r.json()["choices"][0]["message"]["content"] for r in replies]
    assert texts[0] == texts[1]


# -- sampling options: the server's checks are the library's ---------------------------------------

OPTION_VALUES = {
    "temperature": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 5)),
    "top_p": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-1, 2)),
    "top_k": st.integers(-(2**70), 2**70),
    "seed": st.integers(-(2**70), 2**70),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_request_is_refused_exactly_when_the_library_refuses_its_options(http: httpx.Client, data: Any) -> None:
    name = data.draw(st.sampled_from(sorted(OPTION_VALUES)))
    value = data.draw(OPTION_VALUES[name])
    as_read = float(value) if name in ("temperature", "top_p") else value  # JSON numbers read as the field's type
    try:
        Sampling(**{name: as_read})
        expected = None
    except OptionError as exc:
        expected = f"{name}: {exc.problem}"
    response = chat(http, grammar=YES_NO, max_tokens=1, **{name: value})
    if expected is None:
        assert response.status_code == 200, response.text
    else:
        error = error_of(response)
        assert (error["message"], error["param"], error["code"]) == (expected, name, "invalid_value")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_temperature_that_is_not_finite_says_so(http: httpx.Client, value: float) -> None:
    error = error_of(chat(http, temperature=value))
    assert error["param"] == "temperature" and "must be a finite number in [0, 2]" in error["message"]
    assert "should be" not in error["message"]


@pytest.mark.parametrize(("field", "value"), [("max_tokens", 0), ("max_completion_tokens", -2)])
def test_too_few_tokens_is_named_by_the_field_the_client_sent(http: httpx.Client, field: str, value: int) -> None:
    error = error_of(chat(http, **{field: value}))
    assert (error["message"], error["param"]) == (f"{field}: {problem(max_new_tokens=value)}", field)


# -- unsupported and unknown fields ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"functions": [TOOL["function"]]}, "functions", "unsupported_parameter"),
        ({"function_call": "auto"}, "function_call", "unsupported_parameter"),
        ({"tools": [{**TOOL, "function": {**TOOL["function"], "returns": "str"}}]}, "tools[0].function.returns",
         "unknown_parameter"),
        ({"messages": [{"role": "assistant", "content": "hi", "function_call": {"name": "f"}}]},
         "messages[0].function_call", "unsupported_parameter"),
        ({"logprobs": True}, "logprobs", "unsupported_parameter"),
        ({"top_logprobs": 3}, "top_logprobs", "unsupported_parameter"),
        ({"stop": ["\n"]}, "stop", "unsupported_parameter"),
        ({"stop": "."}, "stop", "unsupported_parameter"),
        ({"presence_penalty": 0.5}, "presence_penalty", "unsupported_parameter"),
        ({"frequency_penalty": False}, "frequency_penalty", "unsupported_parameter"),
        ({"logit_bias": {"50256": -100}}, "logit_bias", "unsupported_parameter"),
        ({"user": "u-1"}, "user", "unsupported_parameter"),
        ({"n": 2}, "n", "unsupported_value"),
        ({"temprature": 0.5}, "temprature", "unknown_parameter"),
        ({"stream_options": {"include_usage": True, "chunk_size": 4}}, "stream_options.chunk_size",
         "unknown_parameter"),
        ({"messages": [{"role": "user", "content": "hi", "name": "ann"}]}, "messages[0].name",
         "unsupported_parameter"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache": 1}]}]},
         "messages[0].content[0].cache", "unknown_parameter"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "description": "a"}}},
         "response_format.json_schema.description", "unsupported_parameter"),
    ],
)
def test_fields_the_server_would_not_honour_are_a_400_naming_them(
    http: httpx.Client, body: dict[str, Any], param: str, code: str
) -> None:
    error = error_of(chat(http, grammar=YES_NO, **body))
    assert (error["param"], error["code"]) == (param, code)
    assert error["message"].startswith(f"{param}: ")


def test_fields_sent_with_the_value_that_turns_them_off_are_honoured(http: httpx.Client) -> None:
    off = {"tools": None, "tool_choice": "none", "function_call": "none", "logprobs": False, "top_logprobs": 0,
           "presence_penalty": 0, "frequency_penalty": 0.0, "stop": [], "logit_bias": {}, "user": None, "n": 1,
           "store": False}
    response = chat(http, grammar=YES_NO, **off)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] in {"yes", "no"}


def test_an_openai_client_sending_the_deprecated_functions_gets_a_400(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="stories", messages=MESSAGES, functions=[TOOL["function"]])
    assert caught.value.status_code == 400
    assert caught.value.body["param"] == "functions" and caught.value.body["code"] == "unsupported_parameter"
    assert "give tools" in caught.value.body["message"]


# -- field paths -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "a valid string or a valid list"),
        ({"messages": [MESSAGES[0], {"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         "messages[1].content[0].type", "'text'"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0]", "tool_call_id"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "'tool'"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": "x"}}},
         "response_format.json_schema.schema", "dictionary"),
        ({"messages": "hi"}, "messages", "list"),
    ],
)
def test_errors_name_the_field_as_the_client_wrote_it(
    http: httpx.Client, body: dict[str, Any], param: str, fragment: str
) -> None:
    error = error_of(chat(http, **body))
    assert error["param"] == param
    assert error["message"].startswith(f"{param}: ") and fragment in error["message"]
    for internal in (".str", "list[", "TextPart", "function-after", ".0."):
        assert internal not in error["message"], error


# -- /v1/extract ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "  \n\t "])
def test_extract_from_an_empty_text_is_a_400(http: httpx.Client, text: str) -> None:
    error = error_of(http.post("/v1/extract", json={"text": text, "schema": {"type": "object"}}))
    assert error["param"] == "text" and "empty" in error["message"]


def test_extract_from_a_text_longer_than_the_context_is_a_400(http: httpx.Client) -> None:
    error = error_of(http.post("/v1/extract", json={"text": "Lily had a red ball. " * 200, "schema": {"type": "object"},
                                                    "max_tokens": 8}))
    assert (error["param"], error["code"]) == ("text", "context_length_exceeded")
    assert "context of 512 tokens" in error["message"]


def test_extract_refuses_unknown_fields(http: httpx.Client) -> None:
    error = error_of(http.post("/v1/extract", json={"text": "Tom is 7.", "schema": {"type": "object"}, "schma": {}}))
    assert (error["param"], error["code"]) == ("schma", "unknown_parameter") and "schema" in error["message"]


# -- a 500 keeps the connection ------------------------------------------------------------------------------


def test_an_unexpected_error_is_a_bare_500_and_the_connection_lives_on() -> None:
    from structspec.server.app import create_app
    from structspec.server.engine import Engine

    class Broken:
        tokenizer = tokenizer("stories260K")
        vocabulary = Vocabulary.from_tokenizer(tokenizer)

        def generate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("secret internals")

    app = create_app(Engine(Broken(), "broken"))
    body = json.dumps({"messages": MESSAGES}).encode()
    with live_server(app) as url:
        replies = on_one_connection(url, [("POST", "/v1/chat/completions", body), ("GET", "/health", None)])
    assert replies[0] == (500, {"error": {"message": "internal server error", "type": "server_error",
                                          "param": None, "code": None}})
    assert replies[1][0] == 200


# -- serve's request defaults -----------------------------------------------------------------------------------


def test_server_defaults_apply_to_requests_that_leave_the_options_out(http: httpx.Client) -> None:
    explicit = chat(http, temperature=1.5, top_k=40, seed=11, max_tokens=8).json()["choices"][0]["message"]["content"]
    app = _app(defaults=Sampling(temperature=1.5, top_k=40, seed=11))
    try:
        with live_server(app) as url, httpx.Client(base_url=url, timeout=120) as other:
            implicit = chat(other, max_tokens=8).json()["choices"][0]["message"]["content"]
            greedy = chat(other, temperature=0, max_tokens=8).json()["choices"][0]["message"]["content"]
    finally:
        app.state.worker.close()
    assert implicit == explicit
    assert greedy == chat(http, max_tokens=8).json()["choices"][0]["message"]["content"]


def test_serve_flags_become_request_defaults_and_stats_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    import uvicorn

    from structspec.cli import main

    served: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(app))
    status = main(["serve", "--model", str(stories_dir()), "--no-draft", "--temperature", "0.7", "--top-p", "0.9",
                   "--seed", str(MAX_SEED), "--stats", "--default-max-tokens", "6"])
    assert status == 0 and len(served) == 1
    app = served[0]
    assert app.state.engine.defaults == Sampling(temperature=0.7, top_p=0.9, seed=MAX_SEED, max_new_tokens=6)

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as local:
            return await local.post("/v1/chat/completions", json={"messages": MESSAGES})

    capsys.readouterr()
    response = asyncio.run(post())
    app.state.worker.close()
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] <= 6
    assert "structspec: stats:" in capsys.readouterr().err


def test_serve_refuses_bad_defaults_as_the_other_commands_do(capsys: pytest.CaptureFixture[str]) -> None:
    from structspec.cli import main

    with pytest.raises(SystemExit) as caught:
        main(["serve", "--temperature", "nan"])
    assert caught.value.code == 2
    assert f"argument --temperature: {problem(temperature=math.nan)}" in capsys.readouterr().err
