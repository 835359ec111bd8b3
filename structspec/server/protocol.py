"""Request bodies the server accepts, as Pydantic models: the HTTP schema, converted into a
:class:`~structspec.generation.sampling.Sampling` (whose checks give the range messages).

Every field is either honoured or refused: an unknown key is an error, and a known OpenAI field
this server does not implement (``tools``, ``logprobs``, ``stop``, ...) is accepted only when it
is ``null`` or set to the value that turns its feature off (``"logprobs": false``), since then
it is honoured as sent.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from structspec.generation.sampling import OptionError, Sampling
from structspec.server.errors import APIError

TOOLS = "this server does not call tools yet"
LOGPROBS = "this server does not return log probabilities"
STEERING = "steer the output with response_format or grammar"


@dataclasses.dataclass(frozen=True)
class Unsupported:
    """A known OpenAI field this server does not implement: why, and the values (besides
    ``null``) that leave its feature off and so are accepted."""

    reason: str
    off: tuple[Any, ...] = ()

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` leaves the feature off (``0`` is not ``false``)."""
        return value is None or any(
            value == off and isinstance(value, bool) == isinstance(off, bool) for off in self.off
        )


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    UNSUPPORTED: ClassVar[dict[str, Unsupported]] = {}
    """Known fields that are refused unless sent with a value that leaves them off."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_unsupported(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not cls.UNSUPPORTED.keys() & data.keys():
            return data
        for key, value in data.items():
            unsupported = cls.UNSUPPORTED.get(key)
            if unsupported is not None and not unsupported.accepts(value):
                context = {"field": key, "reason": unsupported.reason}
                raise PydanticCustomError("unsupported_parameter", "{reason}", context)
        return {key: value for key, value in data.items() if key not in cls.UNSUPPORTED}


class TextPart(_Body):
    """One part of a multi-part message; only text parts are supported."""

    type: Literal["text"]
    text: str


class Message(_Body):
    """A chat message."""

    UNSUPPORTED: ClassVar[dict[str, Unsupported]] = {
        "name": Unsupported("the prompt has no place for participant names"),
        "tool_calls": Unsupported(TOOLS, ([],)),
        "tool_call_id": Unsupported(TOOLS),
        "function_call": Unsupported(TOOLS),
        "refusal": Unsupported("this server does not refuse"),
        "audio": Unsupported("this server handles text only"),
        "annotations": Unsupported("this server does not annotate replies", ([],)),
    }

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def text(self) -> str:
        """The content as one string (parts joined)."""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class JsonSchemaFormat(_Body):
    """``response_format.json_schema``: the schema and whether it must be enforced exactly."""

    UNSUPPORTED: ClassVar[dict[str, Unsupported]] = {
        "description": Unsupported("the model is not shown a description; the schema alone constrains the output"),
    }

    name: str = "response"
    schema_: dict[str, Any] | bool = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    """``response_format``: plain text, any JSON object, or JSON valid under a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Body):
    """``stream_options``: whether the stream ends with a usage chunk."""

    include_usage: bool = False


class _Generating(_Body):
    """Fields shared by every generating endpoint; ``None`` takes the server's default."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None

    def token_budget(self) -> tuple[int | None, str]:
        """The requested token count and the field it came from."""
        return self.max_tokens, "max_tokens"

    def sampling(self, defaults: Sampling, max_tokens: int, max_tokens_field: str) -> Sampling:
        """The request's :class:`Sampling`: its fields over the server's ``defaults``, with
        ``max_tokens`` tokens; HTTP 400 naming the field whose value is out of range."""
        fields = ("temperature", "top_p", "top_k", "seed")
        given = {name: getattr(self, name) for name in fields if getattr(self, name) is not None}
        try:
            return dataclasses.replace(defaults, max_new_tokens=max_tokens, **given)
        except OptionError as exc:
            param = max_tokens_field if exc.field == "max_new_tokens" else exc.field
            raise APIError(f"{param}: {exc.problem}", param=param, code="invalid_value") from None


class ChatRequest(_Generating):
    """``POST /v1/chat/completions``."""

    UNSUPPORTED: ClassVar[dict[str, Unsupported]] = {
        "tools": Unsupported(TOOLS),
        "tool_choice": Unsupported(TOOLS, ("none",)),
        "parallel_tool_calls": Unsupported(TOOLS),
        "functions": Unsupported(TOOLS),
        "function_call": Unsupported(TOOLS, ("none",)),
        "logprobs": Unsupported(LOGPROBS, (False,)),
        "top_logprobs": Unsupported(LOGPROBS, (0,)),
        "logit_bias": Unsupported(STEERING, ({},)),
        "presence_penalty": Unsupported(STEERING, (0,)),
        "frequency_penalty": Unsupported(STEERING, (0,)),
        "stop": Unsupported("a grammar decides where the text ends: give one in grammar or response_format", ([],)),
        "modalities": Unsupported("this server handles text only", (["text"],)),
        "audio": Unsupported("this server handles text only"),
        "prediction": Unsupported("drafts come from the grammar, the context and the draft model"),
        "reasoning_effort": Unsupported("the served model has no reasoning mode"),
        "web_search_options": Unsupported("this server does not search the web"),
        "store": Unsupported("this server does not store completions", (False,)),
        "metadata": Unsupported("this server does not store completions", ({},)),
        "service_tier": Unsupported("this server has one service tier"),
        "user": Unsupported("this server does not record end users"),
    }

    messages: list[Message] = Field(min_length=1)
    response_format: ResponseFormat | None = None
    grammar: str | None = None
    max_completion_tokens: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int) -> int:
        if n != 1:
            raise PydanticCustomError("unsupported_value", "this server returns one choice per request (n: 1), got {n}",
                                      {"n": n})
        return n

    def token_budget(self) -> tuple[int | None, str]:
        """The requested token count and the field it came from."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"


class ExtractRequest(_Generating):
    """``POST /v1/extract``: pull ``schema``-shaped data out of ``text``."""

    text: str
    schema_: dict[str, Any] = Field(alias="schema")
    instructions: str | None = None

