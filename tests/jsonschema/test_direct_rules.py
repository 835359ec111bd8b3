"""The converters hand their rule tables straight to the compiler (``Grammar.from_json_schema``,
``Grammar.from_regex``): differential tests against the round trip through GBNF text. The
handed table is what parsing the printed text gives (same rules in the same order, the same
bodies up to how a class is spelled), and the rule set compiled from it is the one compiled
from the text, array for array; errors are the text's, placed in it."""

from __future__ import annotations

import sys
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assets_dir
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import structspec.grammar.grammar as grammar_module
from structspec.errors import GrammarError, SchemaError, SchemaRelaxedWarning
from structspec.grammar import Grammar
from structspec.grammar.gbnf.parser import parse_gbnf
from structspec.grammar.ruleset import RuleSet
from structspec.ir.charset import CharSet
from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Rep, Rule, Seq
from structspec.ir.printer import format_rule
from structspec.jsonschema import ConvertedSchema, Grounding, convert_schema
from structspec.regex.convert import RegexError, regex_rules, regex_to_gbnf

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

from fuzzing import strategies  # noqa: E402


def spelled(expr: Expr) -> Expr:
    """``expr`` with each class as written (``CharClass``) made the set it matches (``Chars``)."""
    if isinstance(expr, CharClass):
        return Chars(CharSet.of(expr.code_points()))
    if isinstance(expr, (Seq, Alt)):
        return type(expr)(tuple(spelled(item) for item in expr.items))
    if isinstance(expr, Rep):
        return Rep(spelled(expr.item), expr.low, expr.high)
    return expr


def parts(ruleset: RuleSet) -> dict[str, Any]:
    return {f.name: getattr(ruleset, f.name) for f in fields(ruleset) if f.init and f.name != "frames"}


def assert_same_parts(direct: RuleSet, parsed: RuleSet) -> None:
    ours, theirs = parts(direct), parts(parsed)
    for name, value in ours.items():
        if isinstance(value, np.ndarray):
            assert value.dtype == theirs[name].dtype and np.array_equal(value, theirs[name]), name
        else:
            assert value == theirs[name], name


def assert_same_grammar(rules: dict[str, Rule], text: str, automata: dict | None = None) -> None:
    """The handed ``rules`` are the parse of ``text``, and both compile to the same rule set
    (or fail with the same error)."""
    parsed = parse_gbnf(text)
    if not parsed.diagnostics:  # else the text is past the parser's limits: both must fail below
        assert list(rules) == [rule.name for rule in parsed.rules]
        assert {name: rule.body for name, rule in rules.items()} == {r.name: spelled(r.body) for r in parsed.rules}
    outcomes = []
    for handed in (rules, None):
        grammar_module._TABLES.clear()  # tables with given rules are kept by their text
        try:
            outcomes.append(grammar_module._compile(text, "root", automata, handed))
        except GrammarError as exc:
            outcomes.append((exc.code, exc.message, exc.line, exc.column))
    direct, from_text = outcomes
    if isinstance(from_text, RuleSet):
        assert isinstance(direct, RuleSet)
        assert_same_parts(direct, from_text)
    else:
        assert direct == from_text


def converted(schema: Any, **options: Any) -> ConvertedSchema | None:
    """The conversion, or ``None`` when the converter refuses the schema."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return convert_schema(schema, **options)
        except SchemaError:
            return None


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=strategies.handmade_schema(), strict=st.booleans(), whitespace=st.sampled_from(["compact", "flexible"]),
       order=st.sampled_from(["schema", "any"]))
def test_random_schemas(schema: Any, strict: bool, whitespace: str, order: str) -> None:
    found = converted(schema, strict=strict, whitespace=whitespace, property_order=order)
    assume(found is not None)
    assert found is not None
    assert_same_grammar(dict(found.rules), found.text)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(pattern=strategies.REGEX)
def test_random_regexes(pattern: str) -> None:
    try:
        rules, text = regex_rules(pattern)
    except RegexError:
        assume(False)
        raise
    assert text == regex_to_gbnf(pattern)
    assert_same_grammar(rules, text)


def test_long_declared_names() -> None:
    """Undeclared members' names exclude declared ones through rules cut every 24 levels."""
    names = ["ab" * 40, "ab" * 39 + "c", "a/b c~", ""]
    found = converted({"type": "object", "properties": {n: {"type": "integer"} for n in names}})
    assert found is not None
    assert_same_grammar(dict(found.rules), found.text)


def test_maskbench_schemas() -> None:
    """Real schemas: a stratified MaskBench sample."""
    from _assets import load_case, maskbench_files, stratified_sample

    files = maskbench_files(assets_dir())
    compared = 0
    for path in stratified_sample(files, 24, 3):
        found = converted(load_case(path).schema)
        if found is None:
            continue
        assert_same_grammar(dict(found.rules), found.text)
        compared += 1
    assert compared >= 15


def test_example_schema() -> None:
    found = converted((REPO / "examples" / "invoice.schema.json").read_text(encoding="utf-8"))
    assert found is not None
    assert_same_grammar(dict(found.rules), found.text)


GROUNDED = {
    "type": "object",
    "properties": {"name": {"type": "string", "x-grounded": True},
                   "city": {"type": "string", "x-grounded": True, "maxLength": 12},
                   "count": {"type": "integer"}},
    "required": ["name"],
}


@pytest.mark.parametrize("source", ["", "Ada Lovelace lived in London.", "Grace Hopper\nArlington"])
def test_grounded_schema(source: str) -> None:
    found = converted(GROUNDED, grounding=Grounding(source))
    assert found is not None and found.automata
    assert_same_grammar(dict(found.rules), found.text, found.automata)


def test_grounded_template_is_reused() -> None:
    """A grounded schema seen before hands over the same rule table with the new text's automata,
    and the compiled grammars are those of the text path."""
    first = converted(GROUNDED, grounding=Grounding("Ada Lovelace lived in London."))
    second = converted(GROUNDED, grounding=Grounding("Grace Hopper lived in Arlington."))
    assert first is not None and second is not None
    assert second.rules is first.rules and second.text is first.text
    for found in (first, second):
        grammar = Grammar._from_converted(found)
        assert_same_parts(grammar.ruleset, Grammar.from_gbnf(found.text, automata=found.automata).ruleset)
    assert Grammar.from_json_schema(GROUNDED, source="Grace Hopper").matches('{"name":"Grace","count":3}')


def test_compile_limit_error_is_placed() -> None:
    """A rule too big to compile fails as its text does: the same code, message and position."""
    pattern = "x|(a|b)*a(a|b){18}"
    with pytest.raises(GrammarError) as direct:
        Grammar.from_regex(pattern)
    with pytest.raises(GrammarError) as from_text:
        Grammar.from_gbnf(regex_to_gbnf(pattern))
    assert direct.value.code == "E108"
    assert (direct.value.code, direct.value.message, direct.value.line, direct.value.column) == (
        from_text.value.code, from_text.value.message, from_text.value.line, from_text.value.column)


def test_grammar_source_and_rules() -> None:
    """The public views of a grammar built from handed rules: its text, and the rules parsed from it."""
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[a-c]+$"}, "maxItems": 3}
    found = converted(schema)
    assert found is not None
    grammar = Grammar.from_json_schema(schema)
    assert grammar.source == found.text
    assert {name: spelled(rule.body) for name, rule in grammar.rules.items()} == {
        name: rule.body for name, rule in found.rules.items()}
    assert grammar.matches('["ab","c"]') and not grammar.matches('["ad"]')


def test_parse_limits_hold() -> None:
    """What the text's parser refuses (here a count over its limit, ``char{100001,}``: the
    strings of the first branch or of neither other one), the handed rules do not get past."""
    schema = {"oneOf": [
        {"type": "string", "minLength": 100, "maxLength": 100_000},
        {"anyOf": [{"type": "string"}, {"not": {"type": "string", "format": "bogus"}}]},
        {"type": "string", "pattern": "[a-" + "-" * 12 + "*" + "-" * 121 + "z]*+"},
    ]}
    found = converted(schema, strict=False, property_order="any")
    assert found is not None and "char{100001,}" in found.text
    assert_same_grammar(dict(found.rules), found.text)
    with pytest.raises(GrammarError) as direct, pytest.warns(SchemaRelaxedWarning):
        Grammar.from_json_schema(schema, strict=False, property_order="any")
    assert (direct.value.code, direct.value.line, direct.value.column) == ("E108", 2, 19)


def test_deep_rule_is_checked_as_text() -> None:
    """A rule nested past the parser's limit fails as its text does."""
    body: Expr = Lit("a")
    for i in range(140):
        body = Seq((Lit("b"), Rep(body, 0, 1))) if i % 2 else Alt((Lit("c"), body))
    rules = {"root": Rule("root", body)}
    text = format_rule("root", body) + "\n"
    with pytest.raises(GrammarError) as direct:
        grammar_module._compile(text, "root", None, rules)
    with pytest.raises(GrammarError) as from_text:
        Grammar.from_gbnf(text)
    assert direct.value.code == from_text.value.code == "E108"
    assert (direct.value.line, direct.value.column) == (from_text.value.line, from_text.value.column)
