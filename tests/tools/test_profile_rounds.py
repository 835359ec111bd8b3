"""``tools/profile_rounds.py`` on short generations: the rounds replay to the same texts, every
phase is reported, phases served from the recording replay too, and the methods it replaces or
times come back afterwards."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO
from tiny_models import one_thread

sys.path.insert(0, str(REPO / "tools"))

import profile_rounds

from structspec.generation import loop
from structspec.generation.adaptive import ForwardCost
from structspec.generation.cache import CachedModel
from structspec.generation.loop import Decoding

__all__ = ["one_thread"]


def test_replayed_rounds_are_timed_by_phase_and_the_methods_come_back(capsys) -> None:
    originals = (ForwardCost.add, CachedModel.tree_logits, CachedModel.keep, Decoding.commit)
    assert profile_rounds.main(["--repeats", "2", "--between", "nothing", "--max-new-tokens", "12"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("forced,ngram: 4 generations, ") and "2 replays" in lines[0]
    assert lines[1].startswith("host µs per round: median ")
    phases = [line.split()[0] for line in lines[3:]]
    assert phases == ["draft", "mask", "verify", "keep", "text"]  # in the round's order
    assert float(lines[1].split()[5]) > 0
    assert (ForwardCost.add, CachedModel.tree_logits, CachedModel.keep, Decoding.commit) == originals


def test_the_forward_in_between_is_the_targets_and_plain_decoding_replays_too(capsys) -> None:
    assert profile_rounds.main(["--sources", "plain", "--repeats", "1", "--between", "forward",
                                "--max-new-tokens", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("plain: 4 generations, 24 rounds each replay")


def test_served_phases_replay_the_recorded_rounds_and_come_back(capsys) -> None:
    originals = (Decoding.draft, loop.verify)
    assert profile_rounds.main(["--served", "draft,verify", "--repeats", "1", "--between", "nothing",
                                "--max-new-tokens", "12"]) == 0  # a replay whose text differs raises
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("between rounds: nothing, served: draft,verify")
    assert (Decoding.draft, loop.verify) == originals
    with pytest.raises(SystemExit, match="unknown phases"):
        profile_rounds.main(["--served", "keep"])
