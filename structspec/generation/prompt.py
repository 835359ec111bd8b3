"""Prompt text or chat messages to token ids, and the check that they leave room in the model's context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from structspec.errors import StructspecError
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


class ContextLengthError(StructspecError, ValueError):
    """The prompt plus the tokens to generate do not fit in a model's context.

    Attributes:
        prompt_tokens: the prompt's length in tokens.
        max_new_tokens: the tokens asked for.
        context: the model's context length in tokens.
        which: ``"model"``, or ``"draft model"`` when the draft's context is the shorter.
    """

    def __init__(self, prompt_tokens: int, max_new_tokens: int, context: int, which: str = "model") -> None:
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max_new_tokens
        self.context = context
        self.which = which
        super().__init__(
            f"the prompt is {prompt_tokens} tokens and up to {max_new_tokens} more may be generated, "
            f"{prompt_tokens + max_new_tokens} in all, over the {which}'s context of {context} tokens"
        )


def context_length(model: Any) -> int | None:
    """The most positions ``model`` takes (its config's ``max_position_embeddings``), if it says."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    length = getattr(config, "max_position_embeddings", None)
    return length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None


def check_context(prompt_tokens: int, max_new_tokens: int, models: dict[str, Any]) -> None:
    """Raise :class:`ContextLengthError` unless the prompt and ``max_new_tokens`` fit in the
    context of every model in ``models`` (by role: ``{"model": target, "draft model": draft}``)."""
    for which, model in models.items():
        context = context_length(model)
        if context is not None and prompt_tokens + max_new_tokens > context:
            raise ContextLengthError(prompt_tokens, max_new_tokens, context, which)
