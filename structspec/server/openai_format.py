"""OpenAI's wire format for chat completions: the reply object and the server-sent event stream."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from structspec.server.engine import Completion
from structspec.server.errors import APIError
from structspec.server.handlers import LOG


class TextReply:
    """How generated text becomes the reply's message and stream deltas: all of it is content.
    (:class:`structspec.server.tool_replies.ToolReply` reads tool calls out of it instead.)"""

    def message(self, completion: Completion) -> tuple[dict[str, Any], str]:
        """The reply's ``message`` and ``finish_reason``."""
        return {"role": "assistant", "content": completion.text}, completion.finish_reason

    def deltas(self, piece: str) -> list[dict[str, Any]]:
        """The stream deltas of a decoded piece."""
        return [{"content": piece}] if piece else []

    def finish(self, completion: Completion) -> tuple[list[dict[str, Any]], str]:
        """Deltas still held back when generation ends, and the ``finish_reason``."""
        return [], completion.finish_reason


def chat_body(completion: Completion, reply_id: str, model_id: str, reply: TextReply | None = None) -> dict[str, Any]:
    """A ``chat.completion`` object, with structspec's ``stats`` added."""
    message, finish_reason = (reply or TextReply()).message(completion)
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": completion.usage(),
        "stats": completion.stats,
    }


async def first_event(events: AsyncGenerator[str | Completion, None]) -> str | Completion:
    """The first event of a job, so that problems found before any token still become an HTTP error."""
    try:
        return await anext(events)
    except BaseException:
        await events.aclose()
        raise


async def sse_chunks(
    first: str | Completion,
    events: AsyncGenerator[str | Completion, None],
    reply_id: str,
    model_id: str,
    include_usage: bool,
    reply: TextReply | None = None,
) -> AsyncIterator[str]:
    """OpenAI ``chat.completion.chunk`` events, then ``data: [DONE]``; a failure becomes an error event."""
    created = int(time.time())
    reply = reply or TextReply()

    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": reply_id, "object": "chat.completion.chunk", "created": created, "model": model_id,
                "choices": choices, **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        return event([{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}])

    try:
        yield chunk({"role": "assistant", "content": ""})
        async for item in _chain(first, events):
            if isinstance(item, Completion):
                held, finish_reason = reply.finish(item)
                for delta in held:
                    yield chunk(delta)
                yield chunk({}, finish_reason)
                if include_usage:
                    yield event([], usage=item.usage())
            else:
                for delta in reply.deltas(item):
                    yield chunk(delta)
    except APIError as exc:
        yield f"data: {json.dumps(exc.body())}\n\n"
    except Exception:
        LOG.exception("generation failed mid-stream")
        yield f"data: {json.dumps(APIError('internal server error', status=500, type='server_error').body())}\n\n"
    finally:
        await events.aclose()
    yield "data: [DONE]\n\n"


async def _chain(first: str | Completion, rest: AsyncIterator[str | Completion]) -> AsyncIterator[str | Completion]:
    yield first
    async for event in rest:
        yield event
