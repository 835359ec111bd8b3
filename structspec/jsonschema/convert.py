"""JSON Schema to GBNF: the orchestrating converter.

Each schema position is expanded into alternatives (:mod:`.expand`); each alternative is
emitted per JSON type (:mod:`.strings`, :mod:`.numbers`, :mod:`.objects`, :mod:`.arrays`).
Property values, items and ``$ref`` targets become named rules whose names follow the schema
path; ``$ref`` targets are compiled once, which is how recursion of any depth is expressed.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema as jsonschema_lib
import referencing.exceptions

from structspec.budget import check, deadline
from structspec.errors import SCHEMA_INVALID, SCHEMA_TOO_DEEP, SchemaError, SchemaRelaxedWarning
from structspec.gcpause import paused_collection
from structspec.ir.byte_automaton import ByteAutomaton
from structspec.ir.expr import Expr, Lit, MaybeExpr, Ref, Rule, alt
from structspec.jsonschema import helpers
from structspec.jsonschema.arrays import array_expr
from structspec.jsonschema.builder import GrammarBuilder
from structspec.jsonschema.encoding import free_char, json_value_expr
from structspec.jsonschema.expand import Expander
from structspec.jsonschema.facets import Alternative, Facet, RefFacet, alternative_types, split
from structspec.jsonschema.grounding import KEYWORD, GroundedStrings, Grounding, span_automaton
from structspec.jsonschema.limits import TIME_LIMIT, check_depth, timeout
from structspec.jsonschema.metaschema import metaschema_error
from structspec.jsonschema.numeric import number_expr
from structspec.jsonschema.objects import object_expr
from structspec.jsonschema.resolve import Document, Loc
from structspec.jsonschema.strings import StringSpec, spec_from_facets, string_expr
from structspec.jsonschema.values import enum_keys, fast_validator_class, value_key
from structspec.lru import ENTRY_OVERHEAD, BoundedCache

WHITESPACE = ("compact", "flexible")
PROPERTY_ORDERS = ("schema", "any")


ANNOTATIONS = frozenset(
    {"title", "description", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly"}
)
REFERENCES = ('"$ref"', '"$dynamicRef"', '"$recursiveRef"')


def _meaning(node: Any, identity: int) -> Hashable:
    """See :meth:`Converter.meaning`."""
    if isinstance(node, dict):
        node = {key: value for key, value in node.items() if key not in ANNOTATIONS}
    try:
        text = json.dumps(node, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return identity
    return identity if any(marker in text for marker in REFERENCES) else text


def _dialect(schema: Any) -> Any:
    """The validator class of the dialect ``schema`` names in ``$schema`` (2020-12 when it names
    none or one ``jsonschema`` does not know)."""
    if isinstance(schema, dict) and not isinstance(schema.get("$schema", ""), str):
        message = "not a valid schema: '$schema' must be a string (the URI of a dialect)"
        raise SchemaError(message, "/$schema", "$schema", code=SCHEMA_INVALID)
    return jsonschema_lib.validators.validator_for(schema, default=jsonschema_lib.Draft202012Validator)


class Converter:
    """One conversion: the document, the rules built so far and what was relaxed."""

    def __init__(
        self,
        schema: Any,
        whitespace: str = "compact",
        strict: bool = True,
        property_order: str = "schema",
        time_limit: float | None = TIME_LIMIT,
        grounding: Grounding | None = None,
    ) -> None:
        if whitespace not in WHITESPACE:
            raise ValueError(f"whitespace must be one of {WHITESPACE}, not {whitespace!r}")
        if property_order not in PROPERTY_ORDERS:
            raise ValueError(f"property_order must be one of {PROPERTY_ORDERS}, not {property_order!r}")
        check_depth(schema)
        self.strict = strict
        self.time_limit = time_limit
        self._where = ""  # the pointer being compiled, for the time-budget error
        self.any_order = property_order == "any"
        self.relaxed: list[tuple[str, str, str]] = []
        self.builder = GrammarBuilder()
        self.doc = Document(schema)
        self.ws: MaybeExpr = None
        if whitespace == "flexible":
            self.ws = self.builder.helper("ws", helpers.whitespace)
        self.expander = Expander(self)
        self.grounded = GroundedStrings(grounding)
        self._draft = _dialect(schema)
        self._validator = fast_validator_class(self._draft)(schema, format_checker=self._draft.FORMAT_CHECKER)
        self._node_validators: dict[int, Any] = {}
        self._valid: dict[tuple[Hashable, str], bool] = {}
        self._meanings: dict[int, Hashable] = {}
        self.derived: dict[Hashable, Any] = {}  # emitters' results keyed by node meanings
        self._pinned: dict[int, Any] = {}
        self._values: dict[tuple[tuple[str, int], ...], MaybeExpr] = {}
        self._defs: dict[str, Ref] = {}
        self._unguarded: set[str] = set()

    # -- services used by the emitters ---------------------------------------------------------
    def relax(self, pointer: str, keyword: str, message: str) -> None:
        """Refuse (strict) or record an approximation."""
        if self.strict:
            raise SchemaError(message, pointer, keyword)
        entry = (pointer, keyword, message)
        if entry not in self.relaxed:
            self.relaxed.append(entry)

    def is_valid(self, value: Any, loc: Loc) -> bool:
        """Whether ``jsonschema`` accepts ``value`` under the node at ``loc``."""
        check()
        node = self._pin(loc.node)
        key = (self.meaning(loc), json.dumps(value, sort_keys=True))
        if key not in self._valid:
            validator = self._node_validators.get(node)
            if validator is None:
                validator = self._node_validators[node] = self._validator.evolve(schema=self._same_dialect(loc.node))
            try:
                self._valid[key] = validator.is_valid(value)
            except (RecursionError, OverflowError, referencing.exceptions.Unresolvable, TypeError, re.error) as exc:
                raise SchemaError(f"cannot check values against this schema: {exc}", loc.pointer, "") from None
        return self._valid[key]

    def meaning(self, loc: Loc) -> Hashable:
        """A key that two nodes share only when they accept the same values: the node's JSON
        without annotations when it refers to nothing (no ``$ref``, ``$dynamicRef`` or
        ``$recursiveRef`` anywhere in it), else the node's identity. Schemas often repeat one
        subschema under many properties, titles aside; checks on values are then done once."""
        node = self._pin(loc.node)
        found = self._meanings.get(node)
        if found is None:
            found = self._meanings[node] = _meaning(loc.node, node)
        return found

    def _same_dialect(self, node: Any) -> Any:
        """``node`` without a ``$schema`` naming the document's own dialect: ``evolve`` would
        swap the fast validator class for ``jsonschema``'s own on seeing it."""
        if not isinstance(node, dict) or "$schema" not in node:
            return node
        if jsonschema_lib.validators.validator_for(node, default=self._draft) is not self._draft:
            return node
        return {key: value for key, value in node.items() if key != "$schema"}

    def _pin(self, node: Any) -> int:
        """``id(node)`` for cache keys, keeping ``node`` alive so the id is never reused."""
        self._pinned[id(node)] = node
        return id(node)

    def fresh(self, hint: str) -> str:
        return self.builder.fresh(hint)

    def define(self, name: str, expr: Expr) -> None:
        self.builder.define(name, expr)

    def char_rule(self) -> Ref:
        return self.builder.helper("char", free_char)

    def helper(self, name: str) -> Ref:
        return helpers.ref(self.builder, name, self.ws)

    # -- compilation ---------------------------------------------------------------------------
    def convert(self) -> tuple[dict[str, Rule], str]:
        """The grammar's rules and text (see :meth:`GrammarBuilder.finish`); one call per
        converter. The expander, which refers back to the converter, is dropped at the end, so
        that reference counting frees the run's other syntax trees at once rather than leaving a
        cycle to the collector."""
        try:
            with deadline(self.time_limit, lambda seconds: timeout(seconds, self._where)), enum_keys():
                return self._convert()
        finally:
            del self.expander

    def _convert(self) -> tuple[dict[str, Rule], str]:
        self._check_metaschema()
        self.builder.reserved.add("root")
        self._defs[""] = Ref("root")
        self._unguarded.add("")
        body = self.compile([self.doc.root], "root")
        self.builder.define("root", body)
        finished = self.builder.finish("root")
        if finished is None:
            raise SchemaError("the schema accepts no JSON value", "", "")
        if self.relaxed:
            listing = "; ".join(f"#{p} ({k}): {m}" for p, k, m in self.relaxed)
            warnings.warn(SchemaRelaxedWarning(f"schema approximated: {listing}", self.relaxed), stacklevel=3)
        return finished

    def _check_metaschema(self) -> None:
        """Refuse a schema that its draft's metaschema rejects, naming where (in strict and
        non-strict mode alike: a malformed keyword has no meaning to approximate)."""
        error = metaschema_error(self._draft, self._validator.schema)
        if error is not None:
            path = [str(part) for part in error.path]
            pointer = "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in path)
            raise SchemaError(f"not a valid schema: {error.message}", pointer, path[-1] if path else "",
                              code=SCHEMA_INVALID)

    def value_rule(self, locs: list[Loc], name: str) -> MaybeExpr:
        """The grammar of a value that must satisfy every schema in ``locs`` (a named rule
        when it is not trivial). Recursion through here consumes input, so the
        reference-cycle check restarts."""
        unique = {(loc.pointer, self._pin(loc.node)): loc for loc in locs}
        locs = list(unique.values())
        key = tuple(unique)
        if key in self._values:
            return self._values[key]
        saved, self._unguarded = self._unguarded, set()
        try:
            expr = self.compile(locs, name)
        finally:
            self._unguarded = saved
        result = self.builder.rule(name, expr)
        self._values[key] = result
        return result

    def compile(self, locs: list[Loc], name: str) -> MaybeExpr:
        check()
        locs = [loc for loc in locs if loc.node is not True and loc.node != {}]
        if locs:
            self._where = locs[0].pointer
        if not locs:
            return self.helper("value")
        if len(locs) == 1:
            target = self.pure_ref(locs[0])
            if target is not None:
                return self.def_rule(target, locs[0])
        alts: list[Alternative] = [()]
        for loc in locs:
            alts = self.expander.product(alts, self.expander.expand(loc))
        names = [name] if len(alts) == 1 else [f"{name}-{i + 1}" for i in range(len(alts))]
        return alt(*(self.emit(a, n, locs) for a, n in zip(alts, names, strict=True)))

    def pure_ref(self, loc: Loc) -> Loc | None:
        node = loc.node
        if not isinstance(node, dict):
            return None
        facet, comb = split(loc, self.doc.draft)
        if facet.kw or set(comb) - {"$ref", "$dynamicRef", "$recursiveRef"} or len(comb) != 1:
            return None
        return self.expander._ref_target(loc, comb)

    def def_rule(self, target: Loc, at: Loc) -> Ref:
        """The rule for a ``$ref`` target, compiled once."""
        if target.pointer in self._unguarded:
            raise SchemaError("reference cycle that matches no input in between", at.pointer, "$ref")
        if target.pointer in self._defs:
            return self._defs[target.pointer]
        name = self.builder.fresh(helpers.def_name(target.pointer))
        ref = Ref(name)
        self._defs[target.pointer] = ref
        self._unguarded.add(target.pointer)
        try:
            body = self.compile([target], name)
        finally:
            self._unguarded.discard(target.pointer)
        self.builder.define(name, body)
        return ref

    def emit(self, alternative: Alternative, name: str, meaning: list[Loc]) -> MaybeExpr:
        """The grammar of one alternative (a conjunction of flat facets)."""
        if len(alternative) == 1 and isinstance(alternative[0], RefFacet):
            return self.def_rule(alternative[0].target, alternative[0].source)
        if any(isinstance(p, RefFacet) for p in alternative):
            opened = self.expander.open_refs(alternative)
            return alt(*(self.emit(a, name, meaning) for a in opened))
        facets = [p for p in alternative if isinstance(p, Facet)]
        if not any(f.kw for f in facets):
            return self.helper("value")
        finite = self._finite(facets, meaning)
        if finite is not None:
            return alt(*(json_value_expr(v, self.ws) for v in finite))
        types = alternative_types(alternative)
        excluded = [v for f in facets for v in f.kw.get("~not-enum", ())]
        parts: list[MaybeExpr] = []
        if "null" in types and None not in excluded:
            parts.append(Lit("null"))
        if "boolean" in types:
            parts += [Lit(json.dumps(b)) for b in (True, False) if not _contains(excluded, b)]
        if "string" in types:
            parts.append(self._string(facets, name))
        if types & {"integer", "fraction"}:
            parts.append(number_expr(self, facets, types, name))
        if "object" in types:
            self._check_excluded(excluded, dict, facets, "object")
            parts.append(self._object(facets, name))
        if "array" in types:
            self._check_excluded(excluded, list, facets, "array")
            parts.append(self._array(facets, name))
        return alt(*parts)

    def _finite(self, facets: list[Facet], meaning: list[Loc]) -> list[Any] | None:
        """The values listed by the ``enum``/``const`` of ``facets`` (all of them) that every
        node of ``meaning`` accepts, each once; ``None`` when no facet lists values."""
        candidates: list[Any] | None = None
        for f in facets:
            if "enum" in f.kw or "const" in f.kw:
                values = f.kw["enum"] if "enum" in f.kw else [f.kw["const"]]
                if not isinstance(values, list):
                    raise SchemaError("'enum' must be an array", f.pointer("enum"), "enum", code=SCHEMA_INVALID)
                if candidates is None:
                    candidates = values
                else:
                    listed = {value_key(v) for v in values}
                    candidates = [v for v in candidates if value_key(v) in listed]
        if candidates is None:
            return None
        out: list[Any] = []
        seen: set[Hashable] = set()
        for value in self.grounded.keep_values(facets, candidates):
            key = value_key(value)
            if key not in seen:
                seen.add(key)
                if all(self.is_valid(value, loc) for loc in meaning):
                    out.append(value)
        return out

    def _check_excluded(self, excluded: list[Any], kind: type, facets: list[Facet], what: str) -> None:
        if any(isinstance(v, kind) for v in excluded):
            self.relax(facets[0].loc.pointer, "not", f"cannot exclude specific {what} values")

    def _string(self, facets: list[Facet], name: str) -> MaybeExpr:
        spec = spec_from_facets(facets, self.relax)
        if self.grounded.wanted(spec):
            return self.grounded.string(self, spec, name, facets[0].loc.pointer)
        if spec.free() and spec.min_len == 0 and spec.max_len is None:
            return self.helper("string")
        return string_expr(self, spec, name)

    def _object(self, facets: list[Facet], name: str) -> MaybeExpr:
        if not any(k in f.kw for f in facets for k in helpers.OBJECT_KEYWORDS):
            return self.helper("object")
        return object_expr(self, facets, name)

    def _array(self, facets: list[Facet], name: str) -> MaybeExpr:
        if not any(k in f.kw for f in facets for k in helpers.ARRAY_KEYWORDS):
            return self.helper("array")
        return array_expr(self, facets, name)

    # -- helpers for the emitters --------------------------------------------------------------
    def finite_values(self, locs: list[Loc]) -> list[Any] | None:
        """All values allowed by ``locs`` when that set is finite and known, else ``None``."""
        alts: list[Alternative] = [()]
        for loc in locs:
            alts = self.expander.product(alts, self.expander.expand(loc))
        out: list[Any] = []
        seen: set[Hashable] = set()
        for alternative in alts:
            if any(isinstance(p, RefFacet) for p in alternative):
                return None
            facets = [p for p in alternative if isinstance(p, Facet)]
            values = self._finite(facets, locs)
            if values is None:
                types = alternative_types(alternative)
                if not types <= {"null", "boolean"}:
                    return None
                values = [
                    v
                    for v in (None, True, False)
                    if _type_of(v) in types and all(self.is_valid(v, loc) for loc in locs)
                ]
            for value in values:
                key = value_key(value)
                if key not in seen:
                    seen.add(key)
                    out.append(value)
        return out

    def name_spec(self, loc: Loc) -> tuple[list[str] | None, list[StringSpec]]:
        """``propertyNames`` as a finite set of names and/or string specs."""
        finite: list[str] | None = None
        specs: list[StringSpec] = []
        for alternative in self.expander.expand(loc):
            if any(isinstance(p, RefFacet) for p in alternative):
                alternative = tuple(p for a in self.expander.open_refs(alternative) for p in a)
            facets = [p for p in alternative if isinstance(p, Facet)]
            if "string" not in alternative_types(alternative):
                continue
            values = self._finite(facets, [loc])
            if values is not None:
                finite = (finite or []) + [v for v in values if isinstance(v, str)]
                continue
            spec = spec_from_facets(facets, self.relax)
            if spec.grounded is not None:
                self.relax(spec.grounded, KEYWORD, "'x-grounded' applies to string values, not to property names")
            specs.append(spec)
        if finite is None and not specs:
            finite = []
        return finite, specs


def _type_of(value: Any) -> str:
    return "null" if value is None else "boolean"


def _contains(values: list[Any], value: Any) -> bool:
    key = value_key(value)
    return any(value_key(v) == key for v in values)


@dataclass(frozen=True)
class ConvertedSchema:
    """A schema's grammar: GBNF ``text``, the rules it names that are given as byte automata
    (grounded strings), and ``rules``, the rule table the text prints (``root`` first; what
    parsing the text gives, up to spelling: see :meth:`GrammarBuilder.finish`).
    ``Grammar.from_json_schema`` compiles ``rules`` as they are; ``Grammar.from_gbnf(text,
    automata=automata)`` compiles the same grammar from the text."""

    text: str
    automata: dict[str, ByteAutomaton]
    rules: Mapping[str, Rule] = field(repr=False, compare=False)

    def gbnf(self) -> str:
        """The text with a comment line for each given rule (what it is, in words)."""
        return self.text + "".join(automaton.comment(name) for name, automaton in self.automata.items())


@dataclass(frozen=True)
class _Template:
    """A grounded conversion whose grammar no source changes: the text and its rules, and each
    grounded rule's narrowing and schema pointer."""

    text: str
    rules: Mapping[str, Rule]
    spans: dict[str, tuple[Any, str]]


RULE_BYTES = 40  # estimated bytes of syntax tree per character of a grammar's text

_TEMPLATES: BoundedCache[tuple[Any, ...], _Template] = BoundedCache(
    max_entries=64, max_bytes=64 << 20,
    weigh=lambda key, t: 2 * (len(key[0]) + len(t.text)) + RULE_BYTES * len(t.text) + ENTRY_OVERHEAD)
"""By the schema's JSON and the options; about :data:`RULE_BYTES` of syntax tree per character of text."""


def convert_schema(
    schema: dict[str, Any] | bool | str,
    *,
    whitespace: str = "compact",
    strict: bool = True,
    property_order: str = "schema",
    time_limit: float | None = TIME_LIMIT,
    grounding: Grounding | None = None,
) -> ConvertedSchema:
    """The grammar accepting exactly the JSON texts that validate against ``schema``.

    ``property_order="schema"`` writes declared properties in schema order (or required ones
    first); ``"any"`` accepts them in any order, for checking documents written elsewhere (see
    :mod:`structspec.jsonschema.objects` for its size limit). ``grounding`` names the source
    text that grounded strings (``"x-grounded": true``, or every plain string) must be spans of
    (docs/grounded.md).

    ``schema`` is a dict (or boolean) or its JSON text. With ``strict=True`` anything that cannot
    be enforced exactly raises :class:`~structspec.errors.SchemaError` (``.pointer``,
    ``.keyword``); with ``strict=False`` it is approximated and one
    :class:`~structspec.errors.SchemaRelaxedWarning` lists every approximation.

    Limits (README, "Limits"): nesting deeper than :data:`~structspec.budget.MAX_NESTING`
    levels raises ``SchemaError`` with code ``S101``, a grammar over the size budget ``S102``,
    and a conversion running longer than ``time_limit`` seconds (``None``: no limit) ``S103``.
    """
    if isinstance(schema, str):
        schema = load_schema_text(schema)
    if not isinstance(schema, (dict, bool)):
        raise SchemaError("a schema must be an object or a boolean", "", "", code=SCHEMA_INVALID)
    key = None
    if grounding is not None and strict:  # a new text for a schema seen before: only the grounded rules change
        key = (json.dumps(schema, default=repr), whitespace, property_order, grounding.every_string)
        template = _TEMPLATES.get(key, None)
        if template is not None:
            automata = {name: span_automaton(grounding.source, spec, pointer)
                        for name, (spec, pointer) in template.spans.items()}
            if all(automaton is not None for automaton in automata.values()):
                return ConvertedSchema(template.text, automata, template.rules)
    with paused_collection():
        converter = Converter(schema, whitespace, strict, property_order, time_limit, grounding)
        rules, text = converter.convert()
        grounded, given = converter.grounded, dict(converter.builder.given)
        del converter  # the trees not handed over die inside the block: the collection after it does not walk them
    if key is not None and not grounded.source_shaped:
        _TEMPLATES.put(key, _Template(text, rules, dict(grounded.spans)))
    return ConvertedSchema(text, given, rules)


def schema_to_gbnf(
    schema: dict[str, Any] | bool | str,
    *,
    whitespace: str = "compact",
    strict: bool = True,
    property_order: str = "schema",
    time_limit: float | None = TIME_LIMIT,
    grounding: Grounding | None = None,
) -> str:
    """Readable GBNF for :func:`convert_schema`'s grammar (rules given as automata are
    comments in it)."""
    converted = convert_schema(
        schema,
        whitespace=whitespace,
        strict=strict,
        property_order=property_order,
        time_limit=time_limit,
        grounding=grounding,
    )
    return converted.gbnf()


def load_schema_text(text: str) -> Any:
    """The JSON value of a schema's text; :class:`SchemaError` when it is not JSON or nests
    too deeply for the parser (``S101``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"schema is not valid JSON: {exc}", "", "", code=SCHEMA_INVALID) from None
    except RecursionError:
        raise SchemaError("schema JSON nests too deeply to parse", "", "", code=SCHEMA_TOO_DEEP) from None
