"""What the fuzzer runs in its worker process: each target takes one case and returns an outcome
label, or raises.

Documented errors (a :class:`~structspec.errors.GrammarError`, :class:`~structspec.errors.SchemaError`
or :class:`~structspec.regex.RegexError`) are outcomes, not failures; any other exception is a
traceback. A target also checks what it can cheaply: a grammar prints back to an equivalent one,
a converted schema's grammar only produces valid JSON, a regex grammar accepts nothing Python's
``re`` rejects, and the rule table a converter hands the compiler compiles to the rule set its
printed text does.
Disagreements raise :class:`Inconsistent`.
"""

from __future__ import annotations

import json
import random
import re
import warnings
from typing import Any

import jsonschema
import numpy as np
from referencing.exceptions import Unresolvable

from structspec import Grammar, GrammarError, SchemaError, Vocabulary
from structspec import compile as compile_grammar
from structspec.errors import SchemaRelaxedWarning
from structspec.grammar.lint import lint_source
from structspec.jsonschema import convert_schema
from structspec.regex import RegexError

CLOSERS = frozenset(b'"]}')
_TOKENS = [bytes([b]) for b in range(256)] + [b"ab", b"xyz", b'{"', b'":', b"true", "日本".encode(), b"\\u00", None]
VOCABULARY = Vocabulary.from_token_bytes(_TOKENS, [len(_TOKENS) - 1])


class Inconsistent(AssertionError):
    """Two parts of structspec disagree about the same input."""


def gbnf(text: str, probe: bytes | str) -> str:
    """Lint, compile, print back, match and mask one GBNF text."""
    lint_source(text)
    try:
        grammar = Grammar.from_gbnf(text)
    except GrammarError as exc:
        return f"refused {exc.code}"
    try:
        again = Grammar.from_gbnf(grammar.to_gbnf())
    except GrammarError as exc:
        raise Inconsistent(f"the printed grammar does not parse: {exc}") from None
    try:
        if grammar.matches(probe) != again.matches(probe):
            raise Inconsistent(f"the printed grammar disagrees on {probe!r}")
        _walk(grammar, random.Random(len(text)), 64)
        _tokens(grammar, random.Random(len(text)), 16)
    except GrammarError as exc:  # E110: too ambiguous to follow
        return f"stopped {exc.code}"
    return "accepted"


def schema(value: Any, strict: bool, whitespace: str, order: str, walks: int) -> str:
    """Convert one schema (or schema text), compile it, and check what its grammar produces."""
    try:
        converted = convert_schema(value, strict=strict, whitespace=whitespace, property_order=order)
    except SchemaError as exc:
        return f"refused {exc.code}"
    try:
        grammar = Grammar._from_converted(converted)  # Grammar.from_json_schema's compile: the rule table as handed
    except GrammarError as exc:
        if exc.code in ("E108", "E110"):
            return f"too large {exc.code}"
        raise Inconsistent(f"the converter wrote GBNF that does not compile: {exc}") from None
    _same_rule_set(grammar, converted.text, "converter")
    if not strict or isinstance(value, str):
        return "converted"
    cls = jsonschema.validators.validator_for(value, default=jsonschema.Draft202012Validator)
    if _formats(value) - set(cls.FORMAT_CHECKER.checkers):
        # The reference passes every string for a format it has no checker for (hostname
        # without the optional fqdn package): it cannot judge what a `not` of one produces.
        return "converted, a format the reference does not check"
    validator = cls(value, format_checker=cls.FORMAT_CHECKER)
    rng = random.Random(walks)
    for _ in range(walks):
        try:
            produced = _walk(grammar, rng, 200)
        except GrammarError:
            return "converted"
        if produced is None:
            continue
        document = json.loads(produced.decode("utf-8"))
        try:
            with warnings.catch_warnings():  # re's warning on a class such as [a--b] is the reference's
                warnings.simplefilter("ignore", FutureWarning)
                valid = validator.is_valid(document)
        except (re.error, Unresolvable) as exc:
            # The reference evaluates every subschema it meets, and fails on a pattern Python's re
            # rejects or a reference it cannot resolve; the converter refuses those where they
            # decide anything (checked here) and drops them where they cannot (a branch whose
            # types conflict, an `if` without then or else), so only the reference stops here.
            live = {"type": "string", "pattern": exc.pattern} if isinstance(exc, re.error) else {"$ref": exc.ref}
            try:
                convert_schema(live, strict=strict)
            except SchemaError:
                return "converted, a schema the reference cannot evaluate"
            raise Inconsistent(f"the converter takes {live!r}, which the reference cannot evaluate") from None
        if not valid:
            raise Inconsistent(f"the grammar produced {produced!r}, which the schema rejects")
    return "converted"


def _formats(value: Any) -> set[str]:
    """Every string given as a ``format`` anywhere in ``value``."""
    found, todo = set(), [value]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if isinstance(node.get("format"), str):
                found.add(node["format"])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return found


def regex(pattern: str, probes: list[str]) -> str:
    """Convert one pattern and check that every string its grammar accepts fully matches under
    Python's ``re``. (Not the converse: where ECMAScript and Python read a class differently,
    ``\\w`` or ``\\s`` on non-ASCII text, the grammar takes the strings both accept.)"""
    try:
        grammar = Grammar.from_regex(pattern)
    except RegexError:
        return "refused"
    except GrammarError as exc:
        if exc.code in ("E108", "E110"):
            return f"too large {exc.code}"
        raise Inconsistent(f"the regex converter wrote GBNF that does not compile: {exc}") from None
    _same_rule_set(grammar, grammar.source, "regex converter")
    compiled = re.compile(pattern)
    for probe in probes:
        if grammar.matches(probe) and compiled.fullmatch(probe) is None:
            raise Inconsistent(f"the grammar accepts {probe!r}, which re does not fully match")
    return "converted"


def _same_rule_set(grammar: Grammar, text: str, who: str) -> None:
    """The rule set compiled from the rule table a converter handed over is the one its text
    compiles to."""
    again = Grammar.from_gbnf(text).ruleset
    ours = grammar.ruleset
    if (ours.rule_names, ours.rule_start, ours.refs, ours.token_edges, ours.final) != (
            again.rule_names, again.rule_start, again.refs, again.token_edges, again.final) or not (
            np.array_equal(ours.byte_class, again.byte_class) and np.array_equal(ours.move_rows, again.move_rows)
            and np.array_equal(ours.move_row, again.move_row)):
        raise Inconsistent(f"the {who}'s rule table and its GBNF text compile to different rule sets")


def _walk(grammar: Grammar, rng: random.Random, limit: int) -> bytes | None:
    """A text of ``grammar`` chosen byte by byte (closing bytes preferred, so JSON ends)."""
    state = grammar.initial_state()
    out = bytearray()
    while len(out) < limit:
        allowed = sorted(state.allowed_bytes())
        if state.is_accepting() and (not allowed or rng.random() < 0.2):
            return bytes(out)
        if not allowed:
            if state.advance_token_ref(lambda ref: True) is not None:
                return None  # only a token reference may come next: bytes cannot spell it
            raise Inconsistent(f"a dead end after {bytes(out)!r}: no byte allowed and not accepting")
        closing = [b for b in allowed if b in CLOSERS]
        byte = rng.choice(closing if closing and rng.random() < 0.5 else allowed)
        following = state.advance_byte(byte)
        if following is None:
            raise Inconsistent(f"byte {byte} was allowed after {bytes(out)!r} but not accepted")
        out.append(byte)
        state = following
        state.forced_bytes()
    return None


def _tokens(grammar: Grammar, rng: random.Random, steps: int) -> None:
    """Follow allowed tokens of a small vocabulary, checking the masks against acceptance."""
    matcher = compile_grammar(grammar, VOCABULARY).matcher()
    for _ in range(steps):
        allowed = [t for t in range(VOCABULARY.size) if matcher.allows(t)]
        if not allowed:
            return
        token = rng.choice(allowed)
        if not matcher.accept_token(token):
            raise Inconsistent(f"token {token} was allowed but not accepted")
        matcher.tokens_to_finish()


TARGETS = {"gbnf": gbnf, "schema": schema, "regex": regex}
EXPECTED_WARNINGS = (SchemaRelaxedWarning,)
