"""The GBNF language: every construct, every error with its code and position, printing."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structspec import Grammar, GrammarError
from structspec.grammar.gbnf.parser import parse_gbnf
from structspec.ir.expr import CharClass, Lit, Rep, TokenRef
from structspec.ir.printer import format_expr


def accepts(src: str, text: str | bytes) -> bool:
    return Grammar.from_gbnf(src).matches(text)


@pytest.mark.parametrize(
    ("src", "good", "bad"),
    [
        ('root ::= "a" | "b"', ["a", "b"], ["", "ab", "c"]),
        ('root ::= ("a" "b")+', ["ab", "abab"], ["", "a", "aba"]),
        ('root ::= "x"*', ["", "x", "xxx"], ["y"]),
        ('root ::= "x"?', ["", "x"], ["xx"]),
        ('root ::= "x"{3}', ["xxx"], ["xx", "xxxx"]),
        ('root ::= "x"{2,}', ["xx", "xxxxx"], ["x"]),
        ('root ::= "x"{1,3}', ["x", "xxx"], ["", "xxxx"]),
        ('root ::= "x"{0,2}', ["", "xx"], ["xxx"]),
        ('root ::= [a-c0-9_]+', ["abc_09"], ["d", "A"]),
        ('root ::= [^"\\\\]', ["a", "é", "日", "😀"], ['"', "\\", "ab"]),
        ("root ::= .", ["a", "\n", "😀"], ["", "ab"]),
        ('root ::= "\\n\\r\\t\\\\\\"\\[\\]"', ['\n\r\t\\"[]'], ["n"]),
        ('root ::= "\\x41\\u00e9\\U0001F600"', ["Aé😀"], ["A"]),
        ('root ::= [\\x41-\\x43\\u00e9]', ["A", "C", "é"], ["D"]),
        ('root ::= [\\]\\[]', ["]", "["], ["\\"]),
        ('root ::= [a-]', ["a", "-"], ["b"]),
        ('root ::= "a" # comment\n# another\n', ["a"], ["b"]),
        ('root ::= ("a" |\n  "b" |\n  "c")', ["a", "b", "c"], ["d"]),
        ('root ::= "a"\n  | "b"', ["a", "b"], ["c"]),
        ('root ::= (\n  "a"\n  "b"\n)', ["ab"], ["a"]),
        ('root ::= x-y_1\nx-y_1 ::= "q"', ["q"], [""]),
        ('root ::= ""', [""], ["a"]),
        ('root ::= "a" ()', ["a"], [""]),
    ],
)
def test_constructs(src, good, bad):
    grammar = Grammar.from_gbnf(src)
    for text in good:
        assert grammar.matches(text), text
    for text in bad:
        assert not grammar.matches(text), text


def test_token_references_parse():
    rules = parse_gbnf('root ::= <[42]> <|eot_id|> !<[7]> !<think>').rules
    refs = [node for node in rules[0].body.items if isinstance(node, TokenRef)]
    assert [(r.token, r.negated) for r in refs] == [(42, False), ("<|eot_id|>", False), (7, True), ("<think>", True)]
    # Token references never match raw text.
    assert not accepts("root ::= <[42]>", "42")


def test_repetition_bounds_in_tree():
    (rule,) = parse_gbnf('root ::= "a"{2,5} [b]* [c]+ [d]?').rules
    assert [(n.low, n.high) for n in rule.body.items if isinstance(n, Rep)] == [(2, 5), (0, None), (1, None), (0, 1)]


def test_negated_class_code_points():
    node = parse_gbnf("root ::= [^a-z]").rules[0].body
    assert isinstance(node, CharClass)
    assert node.code_points() == ((0, 0x60), (0x7B, 0x10FFFF))


@pytest.mark.parametrize(
    ("src", "code", "line", "column", "needle"),
    [
        ("root ::= foo", "E101", 1, 10, "undefined rule 'foo'"),
        ('root ::= valeu\nvalue ::= "v"', "E101", 1, 10, "did you mean 'value'"),
        ('rot ::= "a"', "E102", 1, 1, "'root'"),
        ('root ::= "a"\nroot ::= "b"', "E103", 2, 1, "already defined at line 1"),
        ('root ::= root "a" | "b"', "E104", 1, 1, "root -> root"),
        ('root ::= a\na ::= b "x"\nb ::= root "y"', "E104", 1, 1, "root -> a -> b -> root"),
        ('root ::= a\na ::= b? root "x"\nb ::= "y"', "E104", 1, 1, "prefix that can be empty"),
        ('root ::= e? root "x"\ne ::= ""', "E104", 1, 1, "prefix that can be empty"),
        ("root ::= [z-a]", "E105", 1, 11, "reversed range"),
        ("root ::= []", "E105", 1, 10, "empty character class"),
        ('root ::= "a"{3,1}', "E106", 1, 13, "minimum above its maximum"),
        ('root ::= "a" x\nx ::= "b" x', "E107", 1, 1, "never finish"),
        ('root ::= "abc', "E002", 1, 10, "unterminated string"),
        ("root ::= [abc", "E002", 1, 10, "unterminated character class"),
        ('root ::= "\\q"', "E003", 1, 11, "unknown escape"),
        ('root ::= "\\x4"', "E003", 1, 11, "2 hex digits"),
        ('root ::= "\\uD800"', "E003", 1, 11, "not a Unicode scalar value"),
        ('root ::= ("a"', "E001", 1, 10, "unclosed '('"),
        ('root ::= "a" )', "E001", 1, 14, "unbalanced ')'"),
        ('root ::= * "a"', "E001", 1, 10, "nothing to repeat"),
        ('root "a"', "E001", 1, 6, "expected '::='"),
        ('root ::= "a"\n\n  x ::= "b" y ::= "c"', "E001", 3, 13, "own line"),
        ('root ::= "a"{1000001}', "E108", 1, 13, "exceeds the limit"),
    ],
)
def test_errors_name_code_and_position(src, code, line, column, needle):
    with pytest.raises(GrammarError) as info:
        Grammar.from_gbnf(src)
    error = info.value
    assert (error.code, error.line, error.column) == (code, line, column), str(error)
    assert needle in error.message
    # The message quotes the source line with a caret under the column.
    rendered = str(error).splitlines()
    assert rendered[1].strip() == src.splitlines()[line - 1].strip()
    assert rendered[2].index("^") - 4 == column - 1


def test_parser_recovers_and_reports_every_syntax_error():
    parsed = parse_gbnf('root ::= "a" (\nok ::= "b"\nbad ::= [z-a] "\\q"\nmore ::= )\n')
    codes = [d.code for d in parsed.diagnostics]
    assert codes == ["E001", "E105", "E003", "E001"]
    assert [r.name for r in parsed.rules] == ["ok"]


def test_custom_root():
    grammar = Grammar.from_gbnf('start ::= "s" other\nother ::= "o"', root="start")
    assert grammar.root == "start" and grammar.matches("so")


def test_rules_are_read_only():
    grammar = Grammar.from_gbnf('root ::= "a" b\nb ::= "b"')
    assert list(grammar.rules) == ["root", "b"]
    with pytest.raises(TypeError):
        grammar.rules["c"] = grammar.rules["b"]  # type: ignore[index]


ROUND_TRIP = [
    'root ::= "a\\"b\\\\c\\n" | [^\\]\\x2D^] | .',
    'root ::= ("x" | "y" z)* z{2,4} z{3} z{2,} (z z)?\nz ::= [\\x00-\\x1F\\u00e9-\\u00ff]',
    "root ::= <[5]> !<|end|> [\\U0001F600-\\U0001F64F]+",
    'root ::= "" | ("a" "")',
]


@pytest.mark.parametrize("src", ROUND_TRIP)
def test_to_gbnf_round_trip(src):
    grammar = Grammar.from_gbnf(src)
    again = Grammar.from_gbnf(grammar.to_gbnf())
    assert again.rules == grammar.rules
    assert again.to_gbnf() == grammar.to_gbnf()


@settings(max_examples=150, deadline=None)
@given(st.text(min_size=0, max_size=8), st.booleans())
def test_literal_escaping_round_trips_any_text(text, ascii_only):
    src = f"root ::= {format_expr(Lit(text), ascii_only=ascii_only)}"
    assert src.isascii() or not ascii_only
    grammar = Grammar.from_gbnf(src)
    assert grammar.matches(text)
    assert not grammar.matches(text + "x")


def test_grammar_repr_and_rules_come_from_the_text() -> None:
    grammar = Grammar.from_gbnf('root ::= item ("," item)*\nitem ::= [a-z]+\n')
    assert repr(grammar).startswith("<Grammar root='root' compiled rules=")
    assert list(grammar.rules) == ["root", "item"]
    assert grammar.rules == grammar.rules  # parsed anew each time, equal each time
    assert Grammar.from_gbnf(grammar.to_gbnf()).matches("ab,c")
