"""String values: length, ``pattern``, ``format`` and exclusions as one regular language.

The common cases stay readable expressions (a free string, one pattern, one pattern whose
only variable part absorbs the length bounds); anything needing intersection, complement or
counting goes through a DFA and comes out as right-linear rules. Characters are spelled as
described in :mod:`structspec.jsonschema.encoding`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from structspec.errors import SCHEMA_INVALID, SchemaError
from structspec.ir.automaton import (
    DFA,
    RuleSink,
    TooComplexError,
    dfa_from_strings,
    dfa_length,
    difference,
    emit_graph,
    intersect,
    length_bounds,
)
from structspec.ir.charset import ANY, CharSet
from structspec.ir.expr import (
    EMPTY,
    Alt,
    Expr,
    Lit,
    MaybeExpr,
    Ref,
    Rep,
    Seq,
    alt,
    chars,
    length_range,
    map_chars,
    rep,
    seq,
)
from structspec.jsonschema.builder import GrammarBuilder, counted
from structspec.jsonschema.encoding import (
    CONTROLS,
    NON_ASCII,
    PLAIN_ASCII,
    QUOTE,
    canonical_char,
)
from structspec.jsonschema.facets import Facet
from structspec.jsonschema.formats import UNSUPPORTED, format_regex
from structspec.regex.convert import PatternLanguage, pattern_language, single_repeat
from structspec.regex.parse import RegexError


@dataclass
class StringSpec:
    """Everything constraining one string (value or property name)."""

    min_len: int = 0
    max_len: int | None = None
    patterns: list[tuple[str, str]] = field(default_factory=list)  # (regex, pointer)
    formats: list[tuple[str, str]] = field(default_factory=list)  # (name, pointer)
    excluded: set[str] = field(default_factory=set)
    negated: list[tuple[str, str]] = field(default_factory=list)  # (regex, pointer)
    negated_formats: list[tuple[str, str]] = field(default_factory=list)  # (name, pointer)
    grounded: str | None = None  # pointer of an ``x-grounded: true`` (docs/grounded.md)

    def free(self) -> bool:
        return not (self.patterns or self.formats or self.excluded or self.negated or self.negated_formats)


class StringHost(RuleSink, Protocol):
    """What the string emitter needs from the converter."""

    builder: GrammarBuilder

    def relax(self, pointer: str, keyword: str, message: str) -> None: ...

    def char_rule(self) -> Ref: ...


def spec_from_facets(facets: list[Facet], relax: Callable[[str, str, str], None]) -> StringSpec:
    spec = StringSpec()
    for f in facets:
        kw = f.kw
        low = f.count("minLength", lower=True)
        if low is not None:
            spec.min_len = max(spec.min_len, low)
        high = f.count("maxLength", lower=False)
        if high is not None:
            spec.max_len = high if spec.max_len is None else min(spec.max_len, high)
        if isinstance(kw.get("pattern"), str):
            spec.patterns.append((kw["pattern"], f.pointer("pattern")))
        name = kw.get("format")
        if isinstance(name, str):
            if format_regex(name) is not None:
                spec.formats.append((name, f.pointer("format")))
            elif name in UNSUPPORTED:
                relax(f.pointer("format"), "format", f"format {name!r} is not supported")
        spec.excluded |= {v for v in kw.get("~not-enum", ()) if isinstance(v, str)}
        spec.negated += [(p, f.pointer("pattern")) for p in kw.get("~not-pattern", ())]
        spec.negated_formats += [(n, f.pointer("format")) for n in kw.get("~not-format", ())]
        if "x-grounded" in kw:
            if not isinstance(kw["x-grounded"], bool):
                raise SchemaError("'x-grounded' must be true or false", f.pointer("x-grounded"), "x-grounded",
                                  code=SCHEMA_INVALID)
            if kw["x-grounded"] and spec.grounded is None:
                spec.grounded = f.pointer("x-grounded")
    return spec


_ESCAPED = CONTROLS | CharSet.chars('"\\')


def encoder(host: StringHost) -> Callable[[CharSet], MaybeExpr]:
    """Canonical spelling per character set, with shared rules for "any character" and for
    "any canonical escape" (so big classes stay short)."""

    def encode(charset: CharSet) -> MaybeExpr:
        if charset == ANY:
            return host.char_rule()
        if (charset & _ESCAPED) == _ESCAPED:
            return alt(chars(charset - _ESCAPED), _canonical_escape(host))
        return canonical_char(charset)

    return encode


def string_expr(host: StringHost, spec: StringSpec, name: str) -> MaybeExpr:
    """The quoted string grammar for ``spec``; ``None`` when no string qualifies."""
    content = string_content(host, spec, name)
    return None if content is None else seq(QUOTE, content, QUOTE)


_WIDE = NON_ASCII | _ESCAPED
_FINAL = ("final",)


def emit_json_dfa(host: StringHost, dfa: DFA, base: str) -> MaybeExpr:
    """A DFA over decoded characters as GBNF over JSON spellings.

    Characters are spelled canonically (see :mod:`.encoding`). Edges whose set holds every
    non-ASCII character and every character JSON must escape (typically "anything but these
    few") are split: their ASCII part stays on the edge, the rest goes through one shared rule
    per target state, ``(non-ASCII | escape) target``. Such targets are rules, so the multi-byte
    UTF-8 part is compiled once per target instead of once per edge (a big saving for name
    exclusions, whose "any other character" edges all lead to the same state)."""
    if dfa.empty:
        return None
    encode = encoder(host)
    flagged = [[((cs & _WIDE) == _WIDE, cs, t) for cs, t in out] for out in dfa.edges]  # each set tested once
    wide_targets = sorted({t for out in flagged for wide, _, t in out if wide})
    names = {t: host.fresh(f"{base}-{i + 1}") for i, t in enumerate(wide_targets)}
    tails: dict[int, Ref] = {}
    edges: dict[object, list[tuple[MaybeExpr, object]]] = {_FINAL: []}
    for q, out in enumerate(flagged):
        labels: list[tuple[MaybeExpr, object]] = []
        for wide, cs, t in out:
            if not wide:
                labels.append((encode(cs), t))
                continue
            labels.append((canonical_char(cs & PLAIN_ASCII), t))
            if t not in tails:
                tail = host.fresh(f"{names[t]}-more")
                more = alt(chars(NON_ASCII), _canonical_escape(host))
                host.define(tail, seq(more, Ref(names[t])) or EMPTY)
                tails[t] = Ref(tail)
            labels.append((tails[t], _FINAL))
        edges[q] = labels
    accept = {q for q, ok in enumerate(dfa.accept) if ok} | {_FINAL}
    return emit_graph(edges, accept, 0, host, base, preset=names)


MAX_NAME_DEPTH = 24  # trie levels nested in one rule (two or three expression levels each)


def plain_names(names: list[str]) -> bool:
    """Whether every character of ``names`` is spelled as itself (:data:`PLAIN_ASCII`), so
    :func:`name_exclusion` applies."""
    return all(ord(c) in PLAIN_ASCII for c in set("".join(names)))


@functools.lru_cache(maxsize=4096)
def _other_plain(taken: str) -> MaybeExpr:
    """One plain character not in ``taken``."""
    return chars(PLAIN_ASCII - CharSet.chars(taken))


def name_exclusion(host: StringHost, names: list[str], base: str) -> Expr:
    """The JSON spellings of every string except ``names`` (at least one, all
    :func:`plain_names`), built straight from their trie rather than by complementing an
    automaton: the language :func:`emit_json_dfa` gives for the complement of
    ``dfa_from_strings(names)``.

    A trie node is optional unless it ends a name; it goes on with each child's character, or
    leaves the trie with any other plain character or a non-ASCII or escaped one, after which
    anything may follow (one rule, :func:`_canonical_rest`). Nodes whose subtrees are alike (the same
    ends below the same characters: shared suffixes such as ``_id``) are one node, as in the
    minimal automaton; such a node reached from more than one place is a rule, so the grammar
    stays linear in the minimal automaton rather than in the names' total length. So is a node
    every :data:`MAX_NAME_DEPTH` levels of height, so long names stay within the parser's
    nesting limit. The nodes are built as :func:`~structspec.ir.expr.alt` and
    :func:`~structspec.ir.expr.seq` would build them (their branches start with distinct
    characters and none is a single character), without their merging passes."""
    after, leave = _canonical_rest(host), _canonical_more(host)
    children: list[dict[str, int]] = [{}]
    ends = [False]
    for name in names:
        q = 0
        for c in name:
            t = children[q].get(c)
            if t is None:
                t = len(ends)
                children[q][c] = t
                children.append({})
                ends.append(False)
            q = t
        ends[q] = True
    # the minimal automaton's states: a node's class is its end flag and its children's
    # classes by character; a class is numbered after the classes below it
    kinds: dict[tuple[bool, tuple[tuple[str, int], ...]], int] = {}
    kind = [0] * len(ends)
    for q in reversed(range(len(ends))):  # children were numbered after their parents
        key = (ends[q], tuple((c, kind[t]) for c, t in sorted(children[q].items())))
        kind[q] = kinds.setdefault(key, len(kinds))
    uses = [0] * len(kinds)
    for _, out in kinds:
        for _, k in out:
            uses[k] += 1
    after_name = Alt((Seq((chars(PLAIN_ASCII), after)), leave))  # a leaf: something more must follow
    bodies: list[Expr] = []
    height: list[int] = []
    for k, (ended, out) in enumerate(kinds):
        if not out:
            bodies.append(after_name)
            height.append(0)
            continue
        taken = "".join(c for c, _ in out)
        branches: list[Expr] = [Seq((Lit(c), bodies[child])) for c, child in out]
        other = _other_plain(taken)
        if other is not None:
            branches.append(Seq((other, after)))
        branches.append(leave)
        body: Expr = Alt(tuple(branches)) if ended else Rep(Alt(tuple(branches)), 0, 1)
        height.append(1 + max(height[child] for _, child in out))
        if k != kind[0] and (uses[k] > 1 or height[k] % MAX_NAME_DEPTH == 0):
            named = host.fresh(f"{base}-{k + 2}")
            host.define(named, body)
            body = Ref(named)
            height[k] = 0
        bodies.append(body)
    return bodies[kind[0]]


def _canonical_rest(host: StringHost) -> Ref:
    """Any canonically spelled string content (one rule for the grammar)."""
    return host.builder.helper("canonical-rest", lambda: seq(
        rep(chars(PLAIN_ASCII), 0, None), rep(_canonical_more(host), 0, 1)) or EMPTY)


def _canonical_more(host: StringHost) -> Ref:
    """A non-ASCII or escaped character, then :func:`_canonical_rest`."""
    return host.builder.helper("canonical-more", lambda: seq(
        alt(chars(NON_ASCII), _canonical_escape(host)), _canonical_rest(host)) or EMPTY)


def _canonical_escape(host: StringHost) -> Ref:
    return host.builder.helper("escape", lambda: canonical_char(_ESCAPED) or EMPTY)


def string_content(host: StringHost, spec: StringSpec, name: str) -> MaybeExpr:
    """The (already JSON-spelled) content between the quotes."""
    low, high = spec.min_len, spec.max_len
    if high is not None and high < low:
        return None
    if spec.free():
        return counted(host.builder, host.char_rule(), low, high)
    try:
        languages = _languages(spec)
    except RegexError as exc:
        host.relax(_where(spec, exc), "pattern", str(exc))
        return rep(host.char_rule(), low, high)
    if any(lang.empty for lang in languages):
        return None
    direct = _direct(languages, spec)
    if direct is not None:
        if len(spec.formats) == 1 and not spec.patterns and direct is languages[0].expr:
            fmt = spec.formats[0][0]
            return host.builder.helper(f"{fmt}-format", lambda: map_chars(direct, encoder(host)) or EMPTY)
        return map_chars(direct, encoder(host))
    try:
        dfa = string_automaton(spec, languages)
    except TooComplexError as exc:
        pointer = (spec.patterns + spec.formats + spec.negated + [("", "")])[0][1]
        host.relax(pointer, "pattern", f"{exc} (combined with other string constraints)")
        return rep(host.char_rule(), low, high)
    except RegexError as exc:  # a pattern under 'not'
        host.relax(_where(spec, exc), "pattern", str(exc))
        return rep(host.char_rule(), low, high)
    return emit_json_dfa(host, dfa, f"{name}-s")


def _where(spec: StringSpec, error: RegexError) -> str:
    """The pointer of the pattern ``error`` is about (the first pattern's when none matches)."""
    patterns = spec.patterns + spec.negated
    return next((p for text, p in patterns if text == error.pattern), (patterns + spec.formats)[0][1])


def _languages(spec: StringSpec) -> list[PatternLanguage]:
    out = [pattern_language(p) for p, _ in spec.patterns]
    for fmt, _ in spec.formats:
        regex = format_regex(fmt)
        assert regex is not None
        out.append(pattern_language(regex, search=False))
    return out


def _direct(languages: list[PatternLanguage], spec: StringSpec) -> MaybeExpr:
    """An expression when one language with no exclusions suffices; else ``None``."""
    if len(languages) != 1 or spec.excluded or spec.negated or spec.negated_formats:
        return None
    if languages[0].expr is None:
        return None
    expr: Expr = languages[0].expr
    low, high = spec.min_len, spec.max_len
    have_low, have_high = length_range(expr)
    if have_low >= low and (high is None or (have_high is not None and have_high <= high)):
        return expr
    shape = single_repeat(expr)
    if shape is None:
        return None
    prefix, fixed, charset, r_low, r_high, suffix = shape
    new_low = max(r_low, low - fixed)
    new_high = r_high if high is None else (high - fixed if r_high is None else min(r_high, high - fixed))
    if new_high is not None and new_high < new_low:
        return None
    return seq(*prefix, rep(chars(charset), new_low, new_high), *suffix)


def string_automaton(spec: StringSpec, languages: list[PatternLanguage] | None = None) -> DFA:
    """The whole of ``spec`` as one automaton over decoded characters."""
    if languages is None:
        languages = _languages(spec)
    dfa: DFA | None = None
    for lang in languages:
        dfa = lang.dfa() if dfa is None else intersect(dfa, lang.dfa())
    low, high = spec.min_len, spec.max_len
    if dfa is None:
        dfa = dfa_length(low, high)
    elif (low > 0 or high is not None) and not dfa.empty:
        have_low, have_high = length_bounds(dfa)
        if (have_high is not None and have_high < low) or (high is not None and have_low > high):
            dfa = DFA((), ())  # no string of the patterns has an allowed length
        elif have_low < low or (high is not None and (have_high is None or have_high > high)):
            dfa = intersect(dfa, dfa_length(low, high))
    if spec.excluded:
        dfa = difference(dfa, dfa_from_strings(sorted(spec.excluded)))
    for pattern, _ in spec.negated:
        dfa = difference(dfa, pattern_language(pattern).dfa())
    for fmt, _ in spec.negated_formats:
        regex = format_regex(fmt)
        assert regex is not None
        dfa = difference(dfa, pattern_language(regex, search=False).dfa())
    return dfa
