"""Hypothesis strategies for the fuzzer: GBNF text, JSON Schemas, regexes and HTTP requests.

Each strategy mixes well-formed input (so that the deep paths run) with near misses (a
well-formed text with characters dropped, repeated or swapped) and plain noise.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import jsonschema
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

# -- shared pieces ------------------------------------------------------------------------------

SMALL_INTS = st.sampled_from([0, 1, 2, 3, 5, 16, 33, 100, 1000, 99_999, 100_000, 100_001, 2**31, 2**64, 2**70])
ANY_INT = st.one_of(SMALL_INTS, st.integers(), st.sampled_from([-1, -(2**63), -(2**70)]))
ODD_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324, 0.5, 2.0, 2.5, -1.0])
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | ANY_INT | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, texts: st.SearchStrategy[str]) -> str:
    """A text from ``texts`` with a few characters dropped, doubled, swapped or inserted."""
    text = draw(texts)
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        edit = draw(st.sampled_from(["drop", "double", "swap", "insert"]))
        if edit == "drop":
            text = text[:i] + text[i + 1 :]
        elif edit == "double":
            text = text[:i] + text[i] * draw(st.integers(2, 200)) + text[i:]
        elif edit == "swap" and i + 1 < len(text):
            text = text[:i] + text[i + 1] + text[i] + text[i + 2 :]
        else:
            text = text[:i] + draw(st.sampled_from(list("()[]{}|*+?\"\\\n#:=<>!^-,.$"))) + text[i:]
    return text


def noisy(texts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Mostly ``texts``, sometimes a near miss of one, sometimes noise."""
    return st.one_of(texts, texts, mutated(texts), st.text(max_size=60))


def nested(opening: str, closing: str, middle: str = "") -> st.SearchStrategy[str]:
    """``opening`` repeated up to 10,000 times around ``middle``: deep nesting."""
    return st.integers(1, 10_000).map(lambda n: opening * n + middle + closing * n)


# -- GBNF --------------------------------------------------------------------------------------

RULE_NAMES = st.sampled_from(["root", "root", "a", "b", "item", "value", "ws", "x-y", "r_1", "undefined"])
ESCAPES = st.sampled_from(["\\n", "\\t", "\\\\", '\\"', "\\[", "\\]", "\\x41", "\\u00e9", "\\U0001F600", "\\q", "\\x4"])


@st.composite
def gbnf_literal(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(st.text("abc xyz{}[],:0123456789é日😀", max_size=4), ESCAPES), max_size=3))
    return '"' + "".join(parts) + '"'


@st.composite
def gbnf_class(draw: st.DrawFn) -> str:
    items = draw(st.lists(st.sampled_from(["a-z", "0-9", "_", "^", "z-a", "\\]", "\\\\", '"', "-", "\\x00-\\x1F", "é"]),
                          max_size=4))
    return "[" + ("^" if draw(st.booleans()) else "") + "".join(items) + "]"


COUNT = st.one_of(st.integers(0, 40), st.integers(0, 40), SMALL_INTS)
COUNTS = st.tuples(COUNT, COUNT, st.sampled_from(["{m}", "{m,}", "{m,n}", "{,n}"])).map(
    lambda t: t[2].replace("m", str(t[0])).replace("n", str(t[1]))
)
POSTFIX = st.one_of(st.sampled_from(["", "", "", "*", "+", "?"]), COUNTS)


def gbnf_expression(depth: int) -> st.SearchStrategy[str]:
    tokens = st.sampled_from(["<[12]>", "<|eot|>", "!<[3]>", "<>"])
    atoms = [gbnf_literal(), gbnf_class(), st.just("."), RULE_NAMES, tokens]
    if depth > 0:
        atoms.append(gbnf_expression(depth - 1).map(lambda inner: f"({inner})"))
    item = st.tuples(st.one_of(*atoms), POSTFIX).map("".join)
    sequence = st.lists(item, min_size=0, max_size=4).map(" ".join)
    return st.lists(sequence, min_size=1, max_size=3).map(" | ".join)


@st.composite
def gbnf_rule(draw: st.DrawFn) -> str:
    name = draw(RULE_NAMES)
    body = draw(gbnf_expression(draw(st.integers(0, 3))))
    if draw(st.integers(0, 4)) == 0:
        body = body.replace(" | ", "\n    | ", 1)
    comment = draw(st.sampled_from(["", "", "  # note"]))
    return f"{name} ::= {body}{comment}"


GBNF_WELL_FORMED = st.lists(gbnf_rule(), min_size=1, max_size=5).map("\n".join)
GBNF = st.one_of(
    noisy(GBNF_WELL_FORMED),
    nested("(", ")", '"a"').map(lambda body: f"root ::= {body}"),
    st.integers(1, 5000).map(lambda n: 'root ::= "a"' + "?" * n),
    st.integers(1, 3000).map(lambda n: "root ::= r0\n" + "".join(f'r{i} ::= "x" r{i + 1}\n' for i in range(n))
                             + f'r{n} ::= "a"\n'),
)
PROBES = st.one_of(TEXT, st.text("abcxyz{}[]\",:0123456789 é", max_size=20), st.binary(max_size=12))

# -- regular expressions ---------------------------------------------------------------------------

REGEX_PIECES = st.sampled_from(
    ["a", "b", "[a-c]", "[^a]", "\\d", "\\w", "\\s", ".", "(", ")", "(?:", "|", "*", "+", "?", "{2}", "{1,3}", "{2,}",
     "^", "$", "\\b", "\\1", "(?=a)", "[[:alpha:]]", "[a--b]", "\\u00e9", "\\x41", "\\p{L}", "[]", "\\", "é", "{,2}"]
)
REGEX_WELL_FORMED = st.sampled_from(
    ["[a-z]+", "^\\d{3}-\\d{4}$", "(ab|cd)*e", "[^\\s@]+@[^\\s@]+", "(?:x|y){2,5}z?", "^$", "a{0,100}b"]
)
REGEX = st.one_of(
    st.lists(REGEX_PIECES, max_size=10).map("".join),
    noisy(REGEX_WELL_FORMED),
    nested("(", ")", "a"),
    nested("(?:", ")", "a"),
)

# -- JSON Schema --------------------------------------------------------------------------------


def unrolled(schema: Any, meta: dict[str, Any], depth: int) -> Any:
    """``schema`` (part of the metaschema ``meta``) with its references inlined: the root's
    (``$ref: "#"``) unrolled ``depth`` more times, then a boolean schema, since
    hypothesis-jsonschema cannot generate from a recursive schema."""
    if isinstance(schema, list):
        return [unrolled(item, meta, depth) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if ref == "#":
        return unrolled(_root(meta), meta, depth - 1) if depth > 0 else {"type": "boolean"}
    if isinstance(ref, str) and ref.startswith("#/definitions/"):
        return unrolled(meta["definitions"][ref.removeprefix("#/definitions/")], meta, depth)
    return {key: unrolled(value, meta, depth) for key, value in schema.items()}


def _root(meta: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in meta.items() if key not in ("$schema", "$id", "definitions", "default")}


@functools.cache
def _metaschema_strategy(depth: int) -> st.SearchStrategy[Any]:
    """Schemas valid under the draft-07 metaschema, with subschemas nested ``depth`` deep."""
    meta = jsonschema.Draft7Validator.META_SCHEMA
    return from_schema(unrolled(_root(meta), meta, depth))


@st.composite
def handmade_schema(draw: st.DrawFn, depth: int = 3) -> Any:
    """A schema built from the keywords structspec supports, in random combinations."""
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.one_of(
            st.sampled_from([True, False, {}, {"type": "string"}, {"type": "integer"}, {"type": "null"}]),
            st.fixed_dictionaries({"enum": st.lists(JSON_VALUES, max_size=5)}),
            st.fixed_dictionaries({"const": JSON_VALUES}),
            st.fixed_dictionaries({"type": st.just("string"), "pattern": REGEX}),
            st.fixed_dictionaries({"type": st.just("string"), "format": st.sampled_from(
                ["date", "date-time", "email", "uuid", "ipv4", "uri", "hostname", "bogus"])}),
            st.fixed_dictionaries({"type": st.sampled_from(["integer", "number"])}, optional={
                "minimum": st.one_of(ANY_INT, ODD_FLOATS), "maximum": st.one_of(ANY_INT, ODD_FLOATS),
                "exclusiveMinimum": ANY_INT, "multipleOf": st.one_of(SMALL_INTS, st.sampled_from([0.1, 0.5, 1e-9]))}),
            st.fixed_dictionaries({"type": st.just("string")},
                                  optional={"minLength": SMALL_INTS, "maxLength": SMALL_INTS}),
        ))
    sub = handmade_schema(depth - 1)
    names = st.sampled_from(["a", "b", "name", "x y", "", "é", "$ref"])
    return draw(st.one_of(
        st.fixed_dictionaries({"type": st.just("object")}, optional={
            "properties": st.dictionaries(names, sub, max_size=4), "required": st.lists(names, max_size=3),
            "additionalProperties": st.one_of(st.booleans(), sub),
            "patternProperties": st.dictionaries(REGEX, sub, max_size=2),
            "propertyNames": sub, "minProperties": SMALL_INTS, "maxProperties": SMALL_INTS,
            "dependentRequired": st.dictionaries(names, st.lists(names, max_size=2), max_size=2)}),
        st.fixed_dictionaries({"type": st.just("array")}, optional={
            "items": sub, "prefixItems": st.lists(sub, max_size=3), "contains": sub, "minItems": SMALL_INTS,
            "maxItems": SMALL_INTS, "uniqueItems": st.booleans(), "minContains": SMALL_INTS}),
        st.builds(lambda k, subs: {k: subs}, st.sampled_from(["anyOf", "oneOf", "allOf"]),
                  st.lists(sub, min_size=1, max_size=4)),
        st.builds(lambda s: {"not": s}, sub),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, sub, sub, sub),
        st.builds(lambda s: {"$defs": {"d": s}, "$ref": "#/$defs/d"}, sub),
        st.just({"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"}),
        st.builds(lambda n, s: {"type": "array", "items": s, "maxItems": n}, SMALL_INTS, sub),
    ))


def deep_schema(levels: int) -> Any:
    schema: Any = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


SCHEMAS = st.one_of(
    handmade_schema(),
    handmade_schema(),
    _metaschema_strategy(1),
    _metaschema_strategy(2),
    st.integers(1, 400).map(deep_schema),
    st.one_of(st.integers(1, 100), st.integers(1, 60_000)).map(lambda n: {"enum": [f"v{i}" for i in range(n)]}),
    JSON_VALUES,
)
SCHEMA_TEXTS = st.one_of(
    noisy(handmade_schema().map(json.dumps)),
    nested("[", "]").map(lambda body: '{"enum": [' + body + "]}"),
    nested('{"not":', "}", "{}"),
)

# -- HTTP ---------------------------------------------------------------------------------------

def mostly(valid: st.SearchStrategy[Any], weird: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` three times in four."""
    return st.one_of(valid, valid, valid, weird)


BOUNDARY_INTS = st.sampled_from([-1, 0, 2**31, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63) - 1, 10**30])
WEIRD_NUMBER = st.one_of(BOUNDARY_INTS, BOUNDARY_INTS, ODD_FLOATS, ODD_FLOATS, st.floats(), st.none(), TEXT,
                         JSON_VALUES)
SCHEMA_FORMAT = st.fixed_dictionaries(
    {"type": st.just("json_schema"), "json_schema": st.fixed_dictionaries(
        {"name": TEXT, "schema": st.one_of(handmade_schema(2), _metaschema_strategy(1))},
        optional={"strict": st.one_of(st.booleans(), st.none())})},
)
# Each field: what a client would send, and what it might send by mistake.
FIELDS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "messages": (
        st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant"]), "content": TEXT}),
                 min_size=1, max_size=3),
        st.one_of(JSON_VALUES, st.lists(st.fixed_dictionaries({
            "role": st.sampled_from(["user", "tool", "function", "", "User", "developer"]),
            "content": st.one_of(TEXT, st.none(), ANY_INT, JSON_VALUES, st.lists(st.fixed_dictionaries(
                {"type": st.sampled_from(["text", "image_url", "x"]), "text": TEXT}), max_size=3)),
        }), max_size=3)),
    ),
    "model": (st.just("structspec-demo"), st.one_of(TEXT, st.none(), ANY_INT)),
    "max_tokens": (st.integers(1, 16), WEIRD_NUMBER),
    "max_completion_tokens": (st.integers(1, 16), WEIRD_NUMBER),
    "temperature": (st.sampled_from([0, 0.7, 1, 2]), WEIRD_NUMBER),
    "top_p": (st.sampled_from([0.5, 0.9, 1]), WEIRD_NUMBER),
    "top_k": (st.integers(0, 50), WEIRD_NUMBER),
    "seed": (st.integers(0, 2**32), st.one_of(ANY_INT, WEIRD_NUMBER)),
    "stream": (st.booleans(), JSON_VALUES),
    "stream_options": (st.fixed_dictionaries({"include_usage": st.booleans()}), JSON_VALUES),
    "response_format": (
        st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])}), SCHEMA_FORMAT),
        st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["json_schema", "xml"])}), JSON_VALUES),
    ),
    "grammar": (GBNF_WELL_FORMED, st.one_of(GBNF, JSON_VALUES)),
    "tools": (st.nothing(), st.lists(st.fixed_dictionaries({
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": TEXT, "parameters": handmade_schema(2)}),
    }), max_size=2)),
    "logprobs": (st.nothing(), st.booleans()),
    "n": (st.nothing(), WEIRD_NUMBER),
    "unknown_field": (st.nothing(), JSON_VALUES),
}
EXTRACT_FIELDS = {
    **{name: FIELDS[name] for name in ("model", "max_tokens", "temperature", "top_p", "top_k", "seed")},
    "schema": (handmade_schema(2), st.one_of(JSON_VALUES, SCHEMAS)),
    "text": (TEXT, JSON_VALUES),
    "instructions": (TEXT, JSON_VALUES),
}


@st.composite
def request_body(draw: st.DrawFn, fields: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]],
                 required: tuple[str, ...]) -> dict[str, Any]:
    """A plausible body (each optional field present or not), then, one time in two, one field
    given a value a client might send by mistake: most requests get past validation to the deep
    paths, and each mistake is met alone."""
    body: dict[str, Any] = {}
    for name, (valid, _) in fields.items():
        if (name in required or draw(st.booleans())) and not valid.is_empty:
            body[name] = draw(valid)
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(fields)))
        body[name] = draw(fields[name][1])
    return body


CHAT = request_body(FIELDS, ("messages",))
EXTRACT = request_body(EXTRACT_FIELDS, ("schema", "text"))


def _encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


BODIES = st.one_of(
    CHAT.map(_encode), CHAT.map(_encode), CHAT.map(_encode), CHAT.map(_encode),
    EXTRACT.map(_encode), EXTRACT.map(_encode),
    JSON_VALUES.map(_encode),
    st.binary(max_size=64),
    noisy(CHAT.map(json.dumps)).map(str.encode),
    nested("[", "]").map(str.encode),
    nested('{"messages":', "}", "[]").map(str.encode),
)
ROUTES = st.one_of(
    st.sampled_from([("POST", "/v1/chat/completions")] * 14 + [("POST", "/v1/extract")] * 7),
    st.sampled_from([("GET", "/v1/models"), ("GET", "/health"), ("GET", "/v1/chat/completions"),
                     ("POST", "/v1/models"), ("POST", "/nope"), ("PUT", "/v1/extract")]),
)
HEADERS = st.sampled_from([{"content-type": "application/json"}] * 4 + [{}, {"content-type": "text/plain"}])
REQUESTS = st.tuples(ROUTES, BODIES, HEADERS)
