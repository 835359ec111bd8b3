"""The public :class:`Grammar`: an immutable, compiled grammar shared by every parse."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from structspec.budget import MAX_GBNF_NESTING
from structspec.gcpause import paused_collection
from structspec.grammar.compiler import CompileLimitError, compile_rules
from structspec.grammar.gbnf.analysis import grammar_errors, rule_table
from structspec.grammar.gbnf.parser import MAX_REPEAT, parse_gbnf
from structspec.grammar.given import comments, stand_ins
from structspec.grammar.parse_state import ParseState
from structspec.grammar.ruleset import RuleSet
from structspec.ir.byte_automaton import ByteAutomaton
from structspec.ir.expr import Rule, height
from structspec.ir.printer import format_rules
from structspec.lru import ENTRY_OVERHEAD, BoundedCache

if TYPE_CHECKING:
    from structspec.jsonschema import ConvertedSchema


def _rule_table(text: str, root: str, automata: Mapping[str, ByteAutomaton]) -> dict[str, Rule]:
    """The checked rule table of ``text`` with stand-ins for the given rules; raises
    :class:`~structspec.GrammarError` for the first problem."""
    parsed = parse_gbnf(text)
    given = stand_ins(automata, parsed.rules, text)
    # Syntax errors first: rules that failed to parse would cause follow-on errors.
    problems = list(parsed.diagnostics) or grammar_errors([*parsed.rules, *given], root)
    if problems:
        first = min(problems, key=lambda d: (d.line, d.column))
        raise first.to_error(text)
    return rule_table([*parsed.rules, *given])[0]


def _handed_table(
    rules: Mapping[str, Rule], text: str, root: str, automata: Mapping[str, ByteAutomaton]
) -> dict[str, Rule]:
    """:func:`_rule_table` for rules a converter built and printed as ``text`` (what parsing it
    gives, without positions): the same checks, and an error is raised as the text's, placed in it."""
    if any(_near_parse_limits(rule) for rule in rules.values()):  # the text's own limits decide
        return _rule_table(text, root, automata)
    given = stand_ins(automata, rules.values(), text)
    table = {**rules, **{rule.name: rule for rule in given}}
    problems = grammar_errors(table.values(), root)
    if problems:  # a converter's mistake: the text's own checks say where
        _rule_table(text, root, automata)
        raise problems[0].to_error(text)
    return table


def _near_parse_limits(rule: Rule) -> bool:
    """Whether the printed ``rule`` could meet a limit the GBNF parser sets on text (repetition
    counts, nesting; the check errs on the safe side): the text is then parsed after all."""
    if any(max(rep.low, rep.high or 0) > MAX_REPEAT for rep in rule.reps):
        return True
    return rule.size > MAX_GBNF_NESTING and height(rule.body) >= MAX_GBNF_NESTING


_TABLES: BoundedCache[tuple, dict[str, Rule]] = BoundedCache(
    max_entries=32, max_bytes=64 << 20, weigh=lambda key, _table: 40 * len(key[0]) + ENTRY_OVERHEAD)
"""Checked rule tables with given rules, by their text whether parsed from it or handed over
with it (about 40 bytes of syntax tree per character of text): a grounded schema's text is the
same for every source, and the compiler keeps its plan by the table's identity."""


def _compile(
    text: str, root: str, automata: Mapping[str, ByteAutomaton] | None, rules: Mapping[str, Rule] | None = None
) -> RuleSet:
    """The rule set of ``text`` (see :meth:`Grammar.from_gbnf`), or of ``rules`` when a converter
    hands over the rules it printed as ``text``; raises :class:`~structspec.GrammarError`."""
    key = None
    if automata and all(isinstance(a, ByteAutomaton) for a in automata.values()):
        key = (text, root, tuple((name, bool(a.final[0])) for name, a in automata.items()))
    table = _TABLES.get(key, None) if key is not None else None
    if table is None:
        given = automata or {}
        table = _rule_table(text, root, given) if rules is None else _handed_table(rules, text, root, given)
        if key is not None:
            _TABLES.put(key, table)
    try:
        return compile_rules(table, root, automata)
    except CompileLimitError as exc:
        diagnostic = exc.diagnostic
    if rules is not None:  # the handed rules carry no positions: the parsed text fails the same way, placed
        try:
            compile_rules(_rule_table(text, root, automata or {}), root, automata)
        except CompileLimitError as exc:
            diagnostic = exc.diagnostic
    raise diagnostic.to_error(text)


class Grammar:
    """A compiled grammar. Build it with :meth:`from_gbnf` (or a converter); never mutated.

    The compiled :class:`~structspec.grammar.ruleset.RuleSet` is flat and integer-coded; every
    :class:`~structspec.grammar.parse_state.ParseState` of this grammar refers to it without copying.
    The syntax trees are not kept: :attr:`rules` parses :attr:`source` again.
    """

    __slots__ = ("__weakref__", "_automata", "_root", "_ruleset", "_source")

    def __init__(
        self, root: str, ruleset: RuleSet, source: str, automata: Mapping[str, ByteAutomaton] | None = None
    ) -> None:
        self._root = root
        self._ruleset = ruleset
        self._source = source
        self._automata = MappingProxyType(dict(automata or {}))

    def __reduce__(self) -> tuple:
        """Pickled as its parts (the server compiles grammars in other processes)."""
        return (Grammar, (self._root, self._ruleset, self._source, dict(self._automata)))

    @classmethod
    def from_gbnf(
        cls, text: str, root: str = "root", *, automata: Mapping[str, ByteAutomaton] | None = None
    ) -> Grammar:
        """Parse and compile GBNF text; raises :class:`~structspec.GrammarError` on bad input.

        ``automata`` defines rules the text names but does not define, each by a deterministic
        byte automaton built elsewhere (the spans of a source text: docs/grounded.md). The rule
        table of such a text is kept for the next few calls with the same text and the same given
        rules' names and nullability (a grounded schema's text is the same for every source)."""
        with paused_collection():
            # The syntax trees die inside the block (they are local to _compile, unless kept in
            # _TABLES for given automata), so the collection that may follow it does not walk them.
            ruleset = _compile(text, root, automata)
        return cls(root, ruleset, text, automata)

    @classmethod
    def from_json_schema(
        cls,
        schema: dict | str,
        *,
        whitespace: str = "compact",
        strict: bool = True,
        property_order: str = "schema",
        source: str | None = None,
        grounded: bool = False,
    ) -> Grammar:
        """A grammar whose sentences are exactly the JSON documents valid under ``schema``.

        Raises :class:`~structspec.SchemaError` (with ``.pointer`` and ``.keyword``) for what
        cannot be enforced exactly; ``strict=False`` approximates instead and warns with
        :class:`~structspec.errors.SchemaRelaxedWarning`, listing what was relaxed. Declared
        properties come in schema order; ``property_order="any"`` accepts any order (to check
        documents written elsewhere; generation is more predictable in schema order).

        ``source`` is the text that strings marked ``"x-grounded": true`` must be spans of;
        ``grounded=True`` grounds every string value without ``enum``, ``const``, ``format`` or
        ``pattern`` in it as well (docs/grounded.md).
        """
        from structspec.jsonschema import Grounding, convert_schema

        if grounded and source is None:
            raise ValueError("grounded=True needs the source text to ground strings in: pass source=...")
        grounding = None if source is None else Grounding(source, every_string=grounded)
        with paused_collection():
            converted = convert_schema(
                schema, whitespace=whitespace, strict=strict, property_order=property_order, grounding=grounding
            )
            grammar = cls._from_converted(converted)
            del converted  # its rule trees die inside the block (see from_gbnf), unless a grounded template keeps them
        return grammar

    @classmethod
    def _from_converted(cls, converted: ConvertedSchema) -> Grammar:
        """The grammar of a converted schema, compiled from its rule table (the text not parsed)."""
        with paused_collection():
            ruleset = _compile(converted.text, "root", converted.automata, converted.rules)
        return cls("root", ruleset, converted.text, converted.automata)

    @classmethod
    def from_pydantic(
        cls, model: type, *, whitespace: str = "compact", source: str | None = None, grounded: bool = False
    ) -> Grammar:
        """A grammar for the JSON serialization of a Pydantic model class (``source`` and
        ``grounded`` as in :meth:`from_json_schema`; ``Annotated[str, Grounded()]`` marks a field)."""
        from structspec.jsonschema.pydantic_models import model_schema

        return cls.from_json_schema(model_schema(model), whitespace=whitespace, source=source, grounded=grounded)

    @classmethod
    def from_regex(cls, pattern: str) -> Grammar:
        """A grammar matching exactly the strings that fully match ``pattern``."""
        from structspec.regex.convert import regex_rules

        with paused_collection():
            rules, text = regex_rules(pattern)
            ruleset = _compile(text, "root", None, rules)
            del rules  # the trees die inside the block (see from_gbnf)
        return cls("root", ruleset, text)

    @property
    def root(self) -> str:
        """The name of the start rule."""
        return self._root

    @property
    def rules(self) -> Mapping[str, Rule]:
        """Read-only mapping of rule names to their syntax trees, in definition order (the rules
        given as automata left out), parsed anew from :attr:`source` on each call."""
        table = _rule_table(self._source, self._root, self._automata)
        return MappingProxyType({name: rule for name, rule in table.items() if name not in self._automata})

    @property
    def automata(self) -> Mapping[str, ByteAutomaton]:
        """Read-only mapping of the rules given as byte automata (see :meth:`from_gbnf`)."""
        return self._automata

    @property
    def ruleset(self) -> RuleSet:
        """The compiled, shared rule set (automata over bytes)."""
        return self._ruleset

    @property
    def source(self) -> str:
        """The GBNF text this grammar was built from."""
        return self._source

    def to_gbnf(self) -> str:
        """GBNF text for this grammar; parsing it gives an equivalent grammar. Rules given as
        automata print as comments (``# name ::= (given as ...)``): parse the text with
        ``automata=grammar.automata`` to have them back."""
        return format_rules(self.rules.values()) + comments(self._automata)

    def initial_state(self) -> ParseState:
        """The parse state before any input."""
        return ParseState.initial(self._ruleset)

    def matches(self, text: str | bytes) -> bool:
        """Whether the whole of ``text`` is a sentence of the grammar."""
        state = self.initial_state().advance(text)
        return state is not None and state.is_accepting()

    def __repr__(self) -> str:
        compiled = len(self._ruleset.rule_names)
        return f"<Grammar root={self._root!r} compiled rules={compiled} states={self._ruleset.n_states}>"
