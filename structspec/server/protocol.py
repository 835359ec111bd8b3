"""Request bodies the server accepts, as Pydantic models (unknown fields are ignored, as OpenAI clients send extras)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class TextPart(_Body):
    """One part of a multi-part message; only text parts are supported."""

    type: Literal["text"]
    text: str


class Message(_Body):
    """A chat message."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def text(self) -> str:
        """The content as one string (parts joined)."""
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class JsonSchemaFormat(_Body):
    """``response_format.json_schema``: the schema and whether it must be enforced exactly."""

    name: str = "response"
    schema_: dict[str, Any] | bool = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    """``response_format``: plain text, any JSON object, or JSON valid under a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class Sampling(_Body):
    """Fields shared by every generating endpoint."""

    model: str | None = None
    max_tokens: int | None = None
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    seed: int | None = None


class StreamOptions(_Body):
    include_usage: bool = False


class ChatRequest(Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[Message] = Field(min_length=1)
    response_format: ResponseFormat | None = None
    grammar: str | None = None
    max_completion_tokens: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Literal[1] = 1

    def token_budget(self) -> tuple[int | None, str]:
        """The requested token count and the field it came from."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"


class ExtractRequest(Sampling):
    """``POST /v1/extract``: pull ``schema``-shaped data out of ``text``."""

    text: str
    schema_: dict[str, Any] = Field(alias="schema")
    instructions: str | None = None
    grounded: bool = False  # every plain string value must copy a span of ``text`` (docs/grounded.md)
