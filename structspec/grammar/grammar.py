"""The public :class:`Grammar`: an immutable, compiled grammar shared by every parse."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from structspec.grammar.compiler import CompileLimitError, compile_rules
from structspec.grammar.gbnf.analysis import grammar_errors, rule_table
from structspec.grammar.gbnf.parser import parse_gbnf
from structspec.grammar.parse_state import ParseState
from structspec.grammar.ruleset import RuleSet
from structspec.ir.expr import Rule
from structspec.ir.printer import format_rules


class Grammar:
    """A compiled grammar. Build it with :meth:`from_gbnf` (or a converter); never mutated.

    The compiled :class:`~structspec.grammar.ruleset.RuleSet` is flat and integer-coded; every
    :class:`~structspec.grammar.parse_state.ParseState` of this grammar refers to it without copying.
    """

    __slots__ = ("__weakref__", "_root", "_rules", "_ruleset", "_source")

    def __init__(self, rules: Mapping[str, Rule], root: str, ruleset: RuleSet, source: str) -> None:
        self._rules = MappingProxyType(dict(rules))
        self._root = root
        self._ruleset = ruleset
        self._source = source

    def __reduce__(self) -> tuple:
        """Pickled as its parts (the server compiles grammars in other processes)."""
        return (Grammar, (dict(self._rules), self._root, self._ruleset, self._source))

    @classmethod
    def from_gbnf(cls, text: str, root: str = "root") -> Grammar:
        """Parse and compile GBNF text; raises :class:`~structspec.GrammarError` on bad input."""
        parsed = parse_gbnf(text)
        # Syntax errors first: rules that failed to parse would cause follow-on errors.
        problems = list(parsed.diagnostics) or grammar_errors(parsed.rules, root)
        if problems:
            first = min(problems, key=lambda d: (d.line, d.column))
            raise first.to_error(text)
        table, _ = rule_table(parsed.rules)
        try:
            ruleset = compile_rules(table, root)
        except CompileLimitError as exc:
            raise exc.diagnostic.to_error(text) from None
        return cls(table, root, ruleset, text)

    @classmethod
    def from_json_schema(
        cls, schema: dict | str, *, whitespace: str = "compact", strict: bool = True, property_order: str = "schema"
    ) -> Grammar:
        """A grammar whose sentences are exactly the JSON documents valid under ``schema``.

        Raises :class:`~structspec.SchemaError` (with ``.pointer`` and ``.keyword``) for what
        cannot be enforced exactly; ``strict=False`` approximates instead and warns with
        :class:`~structspec.errors.SchemaRelaxedWarning`, listing what was relaxed. Declared
        properties come in schema order; ``property_order="any"`` accepts any order (to check
        documents written elsewhere; generation is more predictable in schema order).
        """
        from structspec.jsonschema import schema_to_gbnf

        text = schema_to_gbnf(schema, whitespace=whitespace, strict=strict, property_order=property_order)
        return cls.from_gbnf(text)

    @classmethod
    def from_pydantic(cls, model: type, *, whitespace: str = "compact") -> Grammar:
        """A grammar for the JSON serialization of a Pydantic model class."""
        from structspec.jsonschema.pydantic_models import model_schema

        return cls.from_json_schema(model_schema(model), whitespace=whitespace)

    @classmethod
    def from_regex(cls, pattern: str) -> Grammar:
        """A grammar matching exactly the strings that fully match ``pattern``."""
        from structspec.regex.convert import regex_to_gbnf

        return cls.from_gbnf(regex_to_gbnf(pattern))

    @property
    def root(self) -> str:
        """The name of the start rule."""
        return self._root

    @property
    def rules(self) -> Mapping[str, Rule]:
        """Read-only mapping of rule names to their syntax trees, in definition order."""
        return self._rules

    @property
    def ruleset(self) -> RuleSet:
        """The compiled, shared rule set (automata over bytes)."""
        return self._ruleset

    @property
    def source(self) -> str:
        """The GBNF text this grammar was built from."""
        return self._source

    def to_gbnf(self) -> str:
        """GBNF text for this grammar; parsing it gives an equivalent grammar."""
        return format_rules(self._rules.values())

    def initial_state(self) -> ParseState:
        """The parse state before any input."""
        return ParseState.initial(self._ruleset)

    def matches(self, text: str | bytes) -> bool:
        """Whether the whole of ``text`` is a sentence of the grammar."""
        state = self.initial_state().advance(text)
        return state is not None and state.is_accepting()

    def __repr__(self) -> str:
        return f"<Grammar root={self._root!r} rules={len(self._rules)} states={self._ruleset.n_states}>"
