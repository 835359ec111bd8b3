"""Token masks inside grounded strings are exact: every mask equals brute force along seeded
random walks (often through multibyte characters and escapes) and along the tokens of a
valid answer, over random source texts with quotes, backslashes, control characters,
multibyte and astral characters, for several real tokenizers."""

from __future__ import annotations

import json
import random

import pytest
from test_masks import _brute_force_text, _random_walk, _sub_vocab, _text_walk, _tokenizer

import structspec
from structspec import Grammar

PIECES = ["Zoë", "Müller", "INV-0417", '"quoted"', "\\", "\\n", "\n", "\t", "\x01", "€1,250.00", "😀", "中文",
          " ", " ", "-", "ab", "a", "b", "Ab", "é", "\u2028", "}", '":"']


def _source(seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(8, 30)))


def _schema() -> dict:
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "short": {"type": "string", "x-grounded": True, "minLength": 1, "maxLength": 4},
            "n": {"type": "integer"},
        },
        "required": ["name", "short", "n"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize("tokenizer", ["llama3", "gpt2", "llama2"])
@pytest.mark.parametrize("seed", range(3))
def test_grounded_masks_equal_brute_force(tokenizer: str, seed: int) -> None:
    source = _source(seed)
    rng = random.Random(seed)
    start = rng.randrange(len(source))
    answer = {"name": source[start : start + rng.randint(0, 12)], "short": source[start : start + 3] or "a", "n": 7}
    document = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
    hf, _ = _tokenizer(tokenizer)
    vocab, renumber = _sub_vocab(tokenizer, (source, document))
    grammar = Grammar.from_json_schema(_schema(), source=source, grounded=True)
    compiled = structspec.compile(grammar, vocab)
    for walk in range(2):
        _random_walk(compiled, seed * 10 + walk, 14, _brute_force_text)
    ids = [renumber[i] for i in hf.encode(document, add_special_tokens=False)]
    spelled = b"".join(vocab.token_bytes[i] or b"" for i in ids)
    if grammar.matches(document) and spelled == document.encode():  # SentencePiece adds a leading space
        _text_walk(compiled, ids, 24, _brute_force_text)
