"""Request bodies the server accepts, as Pydantic models: the HTTP schema, converted into a
:class:`~structspec.generation.sampling.Sampling` (whose checks give the range messages).

Every field is either honoured or refused: an unknown key is an error, and a known OpenAI field
this server does not implement (``logprobs``, ``stop``, the deprecated ``functions``, ...) is
accepted only when it is ``null`` or set to the value that turns its feature off
(``"logprobs": false``), since then it is honoured as sent.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from structspec.generation.sampling import OptionError, Sampling
from structspec.server.errors import APIError

FUNCTIONS = "the deprecated functions API is not supported: give tools (and tool_choice)"
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
    # strict: a value of another JSON type is refused, not converted ("5" is no integer, "yes" no boolean)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)

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


class CalledFunction(_Body):
    """``function`` of a tool call in the history: its name and its arguments as JSON text."""

    name: str
    arguments: str

    @field_validator("arguments")
    @classmethod
    def _json(cls, value: str) -> str:
        try:
            json.loads(value)
        except json.JSONDecodeError as exc:
            raise PydanticCustomError("invalid_value", "arguments must be JSON text ({problem} at {line}:{column})",
                                      {"problem": exc.msg, "line": exc.lineno, "column": exc.colno}) from None
        return value


class MessageToolCall(_Body):
    """A tool call in an assistant message of the history."""

    id: str
    type: Literal["function"] = "function"
    function: CalledFunction

    def for_template(self) -> dict[str, Any]:
        """The call as chat templates read it (arguments as a value, not JSON text)."""
        arguments = json.loads(self.function.arguments)
        return {"id": self.id, "type": "function", "function": {"name": self.function.name, "arguments": arguments}}


class Message(_Body):
    """A chat message; an assistant message may hold the tool calls it made (then its content
    may be null), a ``tool`` message the result of one."""

    UNSUPPORTED: ClassVar[dict[str, Unsupported]] = {
        "name": Unsupported("the prompt has no place for participant names"),
        "function_call": Unsupported(FUNCTIONS),
        "refusal": Unsupported("this server does not refuse"),
        "audio": Unsupported("this server handles text only"),
        "annotations": Unsupported("this server does not annotate replies", ([],)),
    }

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> Message:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise PydanticCustomError(
                "invalid_value", "content is required (only an assistant message with tool_calls may leave it out)")
        if self.tool_calls and self.role != "assistant":
            raise PydanticCustomError("invalid_value", "only assistant messages hold tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise PydanticCustomError("invalid_value", "a tool message needs the tool_call_id of the call it answers")
        return self

    def text(self) -> str:
        """The content as one string (parts joined; empty for null)."""
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates read it."""
        message: dict[str, Any] = {"role": self.role, "content": self.text()}
        if self.tool_calls:
            message["tool_calls"] = [call.for_template() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class FunctionDefinition(_Body):
    """``tools[i].function``: the function's name, what it does, and its arguments' JSON Schema."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(_Body):
    """``tools[i]``: only function tools exist."""

    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(_Body):
    """``tool_choice.function``."""

    name: str


class NamedToolChoice(_Body):
    """``tool_choice: {"type": "function", "function": {"name": ...}}``."""

    type: Literal["function"]
    function: FunctionName


def _tool_choice(value: Any) -> Any:
    """``"none"``, ``"auto"``, ``"required"`` or a :class:`NamedToolChoice`, with one clear error."""
    if value is None or value in ("none", "auto", "required") or isinstance(value, dict):
        return value
    raise PydanticCustomError(
        "invalid_value", 'tool_choice is "none", "auto", "required" or {"type": "function", "function": {"name": ...}}')


ToolChoice = Annotated[Literal["none", "auto", "required"] | NamedToolChoice, BeforeValidator(_tool_choice)]


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
        "functions": Unsupported(FUNCTIONS),
        "function_call": Unsupported(FUNCTIONS, ("none",)),
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
    tools: list[ToolDefinition] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool = True
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
    grounded: bool = False  # every plain string value must copy a span of ``text`` (docs/grounded.md)
