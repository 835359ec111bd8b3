"""outlines-core behind the peer interface.

A JSON Schema becomes a regex (`json_schema.build_regex_from_schema`, whitespace pattern ""
for compact JSON); the regex and the vocabulary become an `Index` (the slow step); a `Guide`
walks the index and writes masks with `write_mask_into`. No GBNF front end.
Index builds run in a child process (`outlines_worker.py`, `RAYON_NUM_THREADS=1`) so a build
over `compile_timeout_s` is killed and reported as a compile failure; `compile_seconds` is the
child's own build time plus the regex conversion, without the pickling overhead.
The vocabulary holds every non-special token's bytes (special tokens never match text).
"""

from __future__ import annotations

import json
import os
import pickle
import select
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import outlines_core

from .base import BitmaskMatcher, Peer, PeerCompileError, PeerGrammar
from .tokens import token_bytes

_WORKER = Path(__file__).with_name("outlines_worker.py")


class OutlinesMatcher(BitmaskMatcher):
    """A `Guide` over a shared `Index`."""

    def __init__(self, index: Any, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self._guide = outlines_core.Guide(index)
        self._pointer = self._bitmask.ctypes.data

    def compute_mask(self) -> None:
        self._guide.write_mask_into(self._pointer, self._bitmask.size, 4)

    def accept_token(self, token_id: int) -> bool:
        try:
            self._guide.advance(token_id, return_tokens=False)
        except ValueError:  # outlines-core's answer to a token with no transition
            return False
        return True

    def is_accepting(self) -> bool:
        return self._guide.is_finished()


class OutlinesGrammar(PeerGrammar):
    """An outlines-core `Index`."""

    def __init__(self, peer: Peer, index: Any, compile_seconds: float) -> None:
        super().__init__(peer, compile_seconds)
        self._index = index

    def matcher(self) -> OutlinesMatcher:
        return OutlinesMatcher(self._index, self.peer.vocab_size)


class IndexBuilder:
    """Builds indexes in a long-lived child process, restarted after a timeout.

    The timeout covers the build only; starting the child is waited for separately.
    """

    def __init__(self, vocabulary: Any, timeout_s: float) -> None:
        self._vocabulary_blob = pickle.dumps(vocabulary)
        self._timeout_s = timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._stopper: weakref.finalize | None = None

    def build(self, regex: str) -> tuple[Any, float]:
        """The index and the child's build seconds; PeerCompileError on error or timeout."""
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        pickle.dump(regex, process.stdin)
        process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], self._timeout_s)
        if not ready:
            self.close()
            raise PeerCompileError("outlines-core", f"index build exceeded {self._timeout_s:g} s")
        try:
            reply = pickle.load(process.stdout)
        except EOFError as exc:
            self.close()
            raise PeerCompileError("outlines-core", "index build process died") from exc
        if reply[0] == "error":
            raise PeerCompileError("outlines-core", reply[1])
        return pickle.loads(reply[1]), reply[2]

    def close(self) -> None:
        """Stop the child process, if any."""
        if self._stopper is not None:
            self._stopper()
            self._process = self._stopper = None

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            env = dict(os.environ, RAYON_NUM_THREADS="1")
            self._process = subprocess.Popen(
                [sys.executable, str(_WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            self._stopper = weakref.finalize(self, _stop, self._process)
            assert self._process.stdin is not None
            assert self._process.stdout is not None
            self._process.stdin.write(self._vocabulary_blob)
            self._process.stdin.flush()
            try:
                ready = pickle.load(self._process.stdout)
            except EOFError:
                ready = None
            if ready != "ready":
                raise RuntimeError(f"outlines-core index worker {_WORKER} failed to start")
        return self._process


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


class OutlinesPeer(Peer):
    """outlines-core with one `Vocabulary` per tokenizer."""

    name = "outlines-core"

    def __init__(self, tokenizer: Any, compile_timeout_s: float | None) -> None:
        super().__init__(tokenizer)
        eos = tokenizer.eos_token_id
        by_bytes: dict[bytes, list[int]] = {}
        for token_id, piece in enumerate(token_bytes(tokenizer)):
            if piece is not None and token_id != eos:
                by_bytes.setdefault(piece, []).append(token_id)
        self._vocabulary = outlines_core.Vocabulary(eos, by_bytes)
        self._builder = None if compile_timeout_s is None else IndexBuilder(self._vocabulary, compile_timeout_s)

    def compile_json_schema(self, schema: dict) -> OutlinesGrammar:
        start = time.perf_counter()
        try:
            regex = outlines_core.json_schema.build_regex_from_schema(json.dumps(schema), whitespace_pattern="")
        except Exception as exc:  # the converter raises assorted types on unsupported schemas
            raise PeerCompileError(self.name, f"{type(exc).__name__}: {exc}") from exc
        regex_seconds = time.perf_counter() - start
        index, build_seconds = self._build_index(regex)
        return OutlinesGrammar(self, index, regex_seconds + build_seconds)

    def _build_index(self, regex: str) -> tuple[Any, float]:
        if self._builder is not None:
            return self._builder.build(regex)
        start = time.perf_counter()
        try:
            index = outlines_core.Index(regex, self._vocabulary)
        except Exception as exc:  # as in the worker: any failure is a compile failure
            raise PeerCompileError(self.name, f"{type(exc).__name__}: {exc}") from exc
        return index, time.perf_counter() - start
