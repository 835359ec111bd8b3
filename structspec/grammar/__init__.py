"""Grammars: GBNF text to rules, rules to automata, automata to parse states.

Its one job is the grammar core every constraint ends in: the GBNF front end (``gbnf/``: parser,
rule analysis, diagnostics), the linter, the compiler from rules to one deterministic
byte automaton per rule (``compiler``, ``ruleset``), the persistent parse stacks
(``parse_state``), the cost of finishing from a state (``completion``) and structural tags, free
text with constrained segments composed into one grammar (``tags``) and read back
(``tag_reading``). :class:`Grammar` is the public face.

May import: ``structspec.jsonschema`` and ``structspec.regex`` (the converters behind
``Grammar.from_json_schema``, ``from_pydantic`` and ``from_regex``), ``structspec.ir`` and
``structspec.errors``. Never tokens, masks or anything above them.
"""

from structspec.grammar.grammar import Grammar

__all__ = ["Grammar"]
