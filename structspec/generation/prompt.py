"""Prompt text or chat messages to token ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from structspec.generation.tool_calls import plain_messages, template_takes_tools

Messages = Sequence[dict[str, Any]]


def prompt_ids(tokenizer: Any, prompt: str | Messages, tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
    """Token ids of a prompt.

    A string is encoded with the tokenizer's special tokens (BOS where it adds one). Messages
    (``[{"role": ..., "content": ...}, ...]``) go through the tokenizer's chat template with the
    generation prompt added; a tokenizer without one gets the plain join
    ``"<role>: <content>\\n"`` per message followed by ``"assistant: "``.

    ``tools`` (OpenAI's function definitions) go to a template that reads a ``tools`` variable
    through ``apply_chat_template(tools=...)``; for any other template (or none) they are
    written into the system message, and past tool calls and results into the messages' text
    (:func:`structspec.generation.tool_calls.plain_messages`).
    """
    if isinstance(prompt, str):
        if tools:
            raise ValueError("tools are given to chat messages, not to a text prompt")
        ids = list(tokenizer(prompt)["input_ids"])
    elif isinstance(prompt, Sequence) and all(isinstance(m, dict) for m in prompt):
        ids = _chat_ids(tokenizer, prompt, tools)
    else:
        raise TypeError(f"prompt must be a string or a list of message dicts, got {type(prompt).__name__}")
    if not ids:
        raise ValueError("the prompt encodes to no tokens; give some text (or a tokenizer that adds BOS)")
    return ids


def _chat_ids(tokenizer: Any, messages: Messages, tools: Sequence[dict[str, Any]] | None) -> list[int]:
    for index, message in enumerate(messages):
        if "role" not in message or "content" not in message:
            raise ValueError(f"message {index} needs 'role' and 'content' keys, got {sorted(message)}")
    if template_takes_tools(tokenizer):
        text = tokenizer.apply_chat_template(list(messages), tools=tools or None, add_generation_prompt=True,
                                             tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if tools or any(m["role"] == "tool" or m.get("tool_calls") for m in messages):
        messages = plain_messages(messages, tools)
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return list(tokenizer(text)["input_ids"])
