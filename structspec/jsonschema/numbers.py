"""Exact digit grammars for JSON numbers under bounds and ``multipleOf``.

Spelling decisions (documented in docs/json-schema.md):

* integers are written without fraction or exponent, without leading zeros and without
  ``-0``; an unbounded side allows up to :data:`INT_DIGITS` digits (more when a bound has more);
* other numbers are ``int "." digits`` with 1 to :data:`FRAC_DIGITS` fraction digits, plus an
  optional exponent (at most :data:`EXP_DIGITS` digits) only when the number is unbounded;
* bounds on integer spellings are exact (Python compares ints with ints/floats exactly); bounds
  on fractional spellings follow what ``jsonschema`` does after ``json.loads`` rounds the text
  to a double: a spelling is accepted only if *every* decimal it denotes rounds to a double
  inside the bound (midpoint thresholds), so float rounding can never push it outside.
"""

from __future__ import annotations

import math
from fractions import Fraction

from structspec.ir.automaton import DFA, TooComplexError, dfa_from_regex, intersect, minimize
from structspec.ir.charset import CharSet
from structspec.ir.expr import EMPTY, Chars, Expr, Lit, MaybeExpr, alt, opt, rep, seq

INT_DIGITS = 20
FRAC_DIGITS = 20
EXP_DIGITS = 3
MAX_MODULUS = 2000

DIGIT = Chars(CharSet.of([(0x30, 0x39)]))


def digit_range(low: int, high: int) -> MaybeExpr:
    if low > high:
        return None
    return Lit(str(low)) if low == high else Chars(CharSet.of([(0x30 + low, 0x30 + high)]))


def _fixed(lo: str, hi: str) -> MaybeExpr:
    """Digit strings of the common length of ``lo`` and ``hi`` between them (inclusive).

    Flat whatever the length (a bound of 1e308 has 309 digits): the common prefix, then the
    strings from ``lo`` up within its first digit, the whole first digits between, and the
    strings up to ``hi`` within its first digit, each an alternation of prefix + digit + rest."""
    common = next((i for i, (a, b) in enumerate(zip(lo, hi, strict=True)) if a != b), len(lo))
    if common == len(lo):
        return Lit(lo)
    head, lo, hi = lo[:common], lo[common:], hi[common:]
    n = len(lo) - 1
    low_part = _within_first_digit(lo, up=True) if lo[1:] != "0" * n else None
    high_part = _within_first_digit(hi, up=False) if hi[1:] != "9" * n else None
    first = int(lo[0]) + (0 if low_part is None else 1)
    last = int(hi[0]) - (0 if high_part is None else 1)
    middle = seq(digit_range(first, last), rep(DIGIT, n, n)) if first <= last else None
    return seq(Lit(head), alt(low_part, middle, high_part))


def _within_first_digit(bound: str, up: bool) -> MaybeExpr:
    """Digit strings of ``bound``'s length and first digit that are >= ``bound`` (``up``) or
    <= it: ``bound`` itself, or a prefix of it followed by a larger (smaller) digit and any
    digits. Trailing 0s (9s) of ``bound`` are any digits."""
    loose = "0" if up else "9"
    kept = bound[0] + bound[1:].rstrip(loose)
    branches = [seq(Lit(kept), rep(DIGIT, len(bound) - len(kept), len(bound) - len(kept)))]
    for i in range(1, len(kept)):
        digit = int(bound[i])
        other = digit_range(digit + 1, 9) if up else digit_range(0, digit - 1)
        rest = len(bound) - i - 1
        branches.append(seq(Lit(bound[:i]), other, rep(DIGIT, rest, rest)))
    return alt(*branches)


def natural_range(low: int, high: int | None) -> MaybeExpr:
    """Canonical decimal spellings of the naturals in ``[low, high]`` (``None``: no limit)."""
    low = max(low, 0)
    if high is not None and high < low:
        return None
    out: list[MaybeExpr] = []
    top = len(str(high)) if high is not None else max(INT_DIGITS, len(str(low)))
    for width in range(len(str(low)), top + 1):
        lo = max(low, 10 ** (width - 1) if width > 1 else 0)
        hi = 10**width - 1 if high is None else min(high, 10**width - 1)
        if lo > hi:
            continue
        if high is None and lo <= max(10 ** (width - 1), 1):
            out.append(Lit("0") if lo == 0 else None)
            out.append(seq(digit_range(1, 9), rep(DIGIT, width - 1, top - 1)))
            break
        out.append(_fixed(str(lo).zfill(width), str(hi).zfill(width)))
    return alt(*out)


def integer_range(low: int | None, high: int | None) -> MaybeExpr:
    """Canonical spellings of the integers in ``[low, high]`` (``None``: unbounded side)."""
    negative = None
    if low is None or low < 0:
        top = None if low is None else -low
        bottom = 1 if high is None or high >= 0 else -high
        negative = seq(Lit("-"), natural_range(bottom, top))
    positive = None
    if high is None or high >= 0:
        positive = natural_range(0 if low is None else max(low, 0), high)
    return alt(negative, positive)


def _fraction_digits(lo: str | None, hi: str | None, i: int = 0) -> MaybeExpr:
    """Fraction digit strings (1..FRAC_DIGITS digits) whose zero-padded value lies between
    the FRAC_DIGITS-digit strings ``lo`` and ``hi`` (``None``: no bound on that side)."""
    remaining = FRAC_DIGITS - i
    if lo is not None and set(lo[i:]) <= {"0"}:
        lo = None  # zero padding already reaches the lower bound
    if hi is not None and set(hi[i:]) <= {"9"}:
        hi = None
    if lo is None and hi is not None and set(hi[i:]) <= {"0"}:
        return rep(Lit("0"), 1 if i == 0 else 0, remaining)
    if lo is None and hi is None:
        return rep(DIGIT, 1 if i == 0 else 0, remaining)
    can_end = i > 0 and (lo is None or set(lo[i:]) <= {"0"})
    if remaining == 0:
        return EMPTY
    lo_d = int(lo[i]) if lo is not None else 0
    hi_d = int(hi[i]) if hi is not None else 9
    branches: list[MaybeExpr] = [EMPTY if can_end else None]
    if lo is not None and hi is not None and lo_d == hi_d:
        branches.append(seq(Lit(str(lo_d)), _fraction_digits(lo, hi, i + 1)))
    else:
        if lo is not None:
            branches.append(seq(Lit(str(lo_d)), _fraction_digits(lo, None, i + 1)))
        if hi is not None:
            branches.append(seq(Lit(str(hi_d)), _fraction_digits(None, hi, i + 1)))
    first = lo_d + (1 if lo is not None else 0)
    last = hi_d - (1 if hi is not None else 0)
    if first <= last:
        branches.append(seq(digit_range(first, last), rep(DIGIT, 0, remaining - 1)))
    return alt(*branches)


def _split(value: Fraction) -> tuple[int, str]:
    whole = math.floor(value)
    frac = value - whole
    digits = frac * 10**FRAC_DIGITS
    assert digits.denominator == 1
    return whole, str(int(digits)).zfill(FRAC_DIGITS)


def _magnitudes(low: Fraction, high: Fraction | None) -> MaybeExpr:
    """``int "." frac`` spellings with value in ``[low, high]``; bounds have FRAC_DIGITS digits."""
    if high is not None and high < low:
        return None
    lo_int, lo_frac = _split(low)
    if high is None:
        return alt(
            seq(Lit(str(lo_int)), Lit("."), _fraction_digits(lo_frac, None)),
            seq(natural_range(lo_int + 1, None), Lit("."), _fraction_digits(None, None)),
        )
    hi_int, hi_frac = _split(high)
    if lo_int == hi_int:
        return seq(Lit(str(lo_int)), Lit("."), _fraction_digits(lo_frac, hi_frac))
    return alt(
        seq(Lit(str(lo_int)), Lit("."), _fraction_digits(lo_frac, None)),
        seq(natural_range(lo_int + 1, hi_int - 1), Lit("."), _fraction_digits(None, None)),
        seq(Lit(str(hi_int)), Lit("."), _fraction_digits(None, hi_frac)),
    )


def decimal_range(low: Fraction | None, high: Fraction | None) -> MaybeExpr:
    """Spellings ``-?int.frac`` whose exact value lies in ``[low, high]``; both bounds are
    multiples of ``10**-FRAC_DIGITS``. Negative zero is not produced."""
    step = Fraction(1, 10**FRAC_DIGITS)
    negative = None
    if low is None or low < 0:
        top = None if low is None else -low
        bottom = step if high is None or high >= 0 else max(-high, step)
        if top is None or bottom <= top:
            negative = seq(Lit("-"), _magnitudes(bottom, top))
    positive = None
    if high is None or high >= 0:
        positive = _magnitudes(Fraction(0) if low is None else max(low, Fraction(0)), high)
    return alt(negative, positive)


# -- bounds ---------------------------------------------------------------------------------------

Bound = tuple[int | float, bool]  # (value, exclusive)


def integer_bounds(lower: list[Bound], upper: list[Bound]) -> tuple[int | None, int | None]:
    """The tightest integer interval satisfying every bound exactly."""
    lo: int | None = None
    hi: int | None = None
    for value, exclusive in lower:
        v = Fraction(value)
        b = math.floor(v) + 1 if exclusive else math.ceil(v)
        lo = b if lo is None else max(lo, b)
    for value, exclusive in upper:
        v = Fraction(value)
        b = math.ceil(v) - 1 if exclusive else math.floor(v)
        hi = b if hi is None else min(hi, b)
    return lo, hi


def _to_float(value: int | float) -> float | None:
    try:
        return float(value)
    except OverflowError:
        return None


def _first_float(value: int | float, exclusive: bool, up: bool) -> float | None:
    """The first finite double (going ``up`` or down) that satisfies the bound ``value``."""
    f = _to_float(value)
    if f is None:
        return None
    direction = math.inf if up else -math.inf

    def ok(x: float) -> bool:
        if up:
            return x > value if exclusive else x >= value
        return x < value if exclusive else x <= value

    while not ok(f):
        f = math.nextafter(f, direction)
    return None if math.isinf(f) else f  # past the largest double: none satisfies it


def fraction_bounds(lower: list[Bound], upper: list[Bound]) -> tuple[Fraction | None, Fraction | None] | None:
    """Decimal thresholds (multiples of ``10**-FRAC_DIGITS``) such that a spelling between them
    rounds to a double satisfying all bounds; ``None`` when a bound is beyond doubles.

    An inclusive bound that is itself a double uses its shortest decimal (rounding is monotone,
    so nothing past it can round inside... or outside); other bounds use the midpoint between
    the first admissible double and its neighbour."""
    scale = 10**FRAC_DIGITS
    lo: Fraction | None = None
    hi: Fraction | None = None
    for bounds, up in ((lower, True), (upper, False)):
        for value, exclusive in bounds:
            t = _nice_threshold(value) if not exclusive else None
            if t is None:
                f = _first_float(value, exclusive, up=up)
                if f is None:
                    return None
                neighbour = math.nextafter(f, -math.inf if up else math.inf)
                mid = (Fraction(neighbour) + Fraction(f)) / 2
                step = math.floor(mid * scale) + 1 if up else math.ceil(mid * scale) - 1
                t = Fraction(step, scale)
            if up:
                lo = t if lo is None else max(lo, t)
            else:
                hi = t if hi is None else min(hi, t)
    return lo, hi


def rounding_interval(value: int | float) -> tuple[Fraction, Fraction] | None:
    """Decimals (multiples of ``10**-FRAC_DIGITS``) that may round to the double equal to
    ``value``, widened outward; ``None`` when no double equals ``value``."""
    f = _to_float(value)
    if f is None or math.isinf(f) or Fraction(f) != Fraction(value):
        return None
    scale = 10**FRAC_DIGITS
    below = (Fraction(math.nextafter(f, -math.inf)) + Fraction(f)) / 2
    above = (Fraction(math.nextafter(f, math.inf)) + Fraction(f)) / 2
    return Fraction(math.floor(below * scale), scale), Fraction(math.ceil(above * scale), scale)


def _nice_threshold(value: int | float) -> Fraction | None:
    """The short decimal of a bound that is exactly a double, if it fits FRAC_DIGITS."""
    f = _to_float(value)
    if f is None or math.isinf(f) or (Fraction(f) != Fraction(value) and not isinstance(value, float)):
        return None
    t = Fraction(repr(f))
    if (t * 10**FRAC_DIGITS).denominator != 1:
        return None
    return t


# -- whole number grammars ----------------------------------------------------------------------------


def exponent() -> Expr:
    return seq(Chars(CharSet.chars("eE")), opt(Chars(CharSet.chars("+-"))), rep(DIGIT, 1, EXP_DIGITS)) or EMPTY


def plain_integer() -> MaybeExpr:
    return integer_range(None, None)


def plain_number() -> MaybeExpr:
    """Any JSON number (RFC 8259), digit runs bounded as documented."""
    return seq(
        opt(Lit("-")),
        natural_range(0, None),
        opt(seq(Lit("."), rep(DIGIT, 1, FRAC_DIGITS))),
        opt(exponent()),
    )


def exact_binary_fractions(bits: int, int_digits: int, integral: bool) -> MaybeExpr:
    """Spellings ``-?int.frac`` of the values ``m / 2**bits`` whose integer part has at most
    ``int_digits`` digits: the fraction is the exact expansion of ``r / 2**bits`` (``r = 0``,
    written ``.0``, only when ``integral`` and never as ``-0.0``) followed by zeros up to FRAC_DIGITS digits. While
    ``|m| <= 2**53`` every such spelling is exactly a double, so parsing never rounds it."""
    tails = []
    for r in range(1, 2**bits):
        digits = str(r * 5**bits).zfill(bits).rstrip("0")
        tails.append(seq(Lit(digits), rep(Lit("0"), 0, FRAC_DIGITS - len(digits))))
    nonzero = seq(digit_range(1, 9), rep(DIGIT, 0, int_digits - 1))
    whole = alt(Lit("0"), nonzero)
    zeros = seq(Lit("."), rep(Lit("0"), 1, FRAC_DIGITS))
    fractional = seq(whole, Lit("."), alt(*tails))
    positive = alt(fractional, seq(whole, zeros) if integral else None)
    negative = seq(Lit("-"), alt(fractional, seq(nonzero, zeros) if integral else None))  # never -0.0
    return alt(negative, positive)


def non_integral() -> MaybeExpr:
    """Numbers whose double is surely not integral: at most 15 significant digits (so the
    spelling round-trips) and a non-zero last fraction digit."""
    return seq(
        opt(Lit("-")),
        natural_range(0, 10**7 - 1),
        Lit("."),
        rep(DIGIT, 0, 7),
        digit_range(1, 9),
    )


def multiples_dfa(modulus: int) -> DFA:
    """Optionally signed digit strings denoting multiples of ``modulus``."""
    minus = CharSet.chars("-")
    n = modulus
    edges: list[tuple[tuple[CharSet, int], ...]] = []
    # state 0: start, states 1..n: remainder r+1
    start = [(minus, n + 1)]
    for d in range(10):
        start.append((CharSet.single(0x30 + d), 1 + d % n))
    edges.append(tuple(_merge(start)))
    for r in range(n):
        row = [(CharSet.single(0x30 + d), 1 + (r * 10 + d) % n) for d in range(10)]
        edges.append(tuple(_merge(row)))
    edges.append(tuple(_merge([(CharSet.single(0x30 + d), 1 + d % n) for d in range(10)])))
    accept = (False, True, *[False] * n)
    return minimize(DFA(tuple(edges), accept))


def _merge(edges: list[tuple[CharSet, int]]) -> list[tuple[CharSet, int]]:
    by_target: dict[int, CharSet] = {}
    for cs, t in edges:
        by_target[t] = by_target[t] | cs if t in by_target else cs
    return [(cs, t) for t, cs in by_target.items()]


def integer_multiples(expr: Expr, moduli: list[int]) -> DFA:
    """The integers spelled by ``expr`` that are multiples of every modulus (at most
    :data:`MAX_MODULUS` each: the remainder automaton has one state per remainder)."""
    big = [m for m in moduli if m > MAX_MODULUS]
    if big:
        raise TooComplexError(f"multiples of {big[0]} need more than {MAX_MODULUS} automaton states")
    dfa = dfa_from_regex(expr, search=False)
    for m in moduli:
        if m != 1:
            dfa = intersect(dfa, multiples_dfa(m))
    return dfa
