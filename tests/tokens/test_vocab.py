"""Vocabulary: token bytes of real tokenizers, checked against the tokenizers' own decoders.

Every tokenizer in the shared assets is read; what each token id spells is compared with
what the tokenizer decodes, on sample text and on tokens that are bare UTF-8 fragments.
"""

from __future__ import annotations

import functools
import pickle
from typing import Any

import numpy as np
import pytest
from conftest import assets_dir, tokenizer_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from structspec.tokens.vocabulary import Vocabulary

TOKENIZERS = ("gpt2", "llama2", "llama3", "mistral-7b-v0.1", "phi-3-mini", "qwen2.5", "smollm")
BYTE_LEVEL = ("gpt2", "llama3", "qwen2.5", "smollm")
EOS = {
    "gpt2": {50256},
    "llama2": {2},
    "llama3": {128001, 128009},
    "mistral-7b-v0.1": {2},
    "phi-3-mini": {32000, 32007},
    "qwen2.5": {151643, 151645},
    "smollm": {0, 2},
}
SAMPLES = (
    "Hello, world!",
    "  leading spaces and trailing   ",
    '{"name": "Ada", "tags": ["x", "y"], "n": -12.5e3, "ok": true, "none": null}',
    "line one\nline two\r\n\ttabbed\n\n\n",
    "naïve café, Straße, ñandú, Ελληνικά, русский",
    "日本語のテキストと中文字符，한국어",
    "emoji 🎉🚀👩‍👩‍👧 and flags 🇫🇷",
    "math ∑ x² ≤ ∞ — “quotes” …",
    "def f(x):\n    return x ** 2  # comment",
    "1234567890 3.14159 0xDEADBEEF",
    "<b>markup</b> &amp; <|not special|>",
    "e\u0301 decomposed accent",
)
# SmolLM's byte-level BPE lacks these bytes altogether (its tokenizer drops them).
SMOLLM_MISSING_BYTES = {
    0x04,
    0x06,
    0x13,
    0x14,
    0x16,
    0x1D,
    0xC0,
    0xC1,
    0xF1,
    0xF2,
    *range(0xF5, 256),
}
# Prefixes and suffixes that can make a UTF-8 fragment whole.
PREFIXES = (b"", b"\xc2", b"\xe1", b"\xf1")
SUFFIXES = (b"", b"\x80", b"\xa0", b"\x90", b"\x80\x80", b"\xa0\x80", b"\x90\x80", b"\x80\x80\x80")


@functools.cache
def _loaded(name: str) -> tuple[Any, Vocabulary]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(name))
    return tokenizer, Vocabulary.from_tokenizer(tokenizer)


def _decode_after_anchor(tokenizer: Any, ids: list[int]) -> str:
    """What ``ids`` decode to in the middle of text: behind a ``!`` token, so that no
    start-of-text rule (SentencePiece strips one leading space) applies to them."""
    anchor = tokenizer.convert_tokens_to_ids("!")
    text = tokenizer.decode([anchor, *ids], clean_up_tokenization_spaces=False)
    assert text.startswith("!")
    return text[1:]


def _spelled(vocab: Vocabulary, ids: list[int]) -> bytes:
    parts = [vocab.token_bytes[i] for i in ids]
    assert None not in parts, ids
    return b"".join(parts)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", TOKENIZERS)
def test_encoded_samples_spell_what_the_tokenizer_decodes(name: str) -> None:
    tokenizer, vocab = _loaded(name)
    for sample in SAMPLES:
        ids = tokenizer.encode(sample, add_special_tokens=False)
        decoded = _decode_after_anchor(tokenizer, ids)
        assert _spelled(vocab, ids) == decoded.encode("utf-8"), (name, sample)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_utf8_fragment_tokens_decode_correctly(name: str) -> None:
    tokenizer, vocab = _loaded(name)
    single = {b[0]: i for i, b in reversed(list(enumerate(vocab.token_bytes))) if b and len(b) == 1}
    missing = set(range(256)) - single.keys()
    assert missing == (SMOLLM_MISSING_BYTES if name == "smollm" else set())
    fragments = [i for i in vocab.text_ids.tolist() if not _is_utf8(vocab.token_bytes[i])]
    high_only = [i for i in fragments if min(vocab.token_bytes[i]) >= 0x80]  # type: ignore[type-var]
    assert len(high_only) >= 128
    if name in BYTE_LEVEL:
        assert any(len(vocab.token_bytes[i]) > 1 for i in high_only)  # type: ignore[arg-type]
    checked = 0
    for token_id in fragments[:: max(1, len(fragments) // 300)]:
        whole = _completion(vocab.token_bytes[token_id])  # type: ignore[arg-type]
        if whole is None or missing.intersection(whole[0] + whole[1]):
            continue
        prefix, suffix = whole
        ids = [single[b] for b in prefix] + [token_id] + [single[b] for b in suffix]
        expected = _spelled(vocab, ids).decode("utf-8")
        assert _decode_after_anchor(tokenizer, ids) == expected, (name, token_id)
        checked += 1
    assert checked >= 100


def _is_utf8(data: bytes | None) -> bool:
    try:
        data.decode("utf-8")  # type: ignore[union-attr]
    except UnicodeDecodeError:
        return False
    return True


def _completion(fragment: bytes) -> tuple[bytes, bytes] | None:
    for prefix in PREFIXES:
        for suffix in SUFFIXES:
            if _is_utf8(prefix + fragment + suffix):
                return prefix, suffix
    return None


@pytest.mark.parametrize("name", TOKENIZERS)
def test_special_and_added_tokens(name: str) -> None:
    tokenizer, vocab = _loaded(name)
    added = tokenizer.backend_tokenizer.get_added_tokens_decoder()
    assert added
    for token_id, token in added.items():
        assert vocab.special_tokens[token.content] == token_id
        if token.special or token_id in tokenizer.all_special_ids:
            assert vocab.token_bytes[token_id] is None, token.content
        else:
            assert vocab.token_bytes[token_id] == token.content.encode("utf-8")
    for token_id in tokenizer.all_special_ids:
        assert vocab.token_bytes[token_id] is None


def test_special_tokens_of_known_models() -> None:
    expectations = {
        "llama3": {"<|eot_id|>": 128009, "<|begin_of_text|>": 128000},
        "phi-3-mini": {"<|assistant|>": 32001, "<|end|>": 32007, "<|user|>": 32010},
        "smollm": {"[PAD]": 49152, "<|im_start|>": 1},
        "llama2": {"<s>": 1, "</s>": 2, "<unk>": 0},
    }
    for name, specials in expectations.items():
        _, vocab = _loaded(name)
        for text, token_id in specials.items():
            assert vocab.special_tokens[text] == token_id
            assert vocab.token_bytes[token_id] is None
    _, qwen = _loaded("qwen2.5")  # non-special added tokens keep their text
    assert qwen.token_bytes[qwen.special_tokens["<tool_call>"]] == b"<tool_call>"
    _, phi = _loaded("phi-3-mini")
    assert phi.token_bytes[2] == b"</s>"  # non-special there, and not an end of sequence


@pytest.mark.parametrize("name", TOKENIZERS)
def test_end_of_sequence_ids(name: str) -> None:
    _, vocab = _loaded(name)
    assert vocab.eos_ids == EOS[name]
    assert all(vocab.token_bytes[i] is None for i in vocab.eos_ids)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_trie_arrays_are_consistent(name: str) -> None:
    _, vocab = _loaded(name)
    expected_ids = [i for i, b in enumerate(vocab.token_bytes) if b]
    assert sorted(vocab.text_ids.tolist()) == expected_ids
    rows = [vocab.token_bytes[i] for i in vocab.text_ids.tolist()]
    keys = [(b, i) for b, i in zip(rows, vocab.text_ids.tolist(), strict=True)]
    assert keys == sorted(keys)
    assert vocab.lengths.tolist() == [len(b) for b in rows]  # type: ignore[arg-type]
    matrix = vocab.byte_matrix
    assert matrix.shape == (len(rows), max(map(len, rows)))  # type: ignore[arg-type]
    assert b"".join(rows) == matrix[np.arange(matrix.shape[1]) < vocab.lengths[:, None]].tobytes()
    assert not matrix[np.arange(matrix.shape[1]) >= vocab.lengths[:, None]].any()
    for array, dtype in (
        (vocab.text_ids, np.int32),
        (vocab.lengths, np.int32),
    ):
        assert array.dtype == dtype and not array.flags.writeable
    assert vocab.byte_matrix.dtype == np.uint8


def test_vocab_size_pads_and_trims() -> None:
    tokenizer, vocab = _loaded("llama2")
    wide = Vocabulary.from_tokenizer(tokenizer, vocab_size=32064)
    assert wide.size == len(wide.token_bytes) == 32064
    assert wide.token_bytes[:32000] == vocab.token_bytes
    assert set(wide.token_bytes[32000:]) == {None}
    assert wide.text_ids.tolist() == vocab.text_ids.tolist() and wide.eos_ids == vocab.eos_ids
    assert wide != vocab
    with pytest.raises(ValueError, match="would drop text token 31999"):
        Vocabulary.from_tokenizer(tokenizer, vocab_size=31999)
    smollm, _ = _loaded("smollm")  # [PAD] was added beyond the model's 49,152 embeddings
    trimmed = Vocabulary.from_tokenizer(smollm, vocab_size=49152)
    assert trimmed.size == 49152 and "[PAD]" not in trimmed.special_tokens


def test_from_tokenizer_is_remembered_and_accepts_raw_tokenizers() -> None:
    from tokenizers import Tokenizer

    tokenizer, vocab = _loaded("gpt2")
    assert Vocabulary.from_tokenizer(tokenizer) is vocab
    raw = Tokenizer.from_file(str(tokenizer_dir("gpt2") / "tokenizer.json"))
    assert Vocabulary.from_tokenizer(raw) == vocab


def test_from_pretrained_reads_generation_config() -> None:
    folder = assets_dir() / "models" / "stories260K"
    if not (folder / "generation_config.json").is_file():
        pytest.skip(f"no model folder at {folder}")
    vocab = Vocabulary.from_pretrained(str(folder))
    assert 2 in vocab.eos_ids and vocab.token_bytes[2] is None
    _, llama2 = _loaded("llama2")
    assert Vocabulary.from_pretrained(str(tokenizer_dir("llama2"))) == llama2


@pytest.mark.parametrize("name", TOKENIZERS)
def test_encode_bytes_spells_samples_exactly(name: str) -> None:
    _, vocab = _loaded(name)
    for sample in SAMPLES:
        data = sample.encode("utf-8")
        assert _spelled(vocab, vocab.encode_bytes(data)) == data


@pytest.mark.parametrize("name", TOKENIZERS)
def test_encode_bytes_is_the_tokenizers_own_encoding(name: str) -> None:
    """Where the tokenizer spells a text exactly, encode_bytes returns its tokens."""
    tokenizer, vocab = _loaded(name)
    for sample in SAMPLES[:10]:
        ids = tokenizer.encode(sample, add_special_tokens=False)
        spelled = _spelled(vocab, ids)
        if spelled.strip() == sample.encode("utf-8").strip():
            assert vocab.encode_bytes(spelled) == ids, (name, sample)


def test_encode_bytes_continues_without_sentencepiece_prefix() -> None:
    tokenizer, vocab = _loaded("llama2")
    ids = vocab.encode_bytes(b"Hello")
    assert _spelled(vocab, ids) == b"Hello"
    assert ids == [tokenizer.convert_tokens_to_ids("Hello")]


def test_encode_bytes_names_a_byte_no_token_spells() -> None:
    _, vocab = _loaded("smollm")
    with pytest.raises(ValueError, match="byte 0x04 at offset 1 is spelled by no token"):
        vocab.encode_bytes(b"a\x04b")


def test_encode_bytes_spells_special_token_text_with_text_tokens() -> None:
    _, vocab = _loaded("llama3")
    ids = vocab.encode_bytes(b"<|eot_id|>")
    assert 128009 not in ids and _spelled(vocab, ids) == b"<|eot_id|>"


@pytest.mark.parametrize("name", ["llama3", "llama2", "qwen2.5"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(
        st.binary(max_size=40),
        st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.lists(st.sampled_from([b"\xf0\x9f", b"\x80", b'{"a": ', b" ", b"\xe6\x97\xa5"])).map(
            b"".join
        ),
    )
)
def test_encode_bytes_round_trips_any_bytes(name: str, data: bytes) -> None:
    _, vocab = _loaded(name)
    assert _spelled(vocab, vocab.encode_bytes(data)) == data


def test_toy_vocabulary() -> None:
    vocab = Vocabulary.from_token_bytes(
        [b"a", b"b", b"ab", None, b"abc", b"", b"a"], eos_ids=[3], special_tokens={"<eos>": 3}
    )
    assert vocab.size == 7 and vocab.eos_ids == {3}
    assert vocab.text_ids.tolist() == [0, 6, 2, 4, 1]
    assert vocab.byte_matrix.tolist() == [
        [97, 0, 0],
        [97, 0, 0],
        [97, 98, 0],
        [97, 98, 99],
        [98, 0, 0],
    ]
    assert vocab.encode_bytes(b"abcab") == [4, 2]
    assert vocab.encode_bytes(b"") == []
    with pytest.raises(ValueError, match=r"byte 0x7a at offset 2"):
        vocab.encode_bytes(b"abz")
    with pytest.raises(AttributeError, match="immutable"):
        vocab.size = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        vocab.special_tokens["x"] = 1  # type: ignore[index]
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy == vocab and hash(copy) == hash(vocab)
    assert copy.encode_bytes(b"abcab") == [4, 2]


def test_empty_toy_vocabulary() -> None:
    vocab = Vocabulary.from_token_bytes([None, None], eos_ids=[0])
    assert vocab.text_ids.shape == (0,) and vocab.byte_matrix.shape == (0, 0)
    assert vocab.encode_bytes(b"") == []


def test_bad_input_is_reported_clearly() -> None:
    with pytest.raises(TypeError, match=r"token_bytes\[1\] must be bytes or None, got str"):
        Vocabulary.from_token_bytes([b"a", "b"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="end-of-sequence id 0 spells b'a'"):
        Vocabulary.from_token_bytes([b"a"], eos_ids=[0])
    with pytest.raises(ValueError, match="end-of-sequence id 5 is not an id below"):
        Vocabulary.from_token_bytes([b"a"], eos_ids=[5])
    with pytest.raises(ValueError, match="special token '<x>' 9 is not an id below"):
        Vocabulary.from_token_bytes([None], special_tokens={"<x>": 9})
    with pytest.raises(TypeError, match="encode_bytes takes bytes, got str"):
        Vocabulary.from_token_bytes([b"a"]).encode_bytes("a")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a fast Hugging Face tokenizer"):
        Vocabulary.from_tokenizer(object())


def test_unsupported_tokenizer_kind_is_named() -> None:
    from tokenizers import Tokenizer, decoders, models

    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    wordpiece.decoder = decoders.WordPiece()
    with pytest.raises(ValueError, match=r"unsupported tokenizer: its decoder \(WordPiece\)"):
        Vocabulary.from_tokenizer(wordpiece)


def test_the_vocabulary_cache_does_not_keep_its_tokenizer() -> None:
    """Vocabularies are remembered per tokenizer object; the vocabulary must not refer back to
    the tokenizer, or no entry would ever be freed."""
    import gc
    import weakref

    from transformers import AutoTokenizer

    from structspec.tokens import vocabulary

    if assets_dir() is None:
        pytest.skip("shared assets not found")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir("gpt2"))
    vocab = Vocabulary.from_tokenizer(tokenizer)
    assert Vocabulary.from_tokenizer(tokenizer) is vocab
    held = len(vocabulary._CACHE)
    gone = weakref.ref(tokenizer)
    del tokenizer
    gc.collect()
    assert gone() is None
    assert len(vocabulary._CACHE) == held - 1  # the entry went with it
    assert vocab.size == 50257
