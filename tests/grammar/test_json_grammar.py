"""Differential and property tests of grammars/json.gbnf against Python's ``json``.

The oracle (``oracle_accepts``) says what strict RFC 8259 JSON with our whitespace bound is:

* the bytes must be valid UTF-8 (strict decoding, which also refuses encoded surrogates);
* ``json.loads`` must accept the text, except that NaN, Infinity and -Infinity, which
  Python accepts as an extension, are refused through ``parse_constant``;
* every run of whitespace between tokens holds at most ``WS_MAX`` characters.

Python also accepts escapes of lone surrogates such as ``"\\ud800"``. RFC 8259's grammar
(section 7) allows any ``\\uXXXX`` and section 8.2 only warns that such strings may be
handled unpredictably, so the grammar accepts them too and the oracle keeps Python's
verdict. ``json.loads`` of a ``str`` rejects a leading BOM and control characters inside
strings (``strict=True``), as RFC 8259 does for generated text.
"""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structspec import Grammar

JSON_GBNF = Path(__file__).resolve().parents[2] / "grammars" / "json.gbnf"
SOURCE = JSON_GBNF.read_text(encoding="utf-8")
GRAMMAR = Grammar.from_gbnf(SOURCE)
WS_MAX = int(re.search(r"^ws\s*::=\s*\[ \\t\\n\\r\]\{0,(\d+)\}", SOURCE, re.MULTILINE).group(1))
WHITESPACE = " \t\n\r"
FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def longest_whitespace_run(text: str) -> int:
    """The longest run of whitespace outside string literals (``text`` is valid JSON)."""
    longest = run = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char in WHITESPACE:
            run += 1
            longest = max(longest, run)
            continue
        run = 0
        in_string = char == '"'
    return longest


def oracle_accepts(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
        json.loads(text, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return longest_whitespace_run(text) <= WS_MAX


def verdict(data: bytes) -> bool:
    state = GRAMMAR.initial_state().advance(data)
    return state is not None and state.is_accepting()


# --- generated documents --------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


def depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@st.composite
def serialized(draw: st.DrawFn) -> bytes:
    """A JSON value in one of several styles whose whitespace stays within the bound."""
    value = draw(json_values)
    ensure_ascii = draw(st.booleans())
    style = draw(st.sampled_from(("default", "compact", "indent", "tab")))
    if style == "default":
        text = json.dumps(value, ensure_ascii=ensure_ascii)
    elif style == "compact":
        text = json.dumps(value, ensure_ascii=ensure_ascii, separators=(",", ":"))
    else:
        unit = "\t" if style == "tab" else " " * draw(st.integers(0, 4))
        unit_len = max(len(unit), 1)
        levels = max((WS_MAX - 1) // unit_len, 0)
        if depth(value) > levels:
            unit = ""
        text = json.dumps(value, ensure_ascii=ensure_ascii, indent=unit)
    pad = draw(st.text(alphabet=WHITESPACE, max_size=WS_MAX))
    return (pad + text + pad[::-1]).encode("utf-8")


INTERESTING = b' \t\n\r"\\/,:[]{}0123456789-+.eEtrufalsnuU\x00\x1f\x7f\x80\xbf\xc3\xa9\xed\xa0\xf0\xff'


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(serialized()))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(("insert", "delete", "replace", "truncate", "spaces")))
        at = draw(st.integers(0, len(data)))
        byte = draw(st.sampled_from(INTERESTING))
        if op == "insert":
            data[at:at] = bytes([byte])
        elif op == "delete":
            del data[at : at + 1]
        elif op == "replace":
            data[at : at + 1] = bytes([byte])
        elif op == "truncate":
            del data[at:]
        else:
            data[at:at] = b" " * draw(st.integers(1, WS_MAX + 2))
    return bytes(data)


@FAST
@given(serialized())
def test_serialized_values_are_accepted(data: bytes) -> None:
    assert oracle_accepts(data)
    assert GRAMMAR.matches(data)
    assert verdict(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutations_agree_with_oracle(data: bytes) -> None:
    expected = oracle_accepts(data)
    assert GRAMMAR.matches(data) == expected
    assert verdict(data) == expected


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "-Infinity",
        "[Infinity]",
        "01",
        "1.",
        ".1",
        "+1",
        '"\\ud800"',
        '"\\udc00\\ud800"',
        '"\\u0000"',
        '"\t"',
        '"\x1f"',
        '"\x7f"',
        "\ufeff[]",
        "1e400",
        "-0",
        '{"a":1,"a":2}',
        "[1,]",
        "\u00a0[]",
    ],
)
def test_edge_cases_agree_with_oracle(text: str) -> None:
    data = text.encode("utf-8")
    assert GRAMMAR.matches(data) == oracle_accepts(data)


@pytest.mark.parametrize(
    "template",
    [
        "{W}1",
        "1{W}",
        "[{W}]",
        "[{W}1]",
        "[1{W}]",
        "[1{W},2]",
        "[1,{W}2]",
        '{{{W}"a":1}}',
        '{{"a"{W}:1}}',
        '{{"a":{W}1}}',
        '{{"a":1{W}}}',
        "{{{W}}}",
    ],
)
def test_whitespace_bound_in_every_gap(template: str) -> None:
    for run in ("", " " * WS_MAX, "\r\n\t " * (WS_MAX // 4)):
        assert GRAMMAR.matches(template.format(W=run))
    assert not GRAMMAR.matches(template.format(W=" " * (WS_MAX + 1)))
    assert not GRAMMAR.matches(template.format(W="\n" * (WS_MAX + 1)))


# --- UTF-8 at the byte level --------------------------------------------------------------

MULTIBYTE = '["é", "日本語", "😀x", {"ключ": "\U0010ffff"}, "\u2028"]'.encode()


def test_utf8_split_at_every_offset() -> None:
    for doc in (MULTIBYTE, MULTIBYTE[:-1], MULTIBYTE[:-3] + b"]"):
        expected = GRAMMAR.matches(doc)
        start = GRAMMAR.initial_state()
        for cut in range(len(doc) + 1):
            head = start.advance(doc[:cut])
            tail = head.advance(doc[cut:]) if head is not None else None
            assert (tail is not None and tail.is_accepting()) == expected, cut


@FAST
@given(serialized(), st.lists(st.integers(0, 10**6), max_size=6))
def test_arbitrary_chunking_gives_the_same_verdict(data: bytes, cuts: list[int]) -> None:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    state = GRAMMAR.initial_state()
    for lo, hi in pairwise(points):
        state = state.advance(data[lo:hi])
        assert state is not None
    assert state.is_accepting()


@pytest.mark.parametrize(
    ("data", "fails_at"),
    [
        (b'"\xff"', 1),  # never a UTF-8 byte
        (b'"\x80"', 1),  # continuation byte without a lead
        (b'"\xc0\xaf"', 1),  # overlong two-byte lead
        (b'"\xe0\x80\xaf"', 2),  # overlong three-byte form
        (b'"\xed\xa0\x80"', 2),  # encoded surrogate U+D800
        (b'"\xf4\x90\x80\x80"', 2),  # above U+10FFFF
        (b'"\xf5\x80\x80\x80"', 1),  # lead byte beyond U+10FFFF
        (b'"\xc3"', 2),  # truncated: the quote is no continuation byte
        (b'"\xe6\x97"', 3),
        (b"\xc3\xa9", 0),  # non-ASCII outside a string
    ],
)
def test_invalid_utf8_rejected_at_the_right_byte(data: bytes, fails_at: int) -> None:
    assert not oracle_accepts(data)
    assert not GRAMMAR.matches(data)
    state = GRAMMAR.initial_state()
    for i, byte in enumerate(data):
        if i == fails_at:
            assert byte not in state.allowed_bytes()
            assert state.advance(bytes([byte])) is None
            return
        state = state.advance(bytes([byte]))
        assert state is not None, f"rejected early at byte {i}"


# --- persistence and state properties --------------------------------------------------------


def snapshot(state) -> tuple[frozenset[int], bool, bytes]:
    return state.allowed_bytes(), state.is_accepting(), state.forced_bytes()


@FAST
@given(serialized(), st.lists(st.sampled_from(INTERESTING), min_size=1, max_size=4))
def test_old_states_never_change(data: bytes, detours: list[int]) -> None:
    states = [GRAMMAR.initial_state()]
    for byte in data:
        states.append(states[-1].advance(bytes([byte])))
    before = [snapshot(s) for s in states]
    for state in states:  # branch off every kept state, then extend the branches further
        branch = state
        for byte in detours:
            branch = branch.advance(bytes([byte])) if branch is not None else None
            if branch is not None:
                branch.allowed_bytes()
                branch.forced_bytes()
    resumed = states[len(states) // 2].advance(data[len(states) // 2 :])
    assert resumed is not None and resumed.is_accepting()
    assert [snapshot(s) for s in states] == before


@FAST
@given(serialized())
def test_forced_bytes_prefix_every_continuation(data: bytes) -> None:
    state = GRAMMAR.initial_state()
    for i in range(len(data) + 1):
        forced = state.forced_bytes()
        assert data[i:].startswith(forced), (data[:i], forced)
        if forced:
            assert not state.is_accepting()
            assert state.allowed_bytes() == frozenset({forced[0]})
            after = state.advance(forced)
            assert after is not None
            assert after.is_accepting() or len(after.allowed_bytes()) != 1  # longest such string
        if i < len(data):
            state = state.advance(data[i : i + 1])


@pytest.mark.parametrize(
    ("prefix", "forced"),
    [
        (b"t", b"rue"),
        (b"nu", b"ll"),
        (b"fal", b"se"),
        (b'"\\u00', b""),
        (b"[", b""),
        (b"", b""),
        (b'{"a"', b""),
        (b'"\xf0\x9f', b""),
    ],
)
def test_forced_bytes_examples(prefix: bytes, forced: bytes) -> None:
    state = GRAMMAR.initial_state().advance(prefix)
    assert state is not None
    assert state.forced_bytes() == forced


@pytest.mark.parametrize("prefix", [b"", b"[", b'{"k', b'"\xe6', b"-", b"1.5e", b"[1,", b"tr"])
def test_allowed_bytes_match_single_byte_advance(prefix: bytes) -> None:
    state = GRAMMAR.initial_state().advance(prefix)
    assert state is not None
    allowed = {b for b in range(256) if state.advance(bytes([b])) is not None}
    assert state.allowed_bytes() == frozenset(allowed)


def test_deep_nesting() -> None:
    depth_ = 5000
    doc = b"[" * depth_ + b"]" * depth_
    assert GRAMMAR.matches(doc)
    assert not GRAMMAR.matches(doc[:-1])
    assert not GRAMMAR.matches(doc + b"]")
