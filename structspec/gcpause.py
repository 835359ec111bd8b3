"""Pausing the cyclic garbage collector while a grammar is built.

Converting a schema and compiling rule automata allocate hundreds of thousands of short-lived
containers (the converters' code-point automata, syntax nodes, rule tables) that live until the step ends.
Each allocation burst past the collector's thresholds triggers a full collection, which walks
every tracked object of the process (a tokenizer alone holds ~250,000) and the half-built
automaton: a quarter to a third of the compile time of MaskBench schemas (docs/masks.md, "Time
to first mask"). These steps build no reference cycles (reference counting frees their objects;
`tests/grammar/test_gcpause.py` checks it),
so the collector is paused for their duration and resumes afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_collection() -> Iterator[None]:
    """Turn automatic collection off inside the block, back on after it if it was on before
    (under threads, the last block to end turns it back on; a collection running meanwhile
    costs only time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
