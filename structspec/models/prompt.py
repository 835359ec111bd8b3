"""The extraction prompt format shared by the corpus tool, training and ``structspec extract``.

One place defines how a source text and a JSON Schema become chat messages, which special
tokens the bundled demo tokenizer has, and the Jinja chat template that renders messages into
the exact text the demo models were trained on.
"""

from __future__ import annotations

import json
from typing import Any

SYSTEM_TOKEN = "<|system|>"
USER_TOKEN = "<|user|>"
ASSISTANT_TOKEN = "<|assistant|>"
END_TOKEN = "<|end|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = (PAD_TOKEN, END_TOKEN, SYSTEM_TOKEN, USER_TOKEN, ASSISTANT_TOKEN)
"""Special tokens of the demo tokenizer, in id order (``<|pad|>`` is id 0)."""

TEXT_HEADING = "Text:\n"
"""Starts the source text in the user turn; training finds the text after it."""

DEFAULT_INSTRUCTIONS = "Extract the data from the text as JSON that follows the schema."

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
"""Renders ``<|role|>\\ncontent<|end|>\\n`` per message, then ``<|assistant|>\\n`` for generation."""


def compact_json(value: Any) -> str:
    """JSON text without spaces, non-ASCII kept as is: the form of schemas and answers in prompts."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def extraction_messages(text: str, schema: dict[str, Any], instructions: str | None = None) -> list[dict[str, str]]:
    """Chat messages asking a model to extract ``schema``-shaped JSON from ``text`` (ValueError
    when it is blank). The schema is shown without ``x-grounded`` keywords: grounding is enforced
    by the grammar, and the bundled models never saw the keyword."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("the text is empty: there is nothing to extract from")
    if not isinstance(schema, dict):
        raise TypeError(f"schema must be a JSON object (dict), got {type(schema).__name__}")
    shown = compact_json(_without_grounding(schema))
    content = f"{instructions or DEFAULT_INSTRUCTIONS}\nSchema: {shown}\n{TEXT_HEADING}{text.strip()}"
    return [{"role": "user", "content": content}]


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_DATA_KEYWORDS = ("const", "enum", "default", "examples")


def _without_grounding(schema: Any) -> Any:
    """A copy of ``schema`` without its boolean ``x-grounded`` keywords (names of properties
    and values of data keywords are kept as they are)."""
    if isinstance(schema, list):
        return [_without_grounding(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "x-grounded" and isinstance(value, bool):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _without_grounding(sub) for name, sub in value.items()}
        elif key in _DATA_KEYWORDS:
            out[key] = value
        else:
            out[key] = _without_grounding(value)
    return out


def render_prompt(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """The text :data:`CHAT_TEMPLATE` produces, without needing Jinja (used to build the corpus)."""
    parts = [f"<|{m['role']}|>\n{m['content']}{END_TOKEN}\n" for m in messages]
    if add_generation_prompt:
        parts.append(f"{ASSISTANT_TOKEN}\n")
    return "".join(parts)


def render_answer(value: Any) -> str:
    """The assistant turn the models are trained to produce: compact JSON, then the end-of-turn token."""
    return compact_json(value) + END_TOKEN
