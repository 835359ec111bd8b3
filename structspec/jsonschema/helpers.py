"""Shared rules for unconstrained JSON (``value``, ``object``, ``string``, ...), the bounded
whitespace rule, and rule names for ``$ref`` targets."""

from __future__ import annotations

from structspec.ir.charset import CharSet
from structspec.ir.expr import EMPTY, Chars, Expr, Lit, MaybeExpr, Ref, alt, opt, rep, seq
from structspec.jsonschema.builder import GrammarBuilder, sanitize
from structspec.jsonschema.encoding import QUOTE, free_char
from structspec.jsonschema.numbers import plain_integer, plain_number

OBJECT_KEYWORDS = {
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "required",
    "minProperties",
    "maxProperties",
    "unevaluatedProperties",
    "~extra-witness",  # a negated additionalProperties (see objects.py)
}
ARRAY_KEYWORDS = {
    "items",
    "prefixItems",
    "contains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "unevaluatedItems",
}
MAX_INDENT = 40


def whitespace() -> Expr:
    """Bounded layout between tokens: up to two spaces/tabs, or one newline and an indent of
    at most :data:`MAX_INDENT` spaces/tabs. A model can never spin on whitespace."""
    blank = Chars(CharSet.chars(" \t"))
    result = alt(rep(blank, 0, 2), seq(opt(Lit("\r")), Lit("\n"), rep(blank, 0, MAX_INDENT)))
    assert result is not None
    return result


def ref(builder: GrammarBuilder, name: str, ws: MaybeExpr) -> Ref:
    """The shared rule ``name`` (defined on first use, with its dependencies)."""
    gap = ws if ws is not None else EMPTY

    def make() -> Expr:
        if name == "value":
            parts = [ref(builder, n, ws) for n in ("object", "array", "string", "number")]
            return alt(*parts, Lit("true"), Lit("false"), Lit("null"))  # type: ignore[return-value]
        if name == "object":
            member = seq(ref(builder, "string", ws), gap, Lit(":"), gap, ref(builder, "value", ws))
            body = opt(seq(member, rep(seq(gap, Lit(","), gap, member), 0, None)))
            return seq(Lit("{"), gap, body, gap, Lit("}"))  # type: ignore[return-value]
        if name == "array":
            item = ref(builder, "value", ws)
            body = opt(seq(item, rep(seq(gap, Lit(","), gap, item), 0, None)))
            return seq(Lit("["), gap, body, gap, Lit("]"))  # type: ignore[return-value]
        if name == "string":
            char = builder.helper("char", free_char)
            return seq(QUOTE, rep(char, 0, None), QUOTE)  # type: ignore[return-value]
        if name == "number":
            return plain_number()  # type: ignore[return-value]
        if name == "integer":
            return plain_integer()  # type: ignore[return-value]
        raise KeyError(name)

    return builder.helper(name, make)


def def_name(pointer: str) -> str:
    """Rule name for a ``$ref`` target: the definition's own name when it has one."""
    if not pointer:
        return "root"
    steps = [s.replace("~1", "/").replace("~0", "~") for s in pointer.split("/")[1:]]
    for marker in ("$defs", "definitions"):
        if marker in steps:
            index = len(steps) - 1 - steps[::-1].index(marker)
            steps = steps[index + 1 :]
            break
    else:
        steps = ["root", *steps]
    kept = [s for s in steps if s not in ("properties", "$defs", "definitions")]
    return "-".join(sanitize(s) for s in kept) or "def"
