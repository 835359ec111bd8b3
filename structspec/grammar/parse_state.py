"""Parse states: immutable sets of persistent parse stacks over a shared :class:`RuleSet`.

A stack is a linked list of :class:`Frame` nodes, top first; each frame holds one automaton
state number and a pointer to the frame below it. Frames are never mutated, so stacks share
their tails: advancing creates new top frames only, and keeping an old state (for rollback,
for a draft) is keeping a reference -- O(1) whatever the grammar size, nesting depth or number
of stacks. A :class:`ParseState` is the deduplicated tuple of stacks whose top can consume
input (*heads*) plus whether the root rule can be complete here.

Stack counts stay small in practice because every rule is determinized and small rules are
inlined, so ambiguity inside a rule never multiplies stacks. Ambiguity across recursive rules
still can: past ``MAX_STACKS`` heads, advancing raises :class:`StackLimitError` rather than
slowing down without bound.
"""

from __future__ import annotations

from collections.abc import Iterable

from structspec.errors import GrammarError
from structspec.grammar.ruleset import NO_BYTE, SEVERAL_BYTES, RuleSet

MAX_STACKS = 10_000


class StackLimitError(GrammarError):
    """A parse state would hold more than ``MAX_STACKS`` stacks (a hugely ambiguous grammar)."""

    def __init__(self, count: int) -> None:
        super().__init__(
            "E110",
            f"the grammar is too ambiguous here: {count} parse stacks exceed the limit of {MAX_STACKS}",
        )


class Frame:
    """One node of a persistent stack: an automaton state and the frame below it.

    Frames are interned per rule set (see :func:`frame`): equal stacks are the same object,
    so comparing or hashing a stack is O(1) whatever its depth.
    """

    __slots__ = ("__weakref__", "depth", "parent", "state")

    def __init__(self, state: int, parent: Frame | None) -> None:
        self.state = state
        self.parent = parent
        self.depth = 1 if parent is None else parent.depth + 1

    def states(self) -> list[int]:
        """Automaton states from the top of the stack to the bottom."""
        out, current = [], self
        while current is not None:
            out.append(current.state)
            current = current.parent
        return out


def frame(rules: RuleSet, state: int, parent: Frame | None) -> Frame:
    """The unique frame for ``state`` on top of ``parent``.

    The intern table holds frames weakly; a live entry keeps its parent alive, so the
    parent's ``id`` in the key cannot be reused while the entry exists. (Two threads racing
    on the same key may each create a frame: that only costs deduplication, not correctness.)
    """
    key = (state, id(parent))
    found = rules.frames.get(key)
    if found is None:
        found = Frame(state, parent)
        rules.frames[key] = found
    return found


def close(rules: RuleSet, frames: Iterable[Frame]) -> tuple[tuple[Frame, ...], bool]:
    """Expand rule references and finished rules until every stack top can consume input.

    Returns the deduplicated heads and whether the root rule may be complete.
    """
    refs, final, movable, sink = rules.refs, rules.final, rules.movable, rules.sink
    seen: set[Frame] = set()
    heads: dict[Frame, None] = {}
    accepting = False
    todo = list(frames)
    while todo:
        top = todo.pop()
        if top in seen:
            continue
        seen.add(top)
        q = top.state
        if movable[q]:
            heads[top] = None
        for start, step in refs[q]:
            ret = q + step
            below = top.parent if sink[ret] else frame(rules, ret, top.parent)
            todo.append(frame(rules, start, below))
        if final[q]:
            if top.parent is None:
                accepting = True
            else:
                todo.append(top.parent)
    if len(heads) > MAX_STACKS:
        raise StackLimitError(len(heads))
    return tuple(heads), accepting


class ParseState:
    """An immutable point in a parse. Create with :meth:`structspec.Grammar.initial_state`."""

    __slots__ = ("_hash", "accepting", "heads", "rules")

    def __init__(self, rules: RuleSet, heads: tuple[Frame, ...], accepting: bool) -> None:
        self.rules = rules
        self.heads = heads
        self.accepting = accepting
        self._hash: int | None = None

    @classmethod
    def initial(cls, rules: RuleSet) -> ParseState:
        heads, accepting = close(rules, [frame(rules, rules.root_start, None)])
        return cls(rules, heads, accepting)

    def __len__(self) -> int:
        """The number of parse stacks (heads) this state holds."""
        return len(self.heads)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((frozenset(self.heads), self.accepting))
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ParseState)
            and self.rules is other.rules
            and self.accepting == other.accepting
            and (self.heads == other.heads or frozenset(self.heads) == frozenset(other.heads))
        )

    def __repr__(self) -> str:
        return f"<ParseState stacks={len(self.heads)} accepting={self.accepting}>"

    def is_accepting(self) -> bool:
        """Whether the input so far is a complete sentence of the grammar."""
        return self.accepting

    def is_dead_end(self) -> bool:
        """Whether nothing more can follow (accepting with no possible continuation)."""
        return not self.heads

    def advance(self, data: bytes | str) -> ParseState | None:
        """The state after ``data``, or None if the grammar rejects it."""
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")  # lone surrogates: invalid UTF-8, rejected
        state: ParseState | None = self
        i, n = 0, len(data)
        while state is not None and i < n:
            state, i = state._advance_run(data, i)
        return state

    def _advance_run(self, data: bytes, i: int) -> tuple[ParseState | None, int]:
        """Consume ``data[i]`` and, while a single stack stays inside plain states, more."""
        rules = self.rules
        moves = rules.byte_moves
        rows, row_of, class_of, no_move = moves.rows, moves.row_of, moves.class_of, moves.no_move
        b = data[i]
        if len(self.heads) == 1:
            head = self.heads[0]
            q = head.state
            step = rows[row_of[q], class_of[b]]
            if step == no_move:
                return None, i
            q += step
            i += 1
            plain = rules.plain
            n = len(data)
            while plain[q] and i < n:
                step = rows[row_of[q], class_of[data[i]]]
                if step == no_move:
                    return None, i
                q += step
                i += 1
            frames = [frame(rules, q, head.parent)]
        else:
            frames = []
            column = class_of[b]
            for head in self.heads:
                step = rows[row_of[head.state], column]
                if step != no_move:
                    frames.append(frame(rules, head.state + step, head.parent))
            if not frames:
                return None, i
            i += 1
        if len(frames) == 1 and rules.plain[frames[0].state]:
            return ParseState(rules, (frames[0],), False), i
        heads, accepting = close(rules, frames)
        if not heads and not accepting:
            return None, i
        return ParseState(rules, heads, accepting), i

    def advance_byte(self, b: int) -> ParseState | None:
        """The state after one byte, or None."""
        state, _ = self._advance_run(bytes((b,)), 0)
        return state

    def advance_token_ref(self, matches) -> ParseState | None:
        """Follow token-reference edges whose reference satisfies ``matches(token_ref_index)``."""
        frames = [
            frame(self.rules, target, head.parent)
            for head in self.heads
            for ref, target in self.rules.token_edges[head.state]
            if matches(ref)
        ]
        if not frames:
            return None
        heads, accepting = close(self.rules, frames)
        return ParseState(self.rules, heads, accepting)

    def allowed_bytes(self) -> frozenset[int]:
        """The bytes that may come next."""
        allowed: set[int] = set()
        for head in self.heads:
            allowed.update(self.rules.byte_moves.of(head.state))
        return frozenset(allowed)

    def forced_bytes(self, limit: int = 256) -> bytes:
        """The longest byte string (up to ``limit``) that every continuation must start with.

        Empty when the state accepts (stopping is a continuation too) or when a token
        reference may come next.
        """
        out = bytearray()
        state: ParseState | None = self
        while state is not None and len(out) < limit and not state.accepting:
            if any(state.rules.token_edges[h.state] for h in state.heads):
                break
            moves = state.rules.byte_moves
            only = {moves.only[moves.row_of[h.state]] for h in state.heads}
            only.discard(NO_BYTE)
            if len(only) != 1:
                break
            (b,) = only
            if b == SEVERAL_BYTES:
                break
            out.append(b)
            state = state.advance_byte(b)
        return bytes(out)


def union(a: ParseState | None, b: ParseState | None) -> ParseState | None:
    """The state reached by either of two alternatives from the same state."""
    if a is None:
        return b
    if b is None:
        return a
    heads, accepting = close(a.rules, [*a.heads, *b.heads])
    return ParseState(a.rules, heads, accepting or a.accepting or b.accepting)
