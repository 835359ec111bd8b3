"""``tools/profile_batch_step.py`` on a few short requests: every phase of ``Batch.step`` is timed
and reported, and the methods it times are restored afterwards."""

from __future__ import annotations

import sys

from conftest import REPO, tokenizer_dir
from tiny_models import one_thread

sys.path.insert(0, str(REPO / "tools"))

import profile_batch_step

from structspec.generation.batch import Batch
from structspec.generation.loop import Decoding

__all__ = ["one_thread"]


def test_every_phase_is_reported_and_the_methods_come_back(capsys) -> None:
    tokenizer_dir("llama3")  # the tiny model takes the bundled Llama-3 tokenizer
    step, draft = Batch.step, Decoding.draft
    assert profile_batch_step.main(["--requests", "4", "--max-batch", "4", "--max-new-tokens", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("4 requests, 24 tokens in ")
    phases = [line.split()[0] for line in lines[2:]]
    assert phases == ["join", "draft", "forward", "layout", "model", "output", "mask", "verify", "keep", "step",
                      "process"]
    assert all(float(line.split()[-3]) > 0 for line in lines[2:] if not line.startswith(("join", "mask", "keep")))
    assert (Batch.step, Decoding.draft) == (step, draft)
