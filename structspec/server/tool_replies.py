"""OpenAI tool calling, reply side: generated text read as content and ``tool_calls``, whole or
as stream deltas shaped like OpenAI's.

The text is read with the request's structural tag (:class:`~structspec.grammar.tag_reading.TagReader`):
each segment is one call, its content the call's ``arguments``. Text outside the calls is the
message's ``content``; in a reply with calls, text made only of whitespace (the line breaks
around the calls) is no content (``null``). A reply that calls tools finishes with
``"tool_calls"`` (``"length"`` stays ``"length"``: the last call may then be cut short).
"""

from __future__ import annotations

import uuid
from typing import Any

from structspec.grammar.tag_reading import BeginEvent, ContentEvent, IncompleteText, TagEvent, TagReader, TextEvent
from structspec.server.engine import Completion
from structspec.server.openai_format import TextReply
from structspec.server.tools import ToolCalling


class ToolReply(TextReply):
    """Reads one reply; make one per request (it holds the stream's reading state)."""

    def __init__(self, calling: ToolCalling) -> None:
        self.calling = calling
        self._reader = TagReader(calling.tag)
        self._calls = 0
        self._held = ""  # content so far, while it is only whitespace
        self._shown = False  # some content was sent

    def deltas(self, piece: str) -> list[dict[str, Any]]:
        return self._translate(self._reader.feed(piece))

    def finish(self, completion: Completion) -> tuple[list[dict[str, Any]], str]:
        try:
            events = self._reader.close()
        except IncompleteText as exc:  # out of tokens inside a call: the call stays as far as it got
            events = exc.events
        deltas = self._translate(events)
        if self._held and not self._calls:
            deltas.append({"content": self._held})
        finish_reason = "tool_calls" if self._calls and completion.finish_reason == "stop" else completion.finish_reason
        return deltas, finish_reason

    def message(self, completion: Completion) -> tuple[dict[str, Any], str]:
        reading = ToolReply(self.calling)
        deltas = reading.deltas(completion.text)
        held, finish_reason = reading.finish(completion)
        content: list[str] = []
        calls: list[dict[str, Any]] = []
        for delta in [*deltas, *held]:
            if "content" in delta:
                content.append(delta["content"])
            for part in delta.get("tool_calls", ()):
                if "id" in part:
                    calls.append({"id": part["id"], "type": "function", "function": dict(part["function"])})
                else:
                    calls[part["index"]]["function"]["arguments"] += part["function"]["arguments"]
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content) if content or not calls else None}
        if calls:
            message["tool_calls"] = calls
        return message, finish_reason

    def _translate(self, events: list[TagEvent]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, TextEvent):
                out += self._content(event.text)
            elif isinstance(event, BeginEvent):
                function = {"name": self.calling.names[event.tag], "arguments": ""}
                call = {"index": self._calls, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                        "function": function}
                out.append({"tool_calls": [call]})
                self._calls += 1
            elif isinstance(event, ContentEvent):
                out.append({"tool_calls": [{"index": self._calls - 1, "function": {"arguments": event.text}}]})
        return out

    def _content(self, text: str) -> list[dict[str, Any]]:
        if self._shown:
            return [{"content": text}]
        self._held += text
        if self._held.isspace():
            return []
        self._shown, held, self._held = True, self._held, ""
        return [{"content": held}]
