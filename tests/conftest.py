"""Shared test helpers: where the shared assets live, skipping cleanly when they are absent.

Hypothesis draws fresh examples on every local run, so new runs keep looking for bugs; with
``CI`` set (``.ci/run`` sets it) it runs the same derandomized examples every time, so a
landing never hangs on a lucky draw.

Assets (real tokenizers, schema suites, a tiny model) are found through the environment
variable ``STRUCTSPEC_ASSETS``, defaulting to ``<repo>/../shared/assets``. Import the helpers
with ``from conftest import assets_dir, tokenizer_dir``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent


def assets_dir() -> Path:
    """The shared assets folder; skips the calling test when it is absent."""
    path = Path(os.environ.get("STRUCTSPEC_ASSETS", REPO.parent / "shared" / "assets"))
    if not path.is_dir():
        pytest.skip(f"shared assets not found at {path} (set STRUCTSPEC_ASSETS)")
    return path


def tokenizer_dir(name: str) -> Path:
    """The folder of tokenizer ``name`` (e.g. ``llama3``); skips when it is absent."""
    path = assets_dir() / "tokenizers" / name
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"tokenizer {name!r} not found at {path}")
    return path


@pytest.fixture
def encoded_spans(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The spans the n-gram sources tokenize from here on, in order (``NgramDrafter._encode_span`` calls)."""
    from structspec.generation.drafters import NgramDrafter

    encoded: list[bytes] = []
    encode = NgramDrafter._encode_span

    def counted(drafter: NgramDrafter, vocabulary, span: bytes) -> list[int]:
        encoded.append(span)
        return encode(drafter, vocabulary, span)

    monkeypatch.setattr(NgramDrafter, "_encode_span", counted)
    return encoded


def run_interleaved(target: Callable[[int], object], seeds: range | list[int]) -> None:
    """Run ``target(seed)`` for each seed in a thread of its own, all at once, with the
    interpreter switching threads as often as it can (restored afterwards)."""
    threads = [threading.Thread(target=target, args=(seed,)) for seed in seeds]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
