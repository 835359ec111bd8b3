"""The GBNF syntax tree: what the parser produces and the printer, linter and compiler read.

Nodes are frozen dataclasses; every node carries the 1-based ``line`` and ``column`` where
it starts so that later stages (undefined rules, left recursion, lint findings) can point at
the source. Literals and character classes hold Unicode code points: matching against UTF-8
bytes is the compiler's job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_CODE_POINT = 0x10FFFF


@dataclass(frozen=True)
class Node:
    line: int = field(default=0, compare=False, kw_only=True)
    column: int = field(default=0, compare=False, kw_only=True)


@dataclass(frozen=True)
class Literal(Node):
    """A literal string, e.g. ``"true"`` (the empty literal ``""`` matches the empty string)."""

    text: str


@dataclass(frozen=True)
class CharClass(Node):
    """One character from a set of inclusive code point ranges, e.g. ``[a-z_]`` or ``[^"\\\\]``."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def code_points(self) -> tuple[tuple[int, int], ...]:
        """The matched code points as sorted, merged ranges (negation applied)."""
        merged = merge_ranges(self.ranges)
        if not self.negated:
            return merged
        result, low = [], 0
        for start, end in merged:
            if start > low:
                result.append((low, start - 1))
            low = end + 1
        if low <= MAX_CODE_POINT:
            result.append((low, MAX_CODE_POINT))
        return tuple(result)


@dataclass(frozen=True)
class AnyChar(Node):
    """``.``: any single Unicode character."""


@dataclass(frozen=True)
class RuleRef(Node):
    """A reference to another rule by name."""

    name: str


@dataclass(frozen=True)
class TokenRef(Node):
    """``<[123]>``, ``<text>``, ``!<...>``: a whole vocabulary token, resolved with a tokenizer.

    ``token`` is an id (``<[123]>``) or the token's full text, brackets included (``<think>``,
    ``<|end|>``); ``negated`` matches any single token except that one.
    """

    token: int | str
    negated: bool = False


@dataclass(frozen=True)
class Sequence(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Choice(Node):
    alternatives: tuple[Node, ...]


@dataclass(frozen=True)
class Repeat(Node):
    """``item{min,max}``; ``max`` is None when unbounded (``*``, ``+``, ``{m,}``)."""

    item: Node
    min: int
    max: int | None


@dataclass(frozen=True)
class Rule(Node):
    name: str
    body: Node


def merge_ranges(ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort inclusive ranges and merge overlapping or adjacent ones."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return tuple(merged)


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of a node."""
    if isinstance(node, Sequence):
        return node.items
    if isinstance(node, Choice):
        return node.alternatives
    if isinstance(node, Repeat):
        return (node.item,)
    return ()


def walk(node: Node):
    """Yield a node and all of its sub-expressions, depth first."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))
