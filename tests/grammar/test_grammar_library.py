"""The grammar library in grammars/: every grammar compiles and agrees with its samples.

Each ``grammars/<name>.gbnf`` has ``grammars/samples/<name>.json`` holding strings it must
accept and strings it must reject. Besides ``Grammar.matches`` we check the printed form
(``to_gbnf``) round-trips, that byte-by-byte ``advance`` agrees with ``matches``, and, as a
differential test, that the compiled engine agrees with a brute-force interpreter of the
parsed syntax tree on mutated samples.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structspec import Grammar
from structspec.grammar.gbnf.parser import parse_gbnf
from structspec.ir.expr import Alt, CharClass, Chars, Expr, Lit, Ref, Rep, Seq

GRAMMAR_DIR = Path(__file__).resolve().parents[2] / "grammars"
SAMPLE_DIR = GRAMMAR_DIR / "samples"
LIBRARY = (
    "arithmetic",
    "c",
    "chess",
    "csv",
    "english",
    "japanese",
    "json",
    "json_arr",
    "list",
    "sql_select",
)
MIN_SAMPLES = 8
STRANGERS = " \n\t\"'\\,.;:()[]{}0aZ-é日"


@functools.cache
def grammar_text(name: str) -> str:
    return (GRAMMAR_DIR / f"{name}.gbnf").read_text(encoding="utf-8")


@functools.cache
def grammar(name: str) -> Grammar:
    return Grammar.from_gbnf(grammar_text(name))


@functools.cache
def samples(name: str) -> dict[str, list[str]]:
    return json.loads((SAMPLE_DIR / f"{name}.json").read_text(encoding="utf-8"))


def all_samples(name: str) -> list[tuple[str, bool]]:
    data = samples(name)
    return [(s, True) for s in data["accept"]] + [(s, False) for s in data["reject"]]


def incremental_verdict(g: Grammar, data: bytes) -> bool:
    """Feed ``data`` one byte at a time, checking ``allowed_bytes`` before every step."""
    state = g.initial_state()
    for byte in data:
        allowed = byte in state.allowed_bytes()
        state = state.advance(bytes([byte]))
        assert (state is not None) == allowed, f"allowed_bytes disagrees with advance at {byte:#x}"
        if state is None:
            return False
    return state.is_accepting()


def test_library_is_complete() -> None:
    assert sorted(p.stem for p in GRAMMAR_DIR.glob("*.gbnf")) == sorted(LIBRARY)
    assert sorted(p.stem for p in SAMPLE_DIR.glob("*.json")) == sorted(LIBRARY)


@pytest.mark.parametrize("name", LIBRARY)
def test_grammar_starts_with_a_comment(name: str) -> None:
    assert grammar_text(name).startswith("# ")


@pytest.mark.parametrize("name", LIBRARY)
def test_samples_are_well_formed(name: str) -> None:
    data = samples(name)
    assert set(data) == {"accept", "reject"}
    for kind in ("accept", "reject"):
        assert len(data[kind]) >= MIN_SAMPLES, f"{name}: fewer than {MIN_SAMPLES} {kind} samples"
        assert all(isinstance(s, str) for s in data[kind])
    assert not set(data["accept"]) & set(data["reject"]), f"{name}: a sample is on both lists"


@pytest.mark.parametrize("name", LIBRARY)
def test_samples(name: str) -> None:
    g = grammar(name)
    wrong = [(s, want) for s, want in all_samples(name) if g.matches(s) != want]
    assert not wrong, f"{name}: wrong verdicts (sample, expected): {wrong}"


@pytest.mark.parametrize("name", LIBRARY)
def test_bytes_and_text_agree(name: str) -> None:
    g = grammar(name)
    for s, want in all_samples(name):
        assert g.matches(s.encode("utf-8")) == want, s


@pytest.mark.parametrize("name", LIBRARY)
def test_printed_grammar_round_trips(name: str) -> None:
    printed = grammar(name).to_gbnf()
    again = Grammar.from_gbnf(printed)
    for s, want in all_samples(name):
        assert again.matches(s) == want, f"{name}: to_gbnf() output disagrees on {s!r}"
    assert Grammar.from_gbnf(again.to_gbnf()).to_gbnf() == again.to_gbnf()


@pytest.mark.parametrize("name", LIBRARY)
def test_incremental_advance_agrees(name: str) -> None:
    g = grammar(name)
    for s, want in all_samples(name):
        assert incremental_verdict(g, s.encode("utf-8")) == want, s


@pytest.mark.parametrize("name", LIBRARY)
def test_whole_string_advance_agrees(name: str) -> None:
    g = grammar(name)
    for s, want in all_samples(name):
        state = g.initial_state().advance(s)
        assert (state is not None and state.is_accepting()) == want, s


# --- differential test against a brute-force interpreter of the syntax tree ---------------


class Reference:
    """Match a string by direct interpretation of the parsed rules (code point by code point).

    ``ends(node, i)`` is the set of positions where a match of ``node`` starting at ``i`` can
    end. Rule results are memoized per position; the library has no left recursion, so the
    recursion terminates.
    """

    def __init__(self, source: str) -> None:
        self.rules = {rule.name: rule.body for rule in parse_gbnf(source).rules}

    def matches(self, text: str) -> bool:
        memo: dict[tuple[str, int], frozenset[int]] = {}

        def rule(name: str, i: int) -> frozenset[int]:
            if (name, i) not in memo:
                memo[name, i] = frozenset(ends(self.rules[name], i))
            return memo[name, i]

        def ends(node: Expr, i: int) -> set[int]:
            if isinstance(node, Lit):
                return {i + len(node.text)} if text.startswith(node.text, i) else set()
            if isinstance(node, CharClass | Chars):
                if i >= len(text):
                    return set()
                if isinstance(node, Chars):
                    return {i + 1} if ord(text[i]) in node.charset else set()
                code = ord(text[i])
                return {i + 1} if any(a <= code <= b for a, b in node.code_points()) else set()
            if isinstance(node, Ref):
                return set(rule(node.name, i))
            if isinstance(node, Alt):
                return set().union(*(ends(alt, i) for alt in node.items))
            if isinstance(node, Seq):
                current = {i}
                for item in node.items:
                    current = set().union(*(ends(item, j) for j in current))
                return current
            assert isinstance(node, Rep)
            return repeat_ends(node, i)

        def repeat_ends(node: Rep, i: int) -> set[int]:
            current, reached, count = {i}, {i}, 0
            found = {i} if node.low == 0 else set()
            while current and (node.high is None or count < node.high):
                current = set().union(*(ends(node.item, j) for j in current))
                count += 1
                if count >= node.low:
                    found |= current
                    if node.high is None:
                        current -= reached  # past the minimum, revisiting a position adds nothing
                        reached |= current
            return found

        return len(text) in rule("root", 0)


@functools.cache
def reference(name: str) -> Reference:
    return Reference(grammar_text(name))


@functools.cache
def alphabet(name: str) -> str:
    """Characters worth mutating with: everything in the samples plus a few strangers."""
    chars = {c for s, _ in all_samples(name) for c in s}
    return "".join(sorted(chars | set(STRANGERS)))


@st.composite
def mutated_sample(draw: st.DrawFn, name: str) -> str:
    text = draw(st.sampled_from([s for s, _ in all_samples(name)]))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(("insert", "delete", "replace", "truncate")))
        at = draw(st.integers(0, len(text)))
        char = draw(st.sampled_from(alphabet(name)))
        if op == "insert":
            text = text[:at] + char + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + 1 :]
        elif op == "replace":
            text = text[:at] + char + text[at + 1 :]
        else:
            text = text[:at]
    return text


@pytest.mark.parametrize("name", LIBRARY)
def test_reference_agrees_on_samples(name: str) -> None:
    ref = reference(name)
    for s, want in all_samples(name):
        assert ref.matches(s) == want, f"{name}: sample list or reference wrong on {s!r}"


@pytest.mark.parametrize("name", LIBRARY)
def test_engine_agrees_with_reference_on_mutations(name: str) -> None:
    g, ref = grammar(name), reference(name)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(mutated_sample(name))
    def check(text: str) -> None:
        assert g.matches(text) == ref.matches(text), text

    check()
