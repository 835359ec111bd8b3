"""Spans of a text as automata are exact: the suffix automaton accepts exactly the substrings
(checked against every substring and random words, hypothesis texts with quotes, backslashes,
control characters, multibyte and astral characters and lone surrogates); length bounds and
patterns narrow exactly; the byte spelling accepts exactly the canonical JSON spellings of the
spans (either hex case in ``\\u00XX``), nothing else, and stays deterministic."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.ir.automaton import accepts, dfa_from_regex
from structspec.ir.byte_automaton import ByteAutomaton
from structspec.ir.spans import SpanLimitError, intersect, restrict_lengths, spans, spell
from structspec.ir.suffix import SuffixAutomaton
from structspec.jsonschema.encoding import json_spelling
from structspec.regex.parse import parse_regex

ALPHABET = 'ab "\\\n\t\x01\x1féß€😀\ud800'
texts = st.text(alphabet=ALPHABET, max_size=24)
words = st.text(alphabet=ALPHABET, max_size=6)


def _substrings(text: str) -> set[str]:
    return {text[i:j] for i in range(len(text) + 1) for j in range(i, len(text) + 1)}


def _spellable(text: str) -> bool:
    return json_spelling("x") is not None and all(json_spelling(c) is not None for c in text)


def _json(text: str) -> bytes:
    return json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8")


def _candidates(text: str, rng: random.Random, count: int = 60) -> list[str]:
    out = list(_substrings(text))
    for _ in range(count):
        out.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 5))))
        if text:  # near-copies: a substring with one character changed
            i = rng.randrange(len(text))
            span = text[i : i + rng.randint(1, 6)]
            k = rng.randrange(len(span))
            out.append(span[:k] + rng.choice(ALPHABET) + span[k + 1 :])
    return out


@settings(max_examples=150, deadline=None)
@given(text=texts, seed=st.integers(0, 2**16))
def test_suffix_automaton_accepts_exactly_the_substrings(text: str, seed: int) -> None:
    sam = SuffixAutomaton(text)
    subs = _substrings(text)
    for word in _candidates(text, random.Random(seed)):
        assert sam.accepts(word) == (word in subs), (text, word)
    n = len(text)
    assert sam.n_states <= max(n + 1, 2 * n - 1)  # Blumer et al.'s bounds (for n >= 2 and n >= 3)
    assert sam.n_moves <= max(3, 3 * n - 4)
    sources = np.repeat(np.arange(sam.n_states), np.diff(sam.start))
    assert (sam.length[sam.dst] > sam.length[sources]).all()
    for q in range(sam.n_states):  # one move per state and character
        codes = sam.code[sam.start[q] : sam.start[q + 1]]
        assert len(set(codes.tolist())) == len(codes)


@settings(max_examples=150, deadline=None)
@given(text=texts, seed=st.integers(0, 2**16), low=st.integers(0, 4), high=st.none() | st.integers(0, 8))
def test_spans_and_length_bounds_are_exact(text: str, seed: int, low: int, high: int | None) -> None:
    subs = {w for w in _substrings(text) if _spellable(w)}
    base = spans(SuffixAutomaton(text), lambda c: json_spelling(c) is not None)
    bounded = restrict_lengths(base, low, high, 10**6)
    for word in _candidates(text, random.Random(seed)):
        assert base.accepts(word) == (word in subs)
        fits = low <= len(word) and (high is None or len(word) <= high)
        assert bounded.accepts(word) == (word in subs and fits), (text, word, low, high)
    assert bounded.empty == (not any(low <= len(w) and (high is None or len(w) <= high) for w in subs))


@settings(max_examples=100, deadline=None)
@given(text=texts, seed=st.integers(0, 2**16),
       pattern=st.sampled_from(["^a", "b$", "ab", "^[ab ]*$", "é|😀", '"', "^.{2,3}$", "\\\\"]))
def test_patterns_narrow_exactly(text: str, seed: int, pattern: str) -> None:
    base = spans(SuffixAutomaton(text), lambda c: json_spelling(c) is not None)
    dfa = dfa_from_regex(parse_regex(pattern), search=True)
    narrowed = intersect(base, dfa, 10**6)
    subs = {w for w in _substrings(text) if _spellable(w)}
    for word in _candidates(text, random.Random(seed)):
        expected = word in subs and accepts(dfa, word)
        assert narrowed.accepts(word) == expected, (text, word, pattern)


@settings(max_examples=150, deadline=None)
@given(text=texts, seed=st.integers(0, 2**16), high=st.none() | st.integers(0, 5))
def test_the_byte_spelling_accepts_exactly_the_json_spellings_of_spans(text: str, seed: int, high) -> None:
    rng = random.Random(seed)
    base = spans(SuffixAutomaton(text), lambda c: json_spelling(c) is not None)
    chars = restrict_lengths(base, 0, high, 10**6)
    automaton = spell(chars, json_spelling, "spans", 10**6)
    for word in _candidates(text, rng):
        if not _spellable(word):
            continue
        expected = chars.accepts(word)
        spelled = _json(word)
        assert automaton.accepts(spelled) == expected, (text, word, spelled)
        upper = re.sub(rb"\\u00([0-9a-f]{2})", lambda m: b"\\u00" + m.group(1).upper(), spelled)
        assert automaton.accepts(upper) == expected  # either case of a hex digit
        for other in (spelled.replace(b"\\n", b"\\u000a"), spelled.replace(b"a", b"\\u0061"),
                      spelled.replace(b"\\\\", b"\\/")):
            if other != spelled:  # another JSON spelling of the same text: not canonical, refused
                assert not automaton.accepts(other)
    for _ in range(40):  # raw bytes: accepted only where they are a canonical spelling of a span
        data = bytes(rng.choice(b'ab "\\nut01fF\xc3\xa9\x9f') for _ in range(rng.randint(0, 6)))
        try:
            decoded = json.loads(b'"' + data + b'"')
        except (json.JSONDecodeError, UnicodeDecodeError):
            assert not automaton.accepts(data)
            continue
        canonical = _json(decoded) in (data, data.replace(b"\\u001F", b"\\u001f"))
        assert automaton.accepts(data) == (canonical and chars.accepts(decoded)), data


def test_moves_must_be_deterministic_and_limits_are_kept() -> None:
    with pytest.raises(ValueError, match="deterministic"):
        ByteAutomaton.from_moves(np.array([0, 0]), np.array([97, 97]), np.array([1, 2]), np.ones(3, bool), "x")
    base = spans(SuffixAutomaton("abcdefghij" * 3), lambda c: True)
    with pytest.raises(SpanLimitError):
        restrict_lengths(base, 0, 5, 10)
    with pytest.raises(SpanLimitError):
        spell(base, json_spelling, "x", 10)
