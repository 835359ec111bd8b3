"""Reading text back into free text and the segments of a structural tag: whole
(:func:`parse_tagged`, exact) or as it arrives (:class:`TagReader`, events).

A segment starts at the first trigger (or, without free text, where the last one ended); its
content ends where the content's grammar is complete and ``end`` follows. :func:`parse_tagged`
takes the shortest such content that lets the rest of the text be read too; the reader takes
the first, which for JSON content is the only one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from structspec.grammar.parse_state import ParseState

if TYPE_CHECKING:
    from structspec.grammar.tags import StructuralTag, Tag


@dataclass(frozen=True)
class Segment:
    """One tagged segment of a text: ``text[start:stop] == begin + content + end``.

    ``value`` is the content parsed: the JSON value for a JSON Schema, the validated model for a
    Pydantic type, ``None`` for grammar content (read ``content``).
    """

    tag: int
    begin: str
    content: str
    end: str
    value: Any
    start: int
    stop: int


@dataclass(frozen=True)
class TaggedText:
    """A text read as free text and segments, in order."""

    parts: tuple[str | Segment, ...]

    @property
    def segments(self) -> list[Segment]:
        """The segments, in order."""
        return [part for part in self.parts if isinstance(part, Segment)]

    @property
    def free_text(self) -> str:
        """The text outside the segments, joined."""
        return "".join(part for part in self.parts if isinstance(part, str))


def parse_tagged(spec: StructuralTag, text: str) -> TaggedText:
    """``text`` as free text and segments of ``spec``; ``ValueError`` when its grammar does not
    allow the text."""
    found = _Search(spec, text).parts()
    if found is None:
        raise ValueError(f"the text does not follow the structural tag: {_snippet(text)}")
    return TaggedText(tuple(found))


def _content_ends(tag: Tag, text: str, start: int) -> Iterator[int]:
    """Positions ``j`` where ``text[start:j]`` is complete content and ``tag.end`` follows, in order."""
    state: ParseState | None = tag.content_grammar.initial_state()
    j = start
    while state is not None:
        if state.is_accepting() and text.startswith(tag.end, j):
            yield j
        if j == len(text):
            return
        state = state.advance(text[j])
        j += 1


class _Search:
    """The exact reading of a whole text: segments in order, each content the shortest that lets
    the rest of the text be read too (a depth-first search over (position, segments so far),
    failures remembered, so each is tried once)."""

    def __init__(self, spec: StructuralTag, text: str) -> None:
        self.spec = spec
        self.text = text

    def parts(self) -> list[str | Segment] | None:
        failed: set[tuple[int, int]] = set()
        stack = [((0, 0), self._moves(0, 0))]
        chosen: list[list[str | Segment]] = []
        while stack:
            key, moves = stack[-1]
            move = next(moves, None)
            if move is None:
                failed.add(key)
                stack.pop()
                if chosen:
                    chosen.pop()
                continue
            parts, following = move
            if following is None:
                found = [part for step in chosen for part in step] + parts
                return [_valued(self.spec, part) for part in found if part != ""]
            if following not in failed:
                chosen.append(parts)
                stack.append((following, self._moves(*following)))
        return None

    def _moves(self, pos: int, count: int) -> Iterator[tuple[list[str | Segment], tuple[int, int] | None]]:
        """Ways to go on from ``pos``: parts read and where they lead (``None``: the end)."""
        spec, text = self.spec, self.text
        full = spec.max_segments is not None and count >= spec.max_segments
        if spec.free_text:
            hits = [(i, t) for t in spec.triggers if (i := text.find(t, pos)) >= 0]
            if not hits:
                if count >= spec.min_segments:
                    yield [text[pos:]], None
                return
            at, trigger = min(hits)
            if not full:
                for segment in self._segments(spec.dispatch[trigger], at):
                    yield [text[pos:at], segment], (segment.stop, count + 1)
            return
        if pos == len(text) and count >= spec.min_segments:
            yield [], None
        if full or (count and not text.startswith(spec.separator, pos)):
            return
        separator = spec.separator if count else ""
        for segment in self._segments(range(len(spec.tags)), pos + len(separator)):
            yield [separator, segment], (segment.stop, count + 1)

    def _segments(self, candidates: Iterable[int], at: int) -> Iterator[Segment]:
        """Segments starting at ``at``, shortest content first."""
        text = self.text
        for i in candidates:
            tag = self.spec.tags[i]
            if not text.startswith(tag.begin, at):
                continue
            start = at + len(tag.begin)
            for stop in _content_ends(tag, text, start):
                content = text[start:stop]
                yield Segment(i, tag.begin, content, tag.end, None, at, stop + len(tag.end))


def _valued(spec: StructuralTag, part: str | Segment) -> str | Segment:
    """A segment with its value read (only for the reading kept: no work on dropped ones)."""
    if isinstance(part, str):
        return part
    return dataclasses.replace(part, value=spec.tags[part.tag].value_of(part.content))


class IncompleteText(ValueError):
    """A text that ended before its last segment did; ``events`` are those read up to there."""

    def __init__(self, message: str, events: list[TagEvent]) -> None:
        super().__init__(message)
        self.events = events


@dataclass(frozen=True)
class TextEvent:
    """Free text read by a :class:`TagReader`."""

    text: str


@dataclass(frozen=True)
class BeginEvent:
    """A segment of tag ``tag`` began (its whole ``begin`` was read)."""

    tag: int


@dataclass(frozen=True)
class ContentEvent:
    """More content of the open segment."""

    text: str


@dataclass(frozen=True)
class EndEvent:
    """The open segment ended (its ``end`` was read); ``content`` is all of its content."""

    tag: int
    content: str


TagEvent = TextEvent | BeginEvent | ContentEvent | EndEvent


class TagReader:
    """Reads a text that arrives in pieces, as events, holding back only what the next
    characters decide (a partial trigger, a partial ``begin``, content that may be ``end``).

    A segment's content ends at the first point where it is complete and ``end`` follows (for
    JSON content the only such point; :meth:`StructuralTag.parse` also tries later ones when the
    rest of the text needs it). :meth:`feed` returns the events a piece completes; call
    :meth:`close` at the end of the text for the rest.
    """

    def __init__(self, spec: StructuralTag) -> None:
        self.spec = spec
        self._buffer = ""
        self._count = 0  # segments read
        self._separated = False  # the separator before the next segment was read
        self._tag: int | None = None  # the open segment
        self._state: ParseState | None = None  # its content's parse state
        self._content: list[str] = []
        self._longest = max((len(t) for t in spec.triggers), default=0)

    def feed(self, piece: str) -> list[TagEvent]:
        """The events ``piece`` completes."""
        self._buffer += piece
        return self._drain(final=False)

    def close(self) -> list[TagEvent]:
        """The remaining events at the end of the text. :class:`IncompleteText` (with the
        events read up to there) if the text ended inside a segment or its begin."""
        events: list[TagEvent] = []
        try:
            while self._step(events, final=True):
                pass
        except ValueError as exc:
            raise IncompleteText(str(exc), events) from None
        if self._tag is not None:
            raise IncompleteText(f"the text ended inside a segment of tags[{self._tag}]", events)
        return events

    def _drain(self, final: bool) -> list[TagEvent]:
        events: list[TagEvent] = []
        while self._step(events, final):
            pass
        return events

    def _step(self, events: list[TagEvent], final: bool) -> bool:
        """Consume what can be decided now; False when nothing more can be."""
        if self._tag is not None:
            return self._in_content(events, final)
        spec, buffer = self.spec, self._buffer
        if not buffer:
            return False
        full = spec.max_segments is not None and self._count >= spec.max_segments
        if not spec.free_text:
            if self._count and not self._separated:
                sep = spec.separator
                if buffer.startswith(sep):
                    self._buffer, self._separated = buffer[len(sep):], True
                    if sep:
                        events.append(TextEvent(sep))
                    return True
                if sep.startswith(buffer) and not final:
                    return False
                raise ValueError(f"expected the separator {sep!r}: {_snippet(buffer)}")
            return self._begin(range(len(spec.tags)), events, final)
        hits = [] if full else [(i, t) for t in spec.triggers if (i := buffer.find(t)) >= 0]
        if hits:
            at, trigger = min(hits)
            if at:
                events.append(TextEvent(buffer[:at]))
                self._buffer = buffer[at:]
            return self._begin(spec.dispatch[trigger], events, final)
        keep = 0 if final or full else _partial_suffix(buffer, spec.triggers, self._longest)
        if len(buffer) > keep:
            events.append(TextEvent(buffer[: len(buffer) - keep]))
            self._buffer = buffer[len(buffer) - keep :]
        return False

    def _begin(self, candidates: Iterable[int], events: list[TagEvent], final: bool) -> bool:
        buffer = self._buffer
        for i in candidates:
            begin = self.spec.tags[i].begin
            if buffer.startswith(begin):
                self._buffer = buffer[len(begin):]
                self._tag, self._content, self._separated = i, [], False
                self._state = self.spec.tags[i].content_grammar.initial_state()
                events.append(BeginEvent(i))
                return True
            if begin.startswith(buffer) and not final:
                return False  # wait for more text
        raise ValueError(f"expected the begin of a tag: {_snippet(buffer)}")

    def _in_content(self, events: list[TagEvent], final: bool) -> bool:
        assert self._tag is not None and self._state is not None
        end, buffer, state = self.spec.tags[self._tag].end, self._buffer, self._state
        taken = 0
        while True:
            rest = buffer[taken:]
            if state.is_accepting():
                if rest.startswith(end):
                    self._emit_content(buffer[:taken], events)
                    self._buffer = rest[len(end):]
                    events.append(EndEvent(self._tag, "".join(self._content)))
                    self._tag, self._state = None, None
                    self._count += 1
                    return True
                if end.startswith(rest) and not final:
                    break  # the rest may be the start of end: wait
            if not rest:
                break
            following = state.advance(rest[0])
            if following is None:
                raise ValueError(f"the content of tags[{self._tag}] cannot go on: {_snippet(rest)}")
            state = following
            taken += 1
        self._state = state
        self._emit_content(buffer[:taken], events)
        self._buffer = buffer[taken:]
        return False

    def _emit_content(self, text: str, events: list[TagEvent]) -> None:
        if text:
            self._content.append(text)
            events.append(ContentEvent(text))


def _partial_suffix(text: str, triggers: tuple[str, ...], longest: int) -> int:
    """The length of the longest suffix of ``text`` that is a proper prefix of a trigger."""
    for k in range(min(longest - 1, len(text)), 0, -1):
        tail = text[-k:]
        if any(t.startswith(tail) for t in triggers):
            return k
    return 0


def _snippet(text: str, width: int = 40) -> str:
    return repr(text[:width] + ("..." if len(text) > width else ""))
