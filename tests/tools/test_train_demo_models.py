"""The training tool's data shaping: copy drills, loss ranges and the copy warm-up."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
import torch
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(REPO / "tools"))

import train_demo_models as tool

END, MARKER = 1, [7, 8]
VOCAB = range(5, 60)


def _prompt(rng: random.Random) -> list[int]:
    head = [rng.choice(range(10, 60)) for _ in range(rng.randint(0, 6))]
    text = [rng.choice(range(10, 60)) for _ in range(rng.randint(6, 30))]
    return head + MARKER + text + [END, 3]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_copy_drill_spans_are_copied_from_the_source(seed):
    rng = random.Random(seed)
    data = []
    for _ in range(4):
        prompt, answer = _prompt(rng), [rng.choice(VOCAB) for _ in range(5)] + [END]
        data.append((prompt + answer, [(len(prompt), len(prompt) + len(answer))]))
    prompts = [ids[: ranges[0][0]] for ids, ranges in data]
    for seq, ranges in tool.copy_drills(data, 12, MARKER, END, VOCAB, rng):
        *spans, (end_start, end_stop) = ranges
        assert end_stop == len(seq) and seq[end_start] == END and spans
        source = seq[: spans[0][0] - 2]
        if source in prompts:  # spans come from the text between the marker and its end token
            first, stop = source.index(MARKER[1]) + 1, source.index(END)
        else:  # a random source, drawn from the vocabulary
            assert 24 <= len(source) <= 120 and set(source) <= set(VOCAB)
            first, stop = 0, len(source)
        for start, stop_span in spans:
            cue, span = seq[start - 2 : start], seq[start:stop_span]
            windows = [source[i - 2 : i + len(span)] for i in range(first + 2, stop - len(span) + 1)]
            assert 1 <= len(span) <= 12 and cue + span in windows


def test_collate_marks_exactly_the_positions_that_predict_loss_tokens():
    data = [([5, 6, 7, 8, 9, 10], [(2, 4), (5, 6)]), ([5, 6, 7], [(1, 3)])]
    ids, attn, target = tool.collate(data, [0, 1], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9, 10], [5, 6, 7, 0, 0, 0]]
    assert attn.tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]]
    predicted = [[ids[r, c + 1].item() for c in range(5) if target[r, c]] for r in range(2)]
    assert predicted == [[7, 8, 10], [6, 7]]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_copy_warmup_trains_a_model_and_reports_a_finite_loss():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(config)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = tool.copy_warmup(model, optimizer, 3, VOCAB, "cpu", seed=0)
    assert torch.isfinite(torch.tensor(loss))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_tool_trains_a_tokenizer_and_a_draft_end_to_end(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    corpus_tool = REPO / "tools" / "make_extraction_corpus.py"
    run = [sys.executable, str(corpus_tool), "--out", str(tmp_path / "corpus"), "--train", "200", "--heldout", "8"]
    subprocess.run(run, check=True, capture_output=True)
    assert tool.main(["tokenizer", "--corpus", str(tmp_path / "corpus"), "--out", str(tmp_path / "tok"),
                      "--vocab-size", "600"]) == 0
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    word = tokenizer.tokenize("Müller")
    assert tokenizer.tokenize(' Müller "Müller') == ["Ġ", *word, "Ġ", '"', *word]
    args = ["model", "--size", "draft", "--corpus", str(tmp_path / "corpus"), "--tokenizer", str(tmp_path / "tok"),
            "--out", str(tmp_path / "draft"), "--steps", "2", "--copy-warmup", "2", "--log-every", "1",
            "--save-every", "2", "--batch", "2", "--threads", "1", "--device", "cpu"]
    assert tool.main(args) == 0
    card = (tmp_path / "draft" / "README.md").read_text()
    assert "The copy warm-up took" in card and "| 2 |" in card
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "draft")
    assert model.config.vocab_size == len(tokenizer) and model.dtype == torch.float16
