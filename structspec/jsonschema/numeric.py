"""Number and integer values of one alternative: bounds, ``multipleOf`` and exclusions.

Integer spellings get exact digit grammars; fractional spellings use the float-aware
thresholds of :mod:`.numbers`. ``multipleOf`` with an integral divisor is exact on integer
spellings (a remainder automaton); a fractional divisor is exact only over a bounded range
small enough to list (``jsonschema`` divides in floating point, so we ask it about each
candidate); over a larger range it is narrowed to the integer multiples that provably pass the
floating-point test (:func:`float_safe_steps`). Anything else is relaxed or refused.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from decimal import Decimal
from fractions import Fraction
from typing import Any, Protocol

from structspec.budget import check
from structspec.ir.automaton import (
    DFA,
    TooComplexError,
    dfa_from_regex,
    dfa_from_strings,
    difference,
    emit_dfa,
    intersect,
)
from structspec.ir.expr import Expr, Lit, MaybeExpr, Ref, alt, chars, opt, rep, seq
from structspec.jsonschema.builder import GrammarBuilder
from structspec.jsonschema.facets import Facet
from structspec.jsonschema.numbers import (
    DIGIT,
    FRAC_DIGITS,
    INT_DIGITS,
    Bound,
    decimal_range,
    exact_binary_fractions,
    exponent,
    fraction_bounds,
    integer_bounds,
    integer_multiples,
    integer_range,
    non_integral,
    rounding_interval,
)
from structspec.jsonschema.resolve import Loc

MAX_LISTED = 2000
MAX_BINARY_BITS = 8  # divisors down to 1/256 of a unit: at most 255 fraction tails


class NumberHost(Protocol):
    builder: GrammarBuilder
    derived: dict[Hashable, Any]

    def meaning(self, loc: Loc) -> Hashable: ...

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
    if fractional and low is not None and high is not None and high - low <= MAX_LISTED:
        listed = [str(i) for i in range(low, high + 1) if all(host.is_valid(i, f.loc) for _, f in fractional)]
        return emit_dfa(dfa_from_strings(listed), chars, host, f"{name}-int")
    if fractional:
        steps = float_safe_steps([d for d, _ in fractional])
        if steps is None:
            host.relax(
                fractional[0][1].pointer("multipleOf"),
                "multipleOf",
                "fractional multipleOf too far from its double over an unbounded or large range",
            )
            return None
        limits = [bound for _, bound in steps if bound is not None]
        if limits:
            limit = min(limits)
            low, high = max(low, -limit) if low is not None else -limit, min(high, limit) if high is not None else limit
            expr = integer_range(low, high)
            if expr is None:
                return None
        moduli += [step for step, _ in steps]
    wanted = [v for v in excluded if float(v).is_integer()]
    if not moduli and not wanted:
        return expr
    key = ("integer multiples", low, high, tuple(moduli), tuple(wanted))
    dfa = host.derived.get(key)
    if dfa is None:  # the same integer schema under many properties: built once
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
        host.derived[key] = dfa
    return _emitted(host, dfa, f"{name}-int")


def _emitted(host: NumberHost, dfa: DFA, base: str) -> MaybeExpr:
    """``dfa`` (one kept in ``host.derived``) as GBNF, its rules defined once per conversion: the
    same number schema under many properties refers to one set of rules rather than a copy
    each."""
    key = ("emitted", id(dfa))
    if key not in host.derived:  # the entry holds the automaton, so its id is not reused
        host.derived[key] = (dfa, emit_dfa(dfa, chars, host, base))
    return host.derived[key][1]


def float_safe_steps(divisors: list[int | float]) -> list[tuple[int, int | None]] | None:
    """For fractional divisors (JSON numbers whose shortest decimal is ``p/q``, reduced), the
    pairs ``(p, limit)`` such that every multiple ``n`` of ``p`` with ``|n| <= limit`` (``None``:
    any spelled integer) passes ``jsonschema``'s floating-point test (``n / d`` is integral).

    ``n / d`` is the integer ``N = n*q/p`` times ``1 + e``, ``e`` the relative gap between the
    decimal and its double, plus the rounding of ``n`` itself above 2**53. With ``|e| < 2**-54``:
    ``|N| <= 2**53`` rounds to ``N``; a larger quotient rounds to a double of at least 2**52,
    and every such double is integral. So ``|n| <= 2**53`` always passes, and so does any
    larger ``n`` when ``d < 1`` (then ``|N| > |n|``) while the quotient stays finite.
    ``None`` when some double is too far from its decimal."""
    out: list[tuple[int, int | None]] = []
    for d in divisors:
        decimal = Fraction(Decimal(repr(float(d))))
        gap = decimal / Fraction(float(d)) - 1
        if abs(gap) >= Fraction(1, 2**54):
            return None
        p, q = decimal.numerator, decimal.denominator
        finite = 10 ** (INT_DIGITS + 1) / decimal < 10**300
        out.append((p, None if p < q and finite else 2**53))
    return out


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
        return _listed_fractions(host, facets, types, lower, upper, divisors, excluded, name)
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
    types: frozenset[str],
    lower: list[Bound],
    upper: list[Bound],
    divisors: list[tuple[int | float, Facet]],
    excluded: list[int | float],
    name: str,
) -> MaybeExpr:
    """Non-integer multiples of a divisor, listed and checked one by one with ``jsonschema``:
    all of those within the bounds when there are at most :data:`MAX_LISTED`; over a larger
    range, the :data:`MAX_LISTED` nearest zero together with the multiples that are exactly
    doubles anywhere in range (:func:`_binary_multiples`)."""
    step = Fraction(Decimal(repr(float(divisors[0][0]))))
    first = math.ceil(max(Fraction(v) for v, _ in lower) / step) if lower else None
    last = math.floor(min(Fraction(v) for v, _ in upper) / step) if upper else None
    window = _nearest_zero(first, last)
    binary = None
    if window != (first, last):
        if float_safe_steps([d for d, _ in divisors]) is None:
            facet = divisors[0][1]
            host.relax(facet.pointer("multipleOf"), "multipleOf", "too many multiples to list")
            return None
        binary = _binary_multiples(host, types, lower, upper, divisors, excluded, name)
    bits = _binary_bits(step) if binary is not None else None
    positive = [f for f in facets if f.positive]
    key = ("listed fractions", step, window, bits, tuple(host.meaning(f.loc) for f in positive))
    if key not in host.derived:  # the same number schema under many properties: listed once
        spellings = []
        for k in range(window[0], window[1] + 1):
            check()
            value = float(k * step)
            if value.is_integer() or (bits is not None and (Fraction(value) * 2**bits).denominator == 1):
                continue  # integers and exact binary multiples are spelled elsewhere
            if all(host.is_valid(value, f.loc) for f in positive):
                spellings.append(format(Decimal(repr(value)), "f"))  # 0.00001, never 1e-05
        host.derived[key] = dfa_from_strings(spellings) if spellings else None
    dfa = host.derived[key]
    listed = _emitted(host, dfa, f"{name}-frac") if dfa is not None else None
    return alt(listed, binary)


def _nearest_zero(first: int | None, last: int | None) -> tuple[int, int]:
    """The at most ``MAX_LISTED + 1`` consecutive integers of ``[first, last]`` closest to zero."""
    if first is not None and last is not None and last - first <= MAX_LISTED:
        return first, last
    half = MAX_LISTED // 2
    low, high = -half, half
    if first is not None and first > low:
        low, high = first, first + MAX_LISTED
    elif last is not None and last < high:
        low, high = last - MAX_LISTED, last
    return low, high


def _binary_bits(step: Fraction) -> int | None:
    """``a`` when ``step`` is ``1 / (2**a * 5**b)`` with ``a <= MAX_BINARY_BITS`` (a decimal's
    denominator is always ``2**a * 5**b``), else ``None``."""
    q = step.denominator
    bits = (q & -q).bit_length() - 1
    return bits if step.numerator == 1 and bits <= MAX_BINARY_BITS else None


def _binary_multiples(
    host: NumberHost,
    types: frozenset[str],
    lower: list[Bound],
    upper: list[Bound],
    divisors: list[tuple[int | float, Facet]],
    excluded: list[int | float],
    name: str,
) -> MaybeExpr:
    """Fraction spellings under one divisor ``1 / (2**a * 5**b)`` (``0.01``, ``0.05``, ``0.1``)
    over a range too large to list: the values ``m / 2**a`` (``x.25``, ``x.5``, ``x.75`` for
    ``0.01``; ``x.0`` too when integers are allowed), with ``|value| * 2**a <= 2**53``. Such a
    value is exactly a double and an integral multiple ``n`` of the divisor's decimal, so
    ``jsonschema``'s quotient is integral by the argument of :func:`float_safe_steps`: sound.
    Other divisors or extra exclusions: none (the listed and integer multiples remain)."""
    if len(divisors) != 1 or excluded:
        return None
    bits = _binary_bits(Fraction(Decimal(repr(float(divisors[0][0])))))
    if bits is None:
        return None
    bounds = fraction_bounds(lower, upper) if lower or upper else (None, None)
    if bounds is None:
        return None
    int_digits = len(str(2**53 >> bits)) - 1  # integer parts below 10**int_digits: |value| * 2**bits <= 2**53
    expr = exact_binary_fractions(bits, int_digits, integral="integer" in types)
    low, high = bounds
    if (low is not None and low > -(10**int_digits)) or (high is not None and high < 10**int_digits):
        key = ("binary multiples", bits, int_digits, "integer" in types, bounds)
        if key not in host.derived:  # the same bounds under many properties: built once
            try:
                within = dfa_from_regex(decimal_range(*bounds), search=False)
                host.derived[key] = intersect(dfa_from_regex(expr, search=False), within)
            except TooComplexError:
                host.derived[key] = None
        dfa = host.derived[key]
        return None if dfa is None else _emitted(host, dfa, f"{name}-frac")
    return expr

