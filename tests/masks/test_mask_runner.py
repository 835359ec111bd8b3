"""The batch machinery under token masks: the flat token trie and the lazily built run DFA.

The trie is checked node by node against the token byte strings it indexes (prefix ranges,
children, and the rest-of-token byte sets that let a run accept a whole subtree, including
the UTF-8 well-formedness bit). The run DFA's shortcuts (subtree acceptance through loop sets,
closed loops across several run states, whole multi-byte characters) normally start only where
hundreds of trie nodes share a run state; here that threshold is lowered to one so looping
grammars exercise them on real tokens, and masks must still equal brute force (random grammars
with every shortcut forced are in test_native.py).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structspec.masks._sweep import loop_words
from test_masks import _random_walk, _tokenizer

import structspec
from structspec import Grammar, Vocabulary
from structspec.masks import runner as mask_runner
from structspec.tokens.trie import BIG_SUBTREE, token_trie


@functools.cache
def _valid_prefixes() -> frozenset[bytes]:
    """Proper prefixes of the UTF-8 encodings of every non-ASCII scalar value."""
    prefixes = set()
    for code in range(0x80, 0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        encoded = chr(code).encode("utf-8")
        prefixes.update(encoded[:k] for k in range(1, len(encoded)))
    return frozenset(prefixes)


def _well_formed(rest: bytes) -> bool:
    """Whole well-formed characters, the last one possibly cut by the end."""
    i = 0
    while i < len(rest):
        lead = rest[i]
        size = 1 if lead < 0x80 else 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4
        if lead >= 0xF5 or 0x80 <= lead <= 0xC1:
            return False
        chunk = rest[i : i + size]
        if len(chunk) < size:
            return chunk in _valid_prefixes()
        try:
            if len(chunk.decode("utf-8")) != 1:
                return False
        except UnicodeDecodeError:
            return False
        i += size
    return True


def _expected_rest_words(rests: list[bytes]) -> tuple[int, int]:
    value = 0
    for rest in rests:
        for b in rest:
            value |= 1 << (b if b < 128 else 127)
        if not _well_formed(rest):
            value |= 1
    return value & ((1 << 64) - 1), value >> 64


def _check_trie(vocab: Vocabulary) -> None:
    trie = token_trie(vocab)
    rows = [vocab.token_bytes[i] for i in vocab.text_ids.tolist()]
    todo, seen = [(0, b"")], 0
    while todo:
        node, prefix = todo.pop()
        seen += 1
        lo, ends, hi = int(trie.row_lo[node]), int(trie.end_hi[node]), int(trie.row_hi[node])
        below = [r for r, spelled in enumerate(rows) if spelled.startswith(prefix)]
        assert below == list(range(lo, hi)), f"rows below {prefix!r}"
        assert [r for r in below if rows[r] == prefix] == list(range(lo, ends)), f"rows spelled {prefix!r}"
        rests = [rows[r][len(prefix) :] for r in range(ends, hi)]
        words = (int(trie.rest_sets[node, 0]), int(trie.rest_sets[node, 1]))
        assert words == _expected_rest_words(rests), f"rest set below {prefix!r}"
        assert trie.height[node] == max((len(rest) for rest in rests), default=0), f"height below {prefix!r}"
        if trie.below_index[node] >= 0:
            packed = trie.below_words[trie.below_index[node]]
            ids = np.flatnonzero(np.unpackbits(packed.view(np.uint8), bitorder="little"))
            assert ids.tolist() == sorted(vocab.text_ids[ends:hi].tolist()), f"ids below {prefix!r}"
        else:
            assert hi - ends < BIG_SUBTREE
        children = range(int(trie.child_lo[node]), int(trie.child_hi[node]))
        assert sorted({rest[0] for rest in rests}) == [int(trie.byte[c]) for c in children], f"children of {prefix!r}"
        todo.extend((c, prefix + bytes([int(trie.byte[c])])) for c in children)
    assert seen == len(trie.byte)


_PIECES = st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=40)
_UTF8_PIECES = st.lists(
    st.text(min_size=1, max_size=3).map(lambda t: t.encode("utf-8", "surrogatepass")), min_size=1, max_size=30
)


@settings(max_examples=80, deadline=None)
@given(raw=_PIECES, text=_UTF8_PIECES, cut=st.integers(0, 3))
def test_token_trie_matches_its_tokens(raw: list[bytes], text: list[bytes], cut: int) -> None:
    tokens = [*raw, *text, *(t[cut:] for t in text if t[cut:])]  # ... and pieces cut mid-character
    _check_trie(Vocabulary.from_token_bytes(tokens))


def test_token_trie_of_a_real_vocabulary_matches_its_tokens() -> None:
    _, full = _tokenizer("llama2")
    ids = [i for i, b in enumerate(full.token_bytes) if b][:3000:3]  # a spread of real tokens
    _check_trie(Vocabulary.from_token_bytes([full.token_bytes[i] for i in ids]))


@pytest.fixture
def probe_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probe loop sets at every run state, however few trie nodes sit in it."""
    monkeypatch.setattr(mask_runner, "PROBE_AT", 1)


LOOPING = {
    # strings whose contents run through several rules and states, with multi-byte characters
    "recursive-chars": 'root ::= "\\"" chars "\\"" ","?\nchars ::= "" | [^"\\\\] chars | "\\\\" ["n] chars',
    "two-state-loop": 'root ::= "<" ( [a-z] [0-9]? | [^\\x00-\\x7F] )* ">"',
    "utf8-only-loop": 'root ::= [^\\x00-\\x7F]* "."',
}


@pytest.mark.parametrize("name", sorted(LOOPING))
def test_looping_grammars_with_probing_are_exact_on_real_tokens(probe_everywhere: None, name: str) -> None:
    from test_masks import _sub_vocab

    vocab, _ = _sub_vocab("llama3")
    compiled = structspec.compile(Grammar.from_gbnf(LOOPING[name]), vocab)
    for seed in range(4):
        _random_walk(compiled, seed, 8)


SHARED_STRINGS = (
    'root ::= "{" "\\"a\\":" string ",\\"b\\":" ("[" string ("," string)* "]" | string) "}"\n'
    'string ::= "\\"" ([^"\\\\\\x00-\\x1F] | "\\\\" ["\\\\nt])* "\\""'
)


def test_shared_string_rule_is_exact_on_real_tokens() -> None:
    """A string rule called from several places stays a rule (not inlined): its local masks
    are shared by every caller, and masks equal brute force around and inside the strings."""
    from test_masks import _sub_vocab

    vocab, _ = _sub_vocab("llama3")
    compiled = structspec.compile(Grammar.from_gbnf(SHARED_STRINGS), vocab)
    for seed in range(6):
        _random_walk(compiled, seed, 12)


def test_callee_returning_inside_a_token_continues_in_its_caller() -> None:
    """Tokens that enter a shared rule, finish it and go on in the caller (``<'a',``): the
    nodes where the callee returns are run on below it."""
    import itertools

    gbnf = "root ::= \"<\" item \",\" item \">\"\nitem ::= \"'\" [a-b]* \"'\""
    tokens = [bytes(t) for n in range(1, 5) for t in itertools.product(b"<>,'ab", repeat=n)]
    compiled = structspec.compile(Grammar.from_gbnf(gbnf), Vocabulary.from_token_bytes(tokens))
    for seed in range(8):
        _random_walk(compiled, seed, 6)


@given(st.sets(st.integers(0, 255)) | st.sets(st.integers(0, 255)).map(lambda s: s | set(range(128, 256))),
       st.booleans())
def test_loop_words_follow_their_definition(loop_bytes: set[int], utf8_loops: bool) -> None:
    """Bits 1-126 are those bytes; bit 0 needs NUL and every byte >= 0x80; bit 127 needs DEL
    and either every byte >= 0x80 or whole multi-byte characters."""
    flags = np.zeros(256, dtype=bool)
    flags[sorted(loop_bytes)] = True
    low, high = loop_words(flags.view(np.uint8), utf8_loops)
    value = low | high << 64
    every_high = set(range(128, 256)) <= loop_bytes
    expected = {b for b in loop_bytes if 0 < b < 127}
    if 0 in loop_bytes and every_high:
        expected.add(0)
    if 127 in loop_bytes and (every_high or utf8_loops):
        expected.add(127)
    assert {b for b in range(128) if value >> b & 1} == expected


def test_mask_where_a_call_ends_inside_a_token_in_c_source_is_exact() -> None:
    """In the C grammar after ``int main(void) {\\n    int x = 1, *p = &x;\\n    return``, tokens
    such as ``("");\\n`` (a call with a string argument, ended and followed by a newline) are
    allowed; an earlier engine left 11 of them out of the mask."""
    import json
    from pathlib import Path

    import numpy as np

    root = Path(__file__).resolve().parents[2] / "grammars"
    tokenizer, vocab = _tokenizer("llama3")
    compiled = structspec.compile(Grammar.from_gbnf((root / "c.gbnf").read_text()), vocab)
    text = json.loads((root / "samples" / "c.json").read_text())["accept"][1]
    matcher = compiled.matcher()
    assert matcher.accept_tokens(tokenizer.encode(text, add_special_tokens=False)[:5]) == 5
    bits = np.unpackbits(matcher.mask_words().view(np.uint8), bitorder="little")[: vocab.size].astype(bool)
    for spelled in (b'("");\n', b"('/');\n", b'(",");\n', b'("");'):
        token = vocab.token_bytes.index(spelled)
        assert bits[token] == matcher.copy().accept_token(token) is True
