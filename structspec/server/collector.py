"""Garbage-collector pauses of the server process, for ``GET /health``.

A full collection (generation 2) walks every tracked object of the process and holds the
interpreter lock meanwhile, so its length is a pause of every request. The model, torch,
transformers and the app are hundreds of thousands of objects that live as long as the
process, and a cached grammar is tens of thousands more (syntax tree, parse states, frames).
:func:`settle` collects and then moves what survives out of the collector's sight with
:func:`gc.freeze`: at start-up, before each compiled grammar arrives from its compile process
(whose objects are frozen as they arrive) and whenever the generation worker falls idle, so a
full collection walks only what was created since. Frozen objects are still
freed by reference counting (a compiled grammar has no reference cycles, so an evicted one is
freed at once); only a reference cycle among objects alive at a settle would outlive its
use. Measured in docs/server.md. :class:`CollectionPauses` records how long each collection
took, in wall-clock time and in CPU time of the collecting thread (on a busy machine the
first includes time the process was not running at all).
"""

from __future__ import annotations

import gc
import time
from typing import Any


def settle() -> None:
    """Collect once, then freeze the survivors (they are never collected again)."""
    gc.collect()
    gc.freeze()


class CollectionPauses:
    """Counts collections and their longest pause per generation, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self._started = (0.0, 0.0)
        self.count = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]
        self.longest_cpu = [0.0, 0.0, 0.0]
        self.total = [0.0, 0.0, 0.0]

    def install(self) -> None:
        """Start recording."""
        gc.callbacks.append(self._callback)

    def remove(self) -> None:
        """Stop recording."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def stats(self) -> dict[str, Any]:
        """Collections so far, the full ones apart, with the longest and total pause in milliseconds."""
        return {
            "collections": sum(self.count),
            "full_collections": self.count[2],
            "longest_full_ms": round(self.longest[2] * 1000, 3),
            "longest_full_cpu_ms": round(self.longest_cpu[2] * 1000, 3),
            "total_full_ms": round(self.total[2] * 1000, 3),
            "longest_ms": round(max(self.longest) * 1000, 3),
            "frozen_objects": gc.get_freeze_count(),
        }

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = (time.perf_counter(), time.thread_time())
            return
        generation = info["generation"]
        pause, cpu = time.perf_counter() - self._started[0], time.thread_time() - self._started[1]
        self.count[generation] += 1
        self.total[generation] += pause
        self.longest[generation] = max(self.longest[generation], pause)
        self.longest_cpu[generation] = max(self.longest_cpu[generation], cpu)
