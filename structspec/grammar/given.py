"""Rules given as byte automata: how they join a grammar's rule table and how they print.

GBNF text names such a rule like any other (``"\\"" source-span "\\""``) without defining it;
``Grammar.from_gbnf(text, automata={"source-span": automaton})`` supplies its automaton
(:class:`~structspec.ir.byte_automaton.ByteAutomaton`). For the checks that run on rule
tables (undefined rules, left recursion, productivity) each given rule is represented by a
*stand-in*: a rule with no references that is empty-able exactly when the automaton accepts
the empty string. The compiler takes the automaton instead of the stand-in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from structspec.errors import GrammarError
from structspec.ir.byte_automaton import ByteAutomaton
from structspec.ir.charset import ANY
from structspec.ir.expr import Alt, Chars, Lit, Rule


def stand_ins(automata: Mapping[str, ByteAutomaton], defined: Iterable[Rule], text: str) -> list[Rule]:
    """One stand-in rule per given automaton, placed after the text's last line. E103 when the
    text defines a rule of the same name; ``ValueError`` for a name GBNF could not refer to."""
    names = {rule.name: rule for rule in defined}
    line = text.count("\n") + 2
    out = []
    for name, automaton in automata.items():
        if name in names:
            rule = names[name]
            raise GrammarError("E103", f"rule {name!r} is defined in the text and also given as an automaton",
                               rule.line, rule.column, _line(text, rule.line))
        if not _valid_name(name):
            raise ValueError(f"{name!r} is not a rule name GBNF can refer to (letters, digits, '-' and '_')")
        if not isinstance(automaton, ByteAutomaton):
            raise TypeError(f"automata[{name!r}] must be a ByteAutomaton, got {type(automaton).__name__}")
        body = Alt((Lit(""), Chars(ANY))) if automaton.final[0] else Chars(ANY)
        out.append(Rule(name, body, line=line, column=1))
    return out


def comments(automata: Mapping[str, ByteAutomaton]) -> str:
    """The comment lines that stand for the given rules in printed GBNF."""
    return "".join(automaton.comment(name) for name, automaton in automata.items())


def _valid_name(name: str) -> bool:
    return bool(name) and all(c.isascii() and (c.isalnum() or c in "-_") for c in name)


def _line(text: str, number: int) -> str | None:
    lines = text.splitlines()
    return lines[number - 1] if 0 < number <= len(lines) else None
