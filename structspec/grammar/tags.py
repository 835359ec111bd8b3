"""Structural tags: free text with tagged, constrained segments, compiled to one grammar.

A :class:`StructuralTag` describes output such as ``Let me check. <tool_call>{...}</tool_call>``:
text runs free until a *trigger* (``<tool_call>``) appears; from there one of the tags whose
``begin`` starts with that trigger must follow, then its content (a JSON Schema, a Pydantic
model, GBNF or a regex), then its ``end``; after that the text is free again. Options bound the
number of segments and say whether text may appear outside them at all.

The whole thing is one ordinary grammar (:attr:`StructuralTag.grammar`), so it goes wherever a
grammar goes. Free text is an Aho-Corasick automaton over the triggers, written as right-linear
rules whose every call is a tail call: a parse state in free text is one stack frame, the same
frame at every position that holds no partial trigger, so its token mask is computed once and
then read from the mask cache (one cached row, as for unconstrained text). Completing a trigger
leads into the segment, whose fixed parts (the rest of ``begin``, JSON keys, ``end``) are bytes
the grammar forces, and so tokens the speculative drafter proposes for free.

Reading text back: :meth:`StructuralTag.parse`, and :mod:`structspec.grammar.tag_reading` for
streams.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from structspec.errors import GrammarError, SchemaError
from structspec.grammar.content import Constraint, to_constraint
from structspec.grammar.grammar import Grammar
from structspec.grammar.tag_reading import TaggedText, parse_tagged
from structspec.ir.automaton import emit_graph
from structspec.ir.charset import ANY, CharSet
from structspec.ir.expr import Alt, Expr, Lit, MaybeExpr, Ref, Rep, Rule, Seq, alt, chars, rep, seq
from structspec.ir.printer import format_rule, format_rules

MAX_COUNTED_SEGMENTS = 64
"""Largest ``min_segments`` / ``max_segments`` (each count below it is a copy of the free-text rules)."""


class TagError(ValueError):
    """A structural tag that cannot be built, naming the field at fault (``tags[1].begin``)."""


@dataclass(frozen=True, eq=False)
class Tag:
    """One kind of segment: ``begin``, then text following ``content``, then ``end``.

    ``content`` is anything a constraint may be: a :class:`~structspec.Grammar` (also
    ``Grammar.from_regex(...)``), GBNF text, a JSON Schema dict, or a Pydantic model class (or
    any type pydantic validates).
    """

    begin: str
    content: Any
    end: str

    @property
    def content_grammar(self) -> Grammar:
        """The grammar of the content."""
        return self._reader.grammar

    def value_of(self, content: str) -> Any:
        """The value of a segment's content: the JSON value for a JSON Schema, the validated
        model for a Pydantic type, ``None`` for a grammar."""
        return self._reader.value(content)

    @cached_property
    def _reader(self) -> Constraint:
        return to_constraint(self.content, what="a tag's content")


@dataclass(frozen=True, eq=False)
class StructuralTag:
    """Free text with tagged segments; see the module docstring and docs/structural-tags.md.

    Args:
        tags: the kinds of segment.
        triggers: where segments may start (``free_text`` only): free text never contains a
            trigger, and each trigger must be followed by the rest of the ``begin`` of a tag that
            starts with it. Default: the tags' ``begin`` strings. No trigger may contain another.
        min_segments, max_segments: how many segments the text holds (``None``: no upper bound).
        free_text: whether text may appear outside segments; without it the output is only
            segments, ``separator`` between them.
        separator: text between two segments when ``free_text`` is false.

    ``dispatch`` (computed) maps each trigger to the indices of the tags whose begin starts with it.
    """

    tags: tuple[Tag, ...]
    triggers: tuple[str, ...] = ()
    min_segments: int = 0
    max_segments: int | None = None
    free_text: bool = True
    separator: str = ""
    dispatch: dict[str, tuple[int, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("tags", "triggers"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise TagError(f"{name}: a list is required, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "dispatch", _checked(self))

    @classmethod
    def from_dict(cls, spec: Any) -> StructuralTag:
        """A structural tag from its JSON form (the CLI's ``--tags`` file)::

            {"tags": [{"begin": "<a>", "schema": {...}, "end": "</a>"},
                      {"begin": "<b>", "regex": "[0-9]+", "end": "</b>"},
                      {"begin": "<c>", "gbnf": "root ::= ...", "end": "</c>"}],
             "triggers": ["<a>", "<b>", "<c>"], "min_segments": 0, "max_segments": null,
             "free_text": true, "separator": ""}
        """
        if not isinstance(spec, dict):
            raise TagError(f"a structural tag is a JSON object, got {type(spec).__name__}")
        unknown = sorted(set(spec) - {"tags", "triggers", "min_segments", "max_segments", "free_text", "separator"})
        if unknown:
            raise TagError(f"unknown field {unknown[0]!r}")
        tags = spec.get("tags")
        if not isinstance(tags, list):
            raise TagError("tags: a list of {begin, schema | gbnf | regex, end} objects is required")
        options = {key: spec[key] for key in ("triggers", "min_segments", "max_segments", "free_text", "separator")
                   if key in spec}
        return cls(tuple(_tag_from_dict(item, f"tags[{i}]") for i, item in enumerate(tags)), **options)

    @cached_property
    def grammar(self) -> Grammar:
        """The grammar of every text this structural tag allows (built once)."""
        rules: list[str] = []
        contents = []
        for i, tag in enumerate(self.tags):
            grammar = tag.content_grammar
            prefix = f"tag{i}-"
            rules.append(format_rules(_renamed(grammar.rules.values(), prefix)))
            contents.append(Ref(prefix + grammar.root))
        if self.free_text:
            rules.insert(0, self._free_text_rules(contents))
        else:
            rules.insert(0, format_rule("root", self._segments_only(contents)) + "\n")
        return Grammar.from_gbnf("".join(rules))

    def parse(self, text: str) -> TaggedText:
        """``text`` as free text and segments. Raises ``ValueError`` when the grammar does not
        allow it (where it first goes wrong)."""
        return parse_tagged(self, text)

    # -- the grammar -------------------------------------------------------------------------

    def _segment(self, i: int, contents: list[Ref], skip: int) -> MaybeExpr:
        tag = self.tags[i]
        return seq(Lit(tag.begin[skip:]), contents[i], Lit(tag.end))

    def _segments_only(self, contents: list[Ref]) -> Expr:
        one = alt(*(self._segment(i, contents, 0) for i in range(len(self.tags))))
        low, high = self.min_segments, self.max_segments
        if high == 0:
            return Lit("")
        more = rep(seq(Lit(self.separator), one), max(low - 1, 0), None if high is None else high - 1)
        some = seq(one, more)
        return some if low else alt(Lit(""), some)

    def _free_text_rules(self, contents: list[Ref]) -> str:
        """Right-linear rules over nodes (automaton state, segments so far); completing a
        trigger is an edge labelled with the rest of a tag's begin, its content and its end."""
        machine = _TriggerMachine(self.triggers)
        low, high = self.min_segments, self.max_segments
        counts = range((low if high is None else high) + 1)
        edges: dict[Any, list[tuple[MaybeExpr, Any]]] = {}
        for count in counts:
            full = high is not None and count == high
            following = min(count + 1, counts[-1])
            for state in range(machine.size):
                out: list[tuple[MaybeExpr, Any]] = []
                for charset, target in machine.moves(state):
                    if target >= 0:
                        out.append((chars(charset), (target, count)))
                    elif not full:
                        trigger = machine.triggers[-target - 1]
                        skip = len(trigger)
                        branches = alt(*(self._segment(i, contents, skip) for i in self.dispatch[trigger]))
                        out.append((seq(chars(charset), branches), (0, following)))
                edges[(state, count)] = out
        accept = {(state, count) for state in range(machine.size) for count in counts if count >= low}
        sink = _Rules()
        emit_graph(edges, accept, (0, 0), sink, "text", preset={(0, 0): "root"})
        return "".join(format_rule(name, expr) + "\n" for name, expr in sink.rules)


class _TriggerMachine:
    """The Aho-Corasick automaton of the triggers over characters: state ``s`` is the longest
    suffix of the text that is a proper prefix of some trigger; a move that completes trigger
    ``j`` leads to ``-(j + 1)``."""

    def __init__(self, triggers: tuple[str, ...]) -> None:
        self.triggers = triggers
        prefixes = sorted({t[:k] for t in triggers for k in range(len(t))}, key=lambda p: (len(p), p))
        self.prefixes = prefixes
        self.index = {p: i for i, p in enumerate(prefixes)}
        self.size = len(prefixes)
        self._alphabet = sorted({c for t in triggers for c in t})

    def target(self, text: str) -> int:
        """The state after ``text`` (from the empty state), or the completed trigger's code."""
        for trigger_index, trigger in enumerate(self.triggers):
            if text.endswith(trigger):
                return -(trigger_index + 1)
        for start in range(len(text) + 1):
            found = self.index.get(text[start:])
            if found is not None:
                return found
        return 0

    def moves(self, state: int) -> Iterator[tuple[CharSet, int]]:
        """``(characters, target)`` pairs out of ``state``, covering every character."""
        here = self.prefixes[state]
        grouped: dict[int, CharSet] = {}
        for c in self._alphabet:
            target = self.target(here + c)
            grouped[target] = grouped.get(target, CharSet()) | CharSet.chars(c)
        rest = ANY - CharSet.chars("".join(self._alphabet))
        grouped[0] = grouped.get(0, CharSet()) | rest
        for target, charset in grouped.items():
            if charset:
                yield charset, target


class _Rules:
    """A rule sink for :func:`emit_graph`: names are ``text-N``, ``root`` preset."""

    def __init__(self) -> None:
        self.rules: list[tuple[str, Expr]] = []
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"text-{self._count}"

    def define(self, name: str, expr: Expr) -> None:
        self.rules.append((name, expr))
        self.rules.sort(key=lambda item: item[0] != "root")


def _renamed(rules: Iterable[Rule], prefix: str) -> list[Rule]:
    """The rules with every rule name (definitions and references) prefixed."""

    def node(n: Expr) -> Expr:
        if isinstance(n, Ref):
            return replace(n, name=prefix + n.name)
        if isinstance(n, (Seq, Alt)):
            return replace(n, items=tuple(node(item) for item in n.items))
        if isinstance(n, Rep):
            return replace(n, item=node(n.item))
        return n

    return [Rule(prefix + rule.name, node(rule.body), line=rule.line, column=rule.column) for rule in rules]


def _tag_from_dict(item: Any, where: str) -> Tag:
    if not isinstance(item, dict):
        raise TagError(f"{where}: a tag is an object with begin, end and one of schema, gbnf, regex")
    unknown = sorted(set(item) - {"begin", "end", "schema", "gbnf", "regex"})
    if unknown:
        raise TagError(f"{where}: unknown field {unknown[0]!r}")
    kinds = [key for key in ("schema", "gbnf", "regex") if key in item]
    if len(kinds) != 1:
        raise TagError(f"{where}: give exactly one of schema, gbnf, regex (got {kinds or 'none'})")
    for key in ("begin", "end"):
        if not isinstance(item.get(key), str):
            raise TagError(f"{where}.{key}: a string is required")
    kind = kinds[0]
    value = item[kind]
    if kind == "schema":
        content: Any = value
    elif not isinstance(value, str):
        raise TagError(f"{where}.{kind}: a string is required")
    elif kind == "gbnf":
        content = value
    else:
        try:
            content = Grammar.from_regex(value)
        except ValueError as exc:
            raise TagError(f"{where}.regex: {exc}") from None
    return Tag(item["begin"], content, item["end"])


# -- checks --------------------------------------------------------------------------------------


def _checked(spec: StructuralTag) -> dict[str, tuple[int, ...]]:
    """Check ``spec``; returns, per trigger, the tags whose begin starts with it."""
    if not spec.tags:
        raise TagError("tags: at least one tag is required")
    for i, tag in enumerate(spec.tags):
        if not isinstance(tag, Tag):
            raise TagError(f"tags[{i}]: a Tag is required, got {tag!r}")
        for key in ("begin", "end"):
            if not isinstance(getattr(tag, key), str):
                raise TagError(f"tags[{i}].{key}: a string is required")
        try:
            tag._reader  # noqa: B018 - converts the content now, so that errors name the tag
        except GrammarError as exc:
            raise GrammarError(exc.code, f"tags[{i}].content: {exc.message}", exc.line, exc.column,
                               exc.source_line) from None
        except SchemaError as exc:
            raise SchemaError(f"tags[{i}].content: {exc.message}", exc.pointer, exc.keyword, exc.code) from None
        except TypeError as exc:
            raise TypeError(f"tags[{i}].content: {exc}") from None
    for i, a in enumerate(spec.tags):
        for j, b in enumerate(spec.tags):
            if i != j and b.begin.startswith(a.begin) and (i < j or a.begin != b.begin):
                raise TagError(f"tags[{j}].begin {b.begin!r} starts with tags[{i}].begin {a.begin!r}: "
                               "a text could not tell them apart")
    low, high = spec.min_segments, spec.max_segments
    if not isinstance(low, int) or low < 0 or low > MAX_COUNTED_SEGMENTS:
        raise TagError(f"min_segments: an integer in 0..{MAX_COUNTED_SEGMENTS} is required, got {low!r}")
    if high is not None and (not isinstance(high, int) or not low <= high <= MAX_COUNTED_SEGMENTS):
        raise TagError(f"max_segments: null or an integer in {low}..{MAX_COUNTED_SEGMENTS} is required, got {high!r}")
    if not spec.free_text:
        if spec.triggers:
            raise TagError("triggers: only text outside segments has triggers (free_text is false)")
        return {}
    if spec.separator:
        raise TagError("separator: only segments without free text between them have one (free_text is true)")
    triggers = spec.triggers or tuple(dict.fromkeys(tag.begin for tag in spec.tags))
    object.__setattr__(spec, "triggers", triggers)
    for k, trigger in enumerate(triggers):
        if not isinstance(trigger, str) or not trigger:
            raise TagError(f"triggers[{k}]: a non-empty string is required")
        for m, other in enumerate(triggers):
            if m != k and trigger in other:
                raise TagError(f"triggers[{m}] {other!r} contains triggers[{k}] {trigger!r}: a trigger may not "
                               "contain another")
    dispatch = {t: tuple(i for i, tag in enumerate(spec.tags) if tag.begin.startswith(t)) for t in triggers}
    for i, tag in enumerate(spec.tags):
        if not any(i in tags for tags in dispatch.values()):
            raise TagError(f"tags[{i}].begin {tag.begin!r} starts with no trigger, so it could never appear")
    for k, trigger in enumerate(triggers):
        if not dispatch[trigger]:
            raise TagError(f"triggers[{k}] {trigger!r} starts no tag's begin")
    return dispatch


# -- reading -------------------------------------------------------------------------------------


