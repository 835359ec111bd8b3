"""The one expression tree: what the GBNF parser yields and what every converter builds.

Nodes are frozen dataclasses compared by content. A node parsed from GBNF text also carries the
1-based ``line`` and ``column`` where it starts, so that analysis and lint findings can point at
the source; nodes built by a converter leave them at 0. Positions never take part in equality,
so a rule body parsed from text and the same body built in code are the same key.

The converters build with the smart constructors below (:func:`seq`, :func:`alt`, :func:`rep`,
:func:`chars`), which simplify as they go; ``None`` stands for the empty language ("matches
nothing"): the constructors propagate it, so a branch that can never match disappears instead
of producing an invalid or useless rule. Text is printed by :mod:`structspec.ir.printer`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from structspec.ir.charset import MAX_CODE_POINT, CharSet, merge_ranges


@dataclass(frozen=True)
class Expr:
    """Base class of expression nodes."""

    line: int = field(default=0, compare=False, repr=False, kw_only=True)
    column: int = field(default=0, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class Lit(Expr):
    """A literal string (``""`` is the empty string)."""

    text: str


@dataclass(frozen=True)
class Chars(Expr):
    """One character from a set: what the converters build, and GBNF's ``.`` (``ANY``)."""

    charset: CharSet


@dataclass(frozen=True)
class CharClass(Expr):
    """A character class as written in GBNF, e.g. ``[a-z_]`` or ``[^"\\]``: the ranges in source
    order (overlaps kept, for the linter) and whether it is negated, so it prints back as written."""

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
class Ref(Expr):
    """A reference to a named rule."""

    name: str


@dataclass(frozen=True)
class TokenRef(Expr):
    """``<[123]>``, ``<text>``, ``!<...>`` in GBNF: a whole vocabulary token, resolved with a tokenizer.

    ``token`` is an id (``<[123]>``) or the token's full text, brackets included (``<think>``,
    ``<|end|>``); ``negated`` matches any single token except that one.
    """

    token: int | str
    negated: bool = False


@dataclass(frozen=True)
class Seq(Expr):
    """Concatenation; GBNF's empty alternative is the empty sequence."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Alt(Expr):
    """Alternation."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Rep(Expr):
    """``item{low,high}``; ``high`` is None when unbounded (``*``, ``+``, ``{m,}``)."""

    item: Expr
    low: int
    high: int | None


@dataclass(frozen=True)
class Anchor(Expr):
    """``^`` (``start=True``) or ``$`` in a regex: an assertion matching no character."""

    start: bool


def _cache_hash(cls: type) -> None:
    """Make the generated ``__hash__`` of a node that holds sub-expressions remember its value:
    a tree's hash hashes every node below it, so hashing nested trees again and again (the
    smart constructors keep branches in dicts) would cost the whole tree each time. The value is
    the same one; it is left out of the pickled state (string hashes differ between processes)."""
    compute = cls.__hash__

    def __hash__(self: Expr) -> int:
        state = self.__dict__
        value = state.get("_hash")
        if value is None:
            value = state["_hash"] = compute(self)
        return value

    def __getstate__(self: Expr) -> dict:
        return {name: value for name, value in self.__dict__.items() if name != "_hash"}

    cls.__hash__ = __hash__  # type: ignore[method-assign]
    cls.__getstate__ = __getstate__  # type: ignore[attr-defined]


for _node in (Seq, Alt, Rep):
    _cache_hash(_node)


@dataclass(frozen=True)
class Rule:
    """A GBNF rule definition ``name ::= body``; ``line``/``column`` locate its name."""

    name: str
    body: Expr
    line: int = field(default=0, compare=False, kw_only=True)
    column: int = field(default=0, compare=False, kw_only=True)

    @property
    def refs(self) -> tuple[Ref, ...]:
        """The rule references in the body, depth first."""
        return self._parts[0]

    @property
    def reps(self) -> tuple[Rep, ...]:
        """The repetitions in the body, depth first."""
        return self._parts[1]

    @property
    def size(self) -> int:
        """The nodes in the body (a bound on its :func:`height`)."""
        return self._parts[2]

    @cached_property
    def _parts(self) -> tuple[tuple[Ref, ...], tuple[Rep, ...], int]:
        # One walk, kept: the analyses and the compiler each read the references. (The walk of
        # :func:`walk`, sorting the nodes as it goes rather than listing them all first.)
        refs: list[Ref] = []
        reps: list[Rep] = []
        size = 0
        stack = [self.body]
        while stack:
            node = stack.pop()
            size += 1
            kind = type(node)
            if kind is Seq or kind is Alt:
                stack += node.items[::-1]  # type: ignore[attr-defined]
            elif kind is Rep:
                reps.append(node)  # type: ignore[arg-type]
                stack.append(node.item)  # type: ignore[attr-defined]
            elif kind is Ref:
                refs.append(node)  # type: ignore[arg-type]
        return tuple(refs), tuple(reps), size


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of a node."""
    if isinstance(expr, (Seq, Alt)):
        return expr.items
    if isinstance(expr, Rep):
        return (expr.item,)
    return ()


def walk(expr: Expr) -> list[Expr]:
    """A node and all of its sub-expressions, depth first (a list: rule analysis walks every
    rule of a grammar several times, and a generator costs a frame switch per node)."""
    out = []
    stack = [expr]
    while stack:
        current = stack.pop()
        out.append(current)
        kind = type(current)
        if kind is Seq or kind is Alt:
            stack += current.items[::-1]  # type: ignore[attr-defined]
        elif kind is Rep:
            stack.append(current.item)  # type: ignore[attr-defined]
    return out


def height(expr: Expr) -> int:
    """How deep sequences, alternatives and repetitions nest in ``expr`` (a leaf is 0), as the
    GBNF parser counts it for its nesting limit: the levels of the tree that hold such a node
    (one pass per level, without a depth kept per node)."""
    deepest = 0
    level = [expr]
    while True:
        below: list[Expr] = []
        nested = False
        for node in level:
            kind = type(node)
            if kind is Seq or kind is Alt:
                below += node.items  # type: ignore[attr-defined]
                nested = True
            elif kind is Rep:
                below.append(node.item)  # type: ignore[attr-defined]
                nested = True
        if not nested:
            return deepest
        deepest += 1
        level = below


EMPTY = Lit("")
MaybeExpr = Expr | None


def chars(charset: CharSet) -> MaybeExpr:
    """One character of ``charset``; ``None`` when the set is empty."""
    if not charset:
        return None
    single = charset.single_char()
    return Lit(single) if single is not None else Chars(charset)


def seq(*items: MaybeExpr) -> MaybeExpr:
    """Concatenation; ``None`` when any part is ``None``. Adjacent literals are merged."""
    out: list[Expr] = []
    text: list[str] = []  # adjacent literals, joined once (not copied again at each one)
    for item in items:
        if item is None:
            return None
        kind = type(item)
        if kind is Lit:
            text.append(item.text)  # type: ignore[attr-defined]
            continue
        for part in item.items if kind is Seq else (item,):  # type: ignore[attr-defined]
            if type(part) is Lit:
                text.append(part.text)  # type: ignore[attr-defined]
                continue
            if text:
                joined = "".join(text)
                if joined:
                    out.append(Lit(joined))
                text = []
            out.append(part)
    if text:
        joined = "".join(text)
        if joined:
            out.append(Lit(joined))
    if not out:
        return EMPTY
    return out[0] if len(out) == 1 else Seq(tuple(out))


def _char_ranges(item: Expr) -> tuple[tuple[int, int], ...] | None:
    """The characters of a class or a one-character literal, as ranges; ``None`` for others."""
    kind = type(item)
    if kind is Chars:
        return item.charset.ranges  # type: ignore[attr-defined]
    if kind is Lit and len(item.text) == 1:  # type: ignore[attr-defined]
        return CharSet.chars(item.text).ranges  # type: ignore[attr-defined]
    return None


def alt(*items: MaybeExpr) -> MaybeExpr:
    """Alternation; ``None`` branches are dropped, single characters are merged into classes."""
    flat: dict[Expr, None] = {}  # insertion-ordered set: linear in the number of branches
    for item in items:
        if item is None:
            continue
        if type(item) is Alt:
            for part in item.items:  # type: ignore[attr-defined]
                flat[part] = None
        else:
            flat[item] = None
    merged: list[Expr] = []
    ranges: list[tuple[int, int]] = []
    position = -1
    empty = False
    for part in flat:
        members = _char_ranges(part)
        if members is None:
            merged.append(part)
            empty = empty or (type(part) is Lit and not part.text)  # type: ignore[attr-defined]
            continue
        if position < 0:
            position = len(merged)
            merged.append(part)
        ranges += members
    if position >= 0:
        merged[position] = chars(CharSet.of(ranges))  # type: ignore[assignment]
    if not merged:
        return None
    if empty and len(merged) > 1:
        rest = [m for m in merged if m != EMPTY]
        body = rest[0] if len(rest) == 1 else Alt(tuple(rest))
        if isinstance(body, Rep) and body.low == 0:
            return body
        return Rep(body, 0, 1)
    return merged[0] if len(merged) == 1 else Alt(tuple(merged))


def rep(item: MaybeExpr, low: int, high: int | None) -> MaybeExpr:
    """``item{low,high}`` (``high=None``: unbounded)."""
    if high is not None and high < low:
        return None
    if item is None:
        return EMPTY if low == 0 else None
    if high == 0 or item == EMPTY:
        return EMPTY
    if low == high == 1:
        return item
    if isinstance(item, Lit) and low == high and len(item.text) * low <= 40:
        return Lit(item.text * low)
    return Rep(item, low, high)


def opt(item: MaybeExpr) -> MaybeExpr:
    return rep(item, 0, 1)


# -- analysis and rewriting --------------------------------------------------------------------


def map_chars(expr: MaybeExpr, encode: Callable[[CharSet], MaybeExpr]) -> MaybeExpr:
    """Replace every character (literal or class) by ``encode(charset)``."""

    def leaf(node: Expr) -> MaybeExpr:
        if isinstance(node, Lit):
            return seq(*(encode(CharSet.chars(c)) for c in node.text))
        if isinstance(node, Chars):
            return encode(node.charset)
        return node

    return _rebuild(expr, leaf)


def substitute(expr: MaybeExpr, replace: Callable[[Ref], MaybeExpr]) -> MaybeExpr:
    """Rebuild ``expr`` with every rule reference replaced by ``replace(ref)``."""
    return _rebuild(expr, lambda node: replace(node) if isinstance(node, Ref) else node)


def _rebuild(expr: MaybeExpr, leaf: Callable[[Expr], MaybeExpr]) -> MaybeExpr:
    """``expr`` with its sequences, alternations and repetitions rebuilt (simplifying) around
    ``leaf(node)`` for every other node."""
    if expr is None:
        return None
    if isinstance(expr, Seq):
        return seq(*(_rebuild(item, leaf) for item in expr.items))
    if isinstance(expr, Alt):
        return alt(*(_rebuild(item, leaf) for item in expr.items))
    if isinstance(expr, Rep):
        return rep(_rebuild(expr.item, leaf), expr.low, expr.high)
    return leaf(expr)


def derives(expr: Expr, rules: set[str], leaf: Callable[[Expr], bool]) -> bool:
    """Whether ``expr`` derives a string of some kind, given the ``rules`` that do and what
    ``leaf`` says of every node that is not a reference or a combination of others."""
    # Loops, not all()/any() over a generator, and node types compared by identity (no node
    # type is subclassed): the fixpoints call this per node.
    kind = type(expr)
    if kind is Ref:
        return expr.name in rules  # type: ignore[attr-defined]
    if kind is Seq:
        for item in expr.items:  # type: ignore[attr-defined]  # noqa: SIM110
            if not derives(item, rules, leaf):
                return False
        return True
    if kind is Alt:
        for item in expr.items:  # type: ignore[attr-defined]  # noqa: SIM110
            if derives(item, rules, leaf):
                return True
        return False
    if kind is Rep:
        return expr.low == 0 or derives(expr.item, rules, leaf)  # type: ignore[attr-defined]
    return leaf(expr)


def productive(expr: Expr, rules: set[str]) -> bool:
    """Whether ``expr`` derives at least one string (has a finite derivation), given the
    ``rules`` that do."""
    return derives(expr, rules, _has_string)


def _has_string(leaf: Expr) -> bool:
    return bool(leaf.code_points()) if isinstance(leaf, CharClass) else True


def length_range(expr: Expr) -> tuple[int, int | None]:
    """Fewest and most characters ``expr`` can match (``None``: unbounded); no rule refs."""
    if isinstance(expr, Lit):
        return len(expr.text), len(expr.text)
    if isinstance(expr, Chars):
        return 1, 1
    if isinstance(expr, Seq):
        low, high = 0, 0
        for item in expr.items:
            a, b = length_range(item)
            low += a
            high = None if high is None or b is None else high + b
        return low, high
    if isinstance(expr, Alt):
        ranges = [length_range(item) for item in expr.items]
        highs = [b for _, b in ranges]
        return min(a for a, _ in ranges), None if None in highs else max(highs)  # type: ignore[type-var]
    if isinstance(expr, Rep):
        a, b = length_range(expr.item)
        high = None if expr.high is None or b is None else b * expr.high
        if expr.high is None and b == 0:
            high = 0
        return a * expr.low, high
    return 0, 0  # assertions match no character
