"""Print syntax trees back to GBNF text that parses to an equivalent grammar."""

from __future__ import annotations

from collections.abc import Iterable

from structspec.grammar.gbnf.ast import (
    AnyChar,
    CharClass,
    Choice,
    Literal,
    Node,
    Repeat,
    Rule,
    RuleRef,
    Sequence,
    TokenRef,
)

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def format_rules(rules: Iterable[Rule]) -> str:
    """GBNF text for the rules, one per line."""
    return "".join(f"{rule.name} ::= {format_node(rule.body)}\n" for rule in rules)


def format_node(node: Node) -> str:
    """GBNF text for one expression."""
    if isinstance(node, Choice):
        return " | ".join(format_node(alt) for alt in node.alternatives)
    if isinstance(node, Sequence):
        if not node.items:
            return '""'
        return " ".join(_grouped(item, (Choice,)) for item in node.items)
    if isinstance(node, Repeat):
        return _grouped(node.item, (Choice, Sequence, Repeat)) + _suffix(node.min, node.max)
    if isinstance(node, Literal):
        return '"' + "".join(_char(ch, '"') for ch in node.text) + '"'
    if isinstance(node, CharClass):
        body = "".join(_class_range(lo, hi) for lo, hi in node.ranges)
        return "[" + ("^" if node.negated else "") + body + "]"
    if isinstance(node, AnyChar):
        return "."
    if isinstance(node, RuleRef):
        return node.name
    assert isinstance(node, TokenRef)
    text = f"<[{node.token}]>" if isinstance(node.token, int) else node.token
    return ("!" if node.negated else "") + text


def _grouped(node: Node, needs_parens: tuple[type, ...]) -> str:
    text = format_node(node)
    if isinstance(node, needs_parens) and not (isinstance(node, Sequence) and not node.items):
        return f"({text})"
    return text


def _suffix(low: int, high: int | None) -> str:
    if (low, high) == (0, None):
        return "*"
    if (low, high) == (1, None):
        return "+"
    if (low, high) == (0, 1):
        return "?"
    if high is None:
        return f"{{{low},}}"
    if low == high:
        return f"{{{low}}}"
    return f"{{{low},{high}}}"


def _char(ch: str, special: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch in special:
        return "\\" + ch
    code = ord(ch)
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02X}"
    if not ch.isprintable():
        return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"
    return ch


def _class_range(low: int, high: int) -> str:
    def one(code: int) -> str:
        ch = chr(code)
        if ch in "-^":
            return f"\\x{code:02X}"
        return _char(ch, "[]")

    return one(low) if low == high else f"{one(low)}-{one(high)}"
