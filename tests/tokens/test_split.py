"""The vocabulary split by a loop set (structspec.tokens.trie.loop_split) against its definition:
each token read unit by unit in Python, and the native builders refusing bad input."""

from __future__ import annotations

import codecs
import contextlib

import numpy as np
import pytest
from conftest import tokenizer_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structspec.tokens._trie import rest_rows, trie_nodes, unit_rows

from structspec import Vocabulary
from structspec.tokens import trie as token_tries
from structspec.tokens.arrays import byte_order


def _units(data: bytes, loops: list[bool], utf8: bool, steps: int) -> tuple[int | None, int]:
    """Where ``data``'s rest starts (None: all loop units) and the units before it, read the
    slow way: a byte of ``loops`` (a high byte only when all of them are), or with ``utf8`` a
    whole well-formed character or one cut by the end."""
    per_byte = all(loops[0x80:])
    i = units = 0
    while i < len(data):
        if units >= steps:
            return i, units
        b = data[i]
        if loops[b] and (b < 0x80 or per_byte):
            i, units = i + 1, units + 1
            continue
        if utf8 and not per_byte and b >= 0xC2:
            size = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            chunk = data[i : i + size]
            try:
                if len(chunk) == size:
                    chunk.decode("utf-8")
                    i, units = i + size, units + 1
                    continue
                codecs.getincrementaldecoder("utf-8")().decode(chunk, final=False)
                return None, units + 1
            except UnicodeDecodeError:
                pass
        return i, units
    return None, units


def _rests(split: token_tries.LoopSplit) -> dict[int, bytes]:
    """Token id -> the bytes its row of the rest trie spells."""
    r = split.rests
    prefix = [b""] * len(r.byte)
    spelled = {}
    for v in range(len(r.byte)):
        for c in range(r.child_lo[v], r.child_hi[v]):
            prefix[c] = prefix[v] + bytes([int(r.byte[c])])
        for row in range(r.row_lo[v], r.end_hi[v]):
            spelled[int(split.rest_ids[row])] = prefix[v]
    return spelled


def _check_split(vocab: Vocabulary, loops: list[bool], utf8: bool, steps: int) -> token_tries.LoopSplit:
    split = token_tries.loop_split(vocab, bytes(loops), utf8, steps)
    assert split is not None

    def taken(token: int, m: int) -> bool:  # among the tokens of at most m units
        return bool(m > 0 and split.unit_words[m - 1][token >> 5] >> (token & 31) & 1)

    assert split.unit_words.shape == (split.steps, (vocab.size + 31) // 32)
    looping = {i for i in range(vocab.size) if taken(i, split.steps)}
    rests = _rests(split)
    most = 0
    for token, data in enumerate(vocab.token_bytes):
        if not data:
            assert token not in looping and token not in rests
            continue
        at, units = _units(data, loops, utf8, steps)
        most = max(most, units)
        if at is None:
            assert token in looping and token not in rests, data
            counts = range(1, split.steps + 1)
            assert [taken(token, m) for m in counts] == [units <= m for m in counts], data
        else:
            assert token not in looping and rests.get(token) == bytes([units]) + data[at:], data
    assert split.steps == most
    assert split.rests.row_sets is None and split.rests.row_high is None  # never read: not computed
    return split


_TOKENS = st.lists(st.one_of(st.binary(min_size=1, max_size=6),
                             st.text(min_size=1, max_size=4).map(lambda t: t.encode("utf-8", "surrogatepass")),
                             st.sampled_from([b'"', b"\\", b'a"', b'"a', b"\xc3", b"\xe6\x97", b"\x00", b"\xff"])),
                   min_size=1, max_size=40)
_LOOPS = st.one_of(
    st.lists(st.booleans(), min_size=256, max_size=256),
    st.just([0x20 <= b < 0x80 and b not in b'"\\' for b in range(256)]),  # a JSON string's
    st.just([b != ord('"') for b in range(256)]),  # every high byte a unit of its own
)


@pytest.fixture
def split_everything(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(token_tries, "SPLIT_SHARE", 0)
    token_tries._SPLITS.clear()
    yield
    token_tries._SPLITS.clear()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=_TOKENS, loops=_LOOPS, utf8=st.booleans(), steps=st.integers(1, 5))
def test_loop_split_matches_its_definition(split_everything: None, tokens: list[bytes], loops: list[bool],
                                           utf8: bool, steps: int) -> None:
    _check_split(Vocabulary.from_token_bytes([*tokens, None]), loops, utf8, steps)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.one_of(st.binary(max_size=5), st.sampled_from([b"", b"\x00", b"a\x00", b"a", b"\xff"])),
                     max_size=30))
def test_byte_order_sorts_rows_as_byte_strings(rows: list[bytes]) -> None:
    """Rows (NUL bytes inside and at the end too) in byte order, a prefix first, ties in row order."""
    matrix = np.zeros((len(rows), max(map(len, rows), default=0)), np.uint8)
    for i, row in enumerate(rows):
        matrix[i, :len(row)] = list(row)
    order = byte_order(matrix, np.array(list(map(len, rows)), np.int32))
    assert order.tolist() == sorted(range(len(rows)), key=lambda i: (rows[i], i))


def test_loop_split_is_shared_and_refused_when_not_smaller(monkeypatch: pytest.MonkeyPatch) -> None:
    token_tries._SPLITS.clear()
    vocab = Vocabulary.from_token_bytes([b"ab", b"a", b'"', b'b"', b"\\n"])
    loops = bytes(b in b"ab" for b in range(256))
    split = token_tries.loop_split(vocab, loops, True)
    assert split is token_tries.loop_split(vocab, loops, True)  # cached per vocabulary and loop set
    monkeypatch.setattr(token_tries, "SPLIT_SHARE", 4)
    token_tries._SPLITS.clear()
    assert token_tries.loop_split(vocab, loops, True) is None  # 3 of 5 tokens have a rest
    with pytest.raises(ValueError, match="256 byte flags"):
        token_tries.loop_split(vocab, b"\x01", True)
    with pytest.raises(ValueError, match=r"1\.\.255 units"):
        token_tries.loop_split(vocab, loops, True, 0)
    token_tries._SPLITS.clear()


def test_loop_split_of_a_real_vocabulary_inside_a_string() -> None:
    full = Vocabulary.from_pretrained(str(tokenizer_dir("llama3")))
    loops = [0x20 <= b < 0x80 and b not in b'"\\' for b in range(256)]
    split = _check_split(full, loops, True, token_tries.SPLIT_STEPS)
    assert len(split.rest_ids) < len(full.text_ids) // 10  # the tokens with a quote, a backslash, a control byte


_MATRIX = st.tuples(st.integers(0, 5), st.integers(0, 4)).flatmap(
    lambda shape: st.tuples(st.lists(st.integers(0, 255), min_size=shape[0] * shape[1], max_size=shape[0] * shape[1])
                            .map(lambda v, s=shape: np.array(v, np.uint8).reshape(s)),
                            st.lists(st.integers(-2, 6), min_size=shape[0], max_size=shape[0])))


@settings(max_examples=200, deadline=None)
@given(matrix=_MATRIX, steps=st.integers(-1, 3), rows=st.lists(st.integers(-1, 6), max_size=4),
       offsets=st.lists(st.integers(-1, 6), max_size=4))
def test_native_builders_refuse_bad_input(matrix: tuple[np.ndarray, list[int]], steps: int, rows: list[int],
                                          offsets: list[int]) -> None:
    """Any matrix and lengths (unsorted rows too): a ValueError or arrays, never a crash."""
    m, lengths = matrix
    for call in (lambda: trie_nodes(m, lengths),
                 lambda: unit_rows(m, lengths, np.ones(256, np.uint8), True, steps),
                 lambda: rest_rows(m, lengths, rows, offsets[: len(rows)], [0] * len(rows))):
        with contextlib.suppress(ValueError):
            call()
