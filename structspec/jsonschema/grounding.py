"""Grounded strings: values that must spell a span of a source text (``"x-grounded": true``).

A grounded string value decodes to a contiguous span of the source text (the empty span
included). Its grammar is a rule given as a byte automaton: the source's suffix automaton
(:mod:`structspec.ir.suffix`), every character in its canonical JSON spelling
(:func:`~structspec.jsonschema.encoding.json_spelling`), narrowed exactly by the string's
``minLength``/``maxLength``, ``pattern``, ``format`` and exclusions (:mod:`structspec.ir.spans`).
The suffix automaton is built once per source text (and kept for the next few conversions);
strings with the same narrowing share one rule, so a schema's plain grounded fields all call
``source-span``. Characters JSON cannot spell (lone surrogates) end spans.

A conversion records what each grounded rule stands for (:attr:`GroundedStrings.spans`), and
whether anything else in it depended on the source (an ``enum`` narrowed to spans, a grounded
string with no span at all): where nothing did, its GBNF text is the same for every source, and
:func:`~structspec.jsonschema.convert.convert_schema` reuses it for the next text, building only
the grounded rules' automata.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from structspec.errors import SchemaError
from structspec.ir.automaton import TooComplexError
from structspec.ir.byte_automaton import ByteAutomaton
from structspec.ir.expr import MaybeExpr, Ref, seq
from structspec.ir.spans import SpanAutomaton, SpanLimitError, intersect, restrict_lengths, spans, spell
from structspec.ir.suffix import SuffixAutomaton
from structspec.jsonschema.encoding import QUOTE, json_spelling
from structspec.jsonschema.facets import Facet
from structspec.jsonschema.strings import StringHost, StringSpec, string_automaton
from structspec.lru import BoundedCache
from structspec.regex.parse import RegexError

KEYWORD = "x-grounded"
MAX_STATES = 200_000  # byte automaton states of one grounded rule (about 1.5 per source character)
MAX_SOURCE = MAX_STATES // 2  # characters: a suffix automaton has up to two states per character
_PLAIN = (0, None, (), (), (), (), ())  # the key of a string narrowed by nothing


@dataclass(frozen=True)
class Grounding:
    """The source text grounded strings come from. Strings marked ``"x-grounded": true`` are
    grounded in it; with ``every_string``, so is every string value without ``enum``,
    ``const``, ``format`` or ``pattern``."""

    source: str
    every_string: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.source, str):
            raise TypeError(f"the source text must be a str, got {type(self.source).__name__}")


class GroundedStrings:
    """The grounded rules of one conversion, one per distinct narrowing of the span language."""

    def __init__(self, grounding: Grounding | None) -> None:
        self.grounding = grounding
        self._rules: dict[tuple[Any, ...], Ref | None] = {}
        self.spans: dict[str, tuple[StringSpec, str]] = {}
        """Each grounded rule's name: the narrowing it was built for, and the schema pointer."""
        self.source_shaped = False
        """Whether the source decided more than the grounded rules' automata: an ``enum`` or
        ``const`` narrowed to spans, or a grounded string that no span satisfies."""

    def wanted(self, spec: StringSpec) -> bool:
        """Whether a string value with ``spec`` is grounded."""
        if spec.grounded is not None:
            return True
        every = self.grounding is not None and self.grounding.every_string
        return every and not spec.patterns and not spec.formats

    def string(self, host: StringHost, spec: StringSpec, name: str, pointer: str) -> MaybeExpr:
        """The quoted grounded string for ``spec`` (``pointer``: the string's schema node);
        ``None`` when no span qualifies."""
        source = self._source(spec.grounded or pointer)
        key = (spec.min_len, spec.max_len, tuple(spec.patterns), tuple(spec.formats), tuple(sorted(spec.excluded)),
               tuple(spec.negated), tuple(spec.negated_formats))
        if key not in self._rules:
            automaton = span_automaton(source, spec, pointer)
            if automaton is None:
                self._rules[key] = None
                self.source_shaped = True
            else:
                rule = host.fresh("source-span" if key == _PLAIN else f"{name}-span")
                self.spans[rule] = (spec, pointer)
                self._rules[key] = host.builder.give(rule, automaton)
        ref = self._rules[key]
        return None if ref is None else seq(QUOTE, ref, QUOTE)

    def keep_values(self, facets: Iterable[Facet], values: list[Any]) -> list[Any]:
        """Of an ``enum``/``const`` list, the values a grounded node still allows: strings only
        where they are spans of the source."""
        marked = next((f.pointer(KEYWORD) for f in facets if f.kw.get(KEYWORD) is True), None)
        if marked is None:
            return values
        source = self._source(marked)
        self.source_shaped = True
        return [v for v in values if not isinstance(v, str) or (v in source and _spellable(v))]

    def _source(self, pointer: str) -> str:
        if self.grounding is None:
            raise SchemaError(
                "'x-grounded' needs a source text to ground the string in (source= in Python, --source on the "
                "command line; an extraction request grounds in its text)", pointer, KEYWORD)
        return self.grounding.source


def _spellable(text: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _bytes(key: tuple[str, str], value: Any) -> int:
    """A source's entry: its text, plus the arrays of its span or byte automaton."""
    arrays = (value.start, value.code, value.dst, value.accept) if isinstance(value, SpanAutomaton) else (
        value.src, value.byte, value.dst, value.final)
    return 4 * len(key[1]) + sum(a.nbytes for a in arrays)


_SOURCES: BoundedCache[tuple[str, str], Any] = BoundedCache(max_entries=8, max_bytes=256 << 20, weigh=_bytes)


def _source_spans(source: str) -> SpanAutomaton:
    """Every span of ``source`` JSON can spell (kept for the next conversions of the same text)."""
    found = _SOURCES.get(("spans", source), None)
    if found is None:
        found = _SOURCES.put(("spans", source),
                             spans(SuffixAutomaton(source), lambda char: json_spelling(char) is not None))
    return found


def _plain_automaton(source: str) -> ByteAutomaton:
    found = _SOURCES.get(("plain", source), None)
    if found is None:
        automaton = spell(_source_spans(source), json_spelling, _describe(source, StringSpec()), MAX_STATES)
        found = _SOURCES.put(("plain", source), automaton)
    return found


def span_automaton(source: str, spec: StringSpec, pointer: str) -> ByteAutomaton | None:
    """The byte automaton of the spans of ``source`` that ``spec`` allows, ``None`` if none
    (``pointer``: the string's schema node, for errors)."""
    if len(source) > MAX_SOURCE:
        raise SchemaError(f"the source text has {len(source):,} characters; strings can be grounded in at most "
                          f"{MAX_SOURCE:,}", spec.grounded or pointer, KEYWORD)
    narrowing = dataclasses.replace(spec, min_len=0, max_len=None, grounded=None)
    try:
        if narrowing.free() and spec.min_len == 0 and spec.max_len is None:
            return _plain_automaton(source)
        found = _source_spans(source)
        if not narrowing.free():
            found = intersect(found, string_automaton(narrowing), MAX_STATES)
        if spec.min_len or spec.max_len is not None:
            found = restrict_lengths(found, spec.min_len, spec.max_len, MAX_STATES)
        if found.empty:
            return None
        return spell(found, json_spelling, _describe(source, spec), MAX_STATES)
    except (RegexError, TooComplexError) as exc:
        where = (spec.patterns + spec.formats + spec.negated + [(None, pointer)])[0][1]
        raise SchemaError(f"cannot ground this string in the source text: {exc}", where, "pattern") from None
    except SpanLimitError as exc:
        bounds = ", ".join(f"{k} {v}" for k, v in (("minLength", spec.min_len), ("maxLength", spec.max_len)) if v)
        also = f" with {bounds}" if bounds else ""
        raise SchemaError(
            f"grounding this string in a source text of {len(source):,} characters{also} needs {exc}; an exact "
            "length bound over long text needs about one state per character per allowed length: drop or raise "
            "maxLength, or ground in a shorter text", spec.grounded or pointer, KEYWORD) from None


def _describe(source: str, spec: StringSpec) -> str:
    parts = [f"a span of the source text ({len(source):,} characters), JSON-escaped"]
    if spec.min_len or spec.max_len is not None:
        high = "or more" if spec.max_len is None else f"to {spec.max_len}"
        parts.append(f"of {spec.min_len} {high} characters")
    parts += [f"matching pattern {p!r}" for p, _ in spec.patterns]
    parts += [f"of format {f!r}" for f, _ in spec.formats]
    if spec.excluded or spec.negated or spec.negated_formats:
        parts.append("less the excluded values")
    return ", ".join(parts)
