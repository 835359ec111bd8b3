"""Number and integer values of one alternative: bounds, ``multipleOf`` and exclusions.

Integer spellings get exact digit grammars; fractional spellings use the float-aware
thresholds of :mod:`.numbers`. ``multipleOf`` with an integral divisor is exact on integer
spellings (a remainder automaton); a fractional divisor is exact only over a bounded range
small enough to list (``jsonschema`` divides in floating point, so we ask it about each
candidate). Anything else is relaxed or refused.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any, Protocol

from structspec.jsonschema.builder import GrammarBuilder
from structspec.jsonschema.facets import Facet
from structspec.jsonschema.numbers import (
    DIGIT,
    FRAC_DIGITS,
    Bound,
    decimal_range,
    exponent,
    fraction_bounds,
    integer_bounds,
    integer_multiples,
    integer_range,
    non_integral,
    rounding_interval,
)
from structspec.jsonschema.resolve import Loc
from structspec.regex_automaton import (
    TooComplexError,
    dfa_from_regex,
    dfa_from_strings,
    difference,
    emit_dfa,
    intersect,
)
from structspec.regex_expr import Expr, Lit, MaybeExpr, Ref, alt, chars, opt, rep, seq

MAX_LISTED = 2000


class NumberHost(Protocol):
    builder: GrammarBuilder

    def relax(self, pointer: str, keyword: str, message: str) -> None: ...

    def is_valid(self, value: Any, loc: Loc) -> bool: ...

    def helper(self, name: str) -> Ref: ...

    def fresh(self, hint: str) -> str: ...

    def define(self, name: str, expr: Expr) -> None: ...


def number_expr(host: NumberHost, facets: list[Facet], types: frozenset[str], name: str) -> MaybeExpr:
    lower: list[Bound] = []
    upper: list[Bound] = []
    divisors: list[tuple[int | float, Facet]] = []
    for f in facets:
        kw = f.kw
        for key, target, exclusive in (
            ("minimum", lower, False),
            ("exclusiveMinimum", lower, True),
            ("maximum", upper, False),
            ("exclusiveMaximum", upper, True),
        ):
            value = kw.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                target.append((value, exclusive))
        value = kw.get("multipleOf")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            divisors.append((value, f))
    excluded = [
        v for f in facets for v in f.kw.get("~not-enum", ()) if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    if not (lower or upper or divisors or excluded):
        if "fraction" not in types:
            return host.helper("integer")
        if "integer" in types:
            return host.helper("number")
    whole = _integers(host, facets, lower, upper, divisors, excluded, name) if "integer" in types else None
    frac = _fractions(host, facets, types, lower, upper, divisors, excluded, name) if "fraction" in types else None
    return alt(whole, frac)


def _integers(
    host: NumberHost,
    facets: list[Facet],
    lower: list[Bound],
    upper: list[Bound],
    divisors: list[tuple[int | float, Facet]],
    excluded: list[int | float],
    name: str,
) -> MaybeExpr:
    low, high = integer_bounds(lower, upper)
    expr = integer_range(low, high)
    if expr is None:
        return None
    moduli = [int(d) for d, _ in divisors if float(d).is_integer()]
    fractional = [(d, f) for d, f in divisors if not float(d).is_integer()]
    if fractional:
        listed = _listed_integers(host, low, high, fractional)
        if listed is None:
            return None
        return emit_dfa(dfa_from_strings(listed), chars, host, f"{name}-int")
    wanted = [v for v in excluded if float(v).is_integer()]
    if not moduli and not wanted:
        return expr
    try:
        dfa = integer_multiples(expr, moduli) if moduli else dfa_from_regex(expr, search=False)
        if wanted:
            dfa = difference(dfa, dfa_from_strings(str(int(v)) for v in wanted))
    except TooComplexError as exc:
        host.relax(
            divisors[0][1].pointer("multipleOf") if divisors else facets[0].loc.pointer,
            "multipleOf",
            str(exc),
        )
        return expr
    return emit_dfa(dfa, chars, host, f"{name}-int")


def _listed_integers(
    host: NumberHost, low: int | None, high: int | None, divisors: list[tuple[int | float, Facet]]
) -> list[str] | None:
    facet = divisors[0][1]
    if low is None or high is None or high - low > MAX_LISTED:
        host.relax(
            facet.pointer("multipleOf"),
            "multipleOf",
            "fractional multipleOf over an unbounded or large integer range",
        )
        return None
    return [str(i) for i in range(low, high + 1) if all(host.is_valid(i, f.loc) for _, f in divisors)]


def _fractions(
    host: NumberHost,
    facets: list[Facet],
    types: frozenset[str],
    lower: list[Bound],
    upper: list[Bound],
    divisors: list[tuple[int | float, Facet]],
    excluded: list[int | float],
    name: str,
) -> MaybeExpr:
    """Spellings with a fraction part (and, when unbounded, an exponent)."""
    pointer = facets[0].loc.pointer
    if divisors:
        if all(float(d).is_integer() for d, _ in divisors):
            return None  # multiples of an integer are integers: spelled as integers
        return _listed_fractions(host, facets, lower, upper, divisors, name)
    bounds = fraction_bounds(lower, upper) if lower or upper else (None, None)
    if bounds is None:
        host.relax(pointer, "minimum", "bound beyond the range of doubles")
        return None
    if "integer" in types and not (lower or upper or excluded):
        return seq(integer_range(None, None), opt(seq(Lit("."), rep(DIGIT, 1, FRAC_DIGITS))), exponent())
    expr = decimal_range(*bounds)
    if expr is None:
        return None
    if "integer" in types and not excluded:
        return expr
    try:
        dfa = dfa_from_regex(expr, search=False)
        if "integer" not in types:
            dfa = intersect(dfa, dfa_from_regex(non_integral(), search=False))
        for value in excluded:
            around = rounding_interval(value)
            if around is not None:
                dfa = difference(dfa, dfa_from_regex(decimal_range(*around), search=False))
    except TooComplexError as exc:
        host.relax(pointer, "not", str(exc))
        return expr
    return emit_dfa(dfa, chars, host, f"{name}-frac")


def _listed_fractions(
    host: NumberHost,
    facets: list[Facet],
    lower: list[Bound],
    upper: list[Bound],
    divisors: list[tuple[int | float, Facet]],
    name: str,
) -> MaybeExpr:
    """Non-integer multiples of a divisor within bounds, listed and checked one by one."""
    facet = divisors[0][1]
    step = Fraction(Decimal(repr(float(divisors[0][0]))))
    if not lower or not upper:
        host.relax(facet.pointer("multipleOf"), "multipleOf", "multipleOf on unbounded numbers")
        return None
    low = max(Fraction(v) for v, _ in lower)
    high = min(Fraction(v) for v, _ in upper)
    first, last = math.ceil(low / step), math.floor(high / step)
    if last - first > MAX_LISTED:
        host.relax(facet.pointer("multipleOf"), "multipleOf", "too many multiples to list")
        return None
    spellings = []
    for k in range(first, last + 1):
        value = float(k * step)
        if value.is_integer():
            continue
        if all(host.is_valid(value, f.loc) for f in facets if f.positive):
            spellings.append(json.dumps(value))
    if not spellings:
        return None
    return emit_dfa(dfa_from_strings(spellings), chars, host, f"{name}-frac")
