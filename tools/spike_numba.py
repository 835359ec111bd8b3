"""The numba side of the native-route spike (docs/masks.md, "Why Cython"): cold and warm cost of
the trie sweep compiled by numba, against the Cython core on the same state.

    python tools/spike_numba.py            # needs numba (the bench extra); run it in a fresh process

The grammar is one JSON string (``"\\"" [^"\\\\\\x00-\\x1F]* "\\""``) and the state is just after
its opening quote, where almost every token is allowed. numba gets the same algorithm as the
Cython core's sweep for this state: a depth-first walk of the Llama-3 token trie over a dense
transition table (three automaton states), accepting a subtree whole when its rest bytes loop,
setting one bit per token otherwise (``@njit(nogil=True, cache=True)``). Reported: ``import
numba``, the first call with an empty JIT cache (compilation), a first call that loads the
cache in a new process, and the per-call time warm, beside the Cython core's import, first
mask and warm mask of the same state (the Cython figure includes building the parse state).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
GRAMMAR = 'root ::= "\\"" [^"\\\\\\x00-\\x1F]* "\\""'
KERNEL = '''
import numpy as np
from numba import njit

@njit(nogil=True, cache=True)
def sweep(start, trans, loops, child_lo, child_hi, row_lo, end_hi, row_hi, rest, node_byte, byte_class, ids, words):
    stack = np.empty(2 * len(child_lo), np.int32)
    size = 0
    stack[0] = 0
    stack[1] = start
    size = 2
    while size:
        size -= 2
        node = stack[size]
        s = stack[size + 1]
        for child in range(child_lo[node], child_hi[node]):
            t = trans[s, byte_class[node_byte[child]]]
            if t < 0:
                continue
            for r in range(row_lo[child], end_hi[child]):
                words[ids[r] >> 5] |= np.uint32(1) << np.uint32(ids[r] & 31)
            if (rest[child, 0] & ~loops[t, 0]) == 0 and (rest[child, 1] & ~loops[t, 1]) == 0:
                for r in range(end_hi[child], row_hi[child]):
                    words[ids[r] >> 5] |= np.uint32(1) << np.uint32(ids[r] & 31)
                continue
            stack[size] = child
            stack[size + 1] = t
            size += 2
'''


def _trie_and_table():
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tools"))
    from _assets import load_tokenizer
    from structspec.masks._sweep import loop_words

    from structspec import Grammar, Vocabulary
    from structspec.tokens.trie import token_trie

    vocab = Vocabulary.from_tokenizer(load_tokenizer("llama3"))
    trie = token_trie(vocab)
    rules = Grammar.from_gbnf(GRAMMAR).ruleset
    inside = rules.byte_moves.of(rules.root_start)[ord('"')]
    table = rules.class_table()
    loops = np.zeros((len(table), 2), np.uint64)
    for q in range(len(table)):
        flags = (table[q][rules.byte_class] == q).astype(np.uint8)
        loops[q] = loop_words(flags)
    args = (inside, table, loops, trie.child_lo, trie.child_hi, trie.row_lo, trie.end_hi, trie.row_hi,
            np.ascontiguousarray(trie.rest_sets), trie.byte, np.asarray(rules.byte_class, np.int32),
            vocab.text_ids, np.zeros((vocab.size + 31) // 32, np.uint32))
    return vocab, args


def numba_child(cache_dir: str) -> None:
    """In a fresh process: import numba, define the kernel, time the first and warm calls."""
    _, args = _trie_and_table()
    start = time.perf_counter()
    import numba  # noqa: F401

    imported = time.perf_counter() - start
    module = Path(cache_dir) / "spike_kernel.py"
    module.write_text(KERNEL)
    sys.path.insert(0, cache_dir)
    start = time.perf_counter()
    sweep = importlib.import_module("spike_kernel").sweep  # written just now: numba caches beside it

    sweep(*args)
    first = time.perf_counter() - start
    runs = []
    for _ in range(50):
        args[-1][:] = 0
        start = time.perf_counter()
        sweep(*args)
        runs.append(time.perf_counter() - start)
    print(f"{imported:.6f} {first:.6f} {np.median(runs):.6f} {int(np.unpackbits(args[-1].view(np.uint8)).sum())}")


def cython_child() -> None:
    """In a fresh process: the Cython core's import, first mask and warm mask of the state."""
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tools"))
    from _assets import load_tokenizer

    import structspec
    from structspec import Grammar, Vocabulary
    from structspec.tokens.trie import token_trie

    vocab = Vocabulary.from_tokenizer(load_tokenizer("llama3"))
    token_trie(vocab)
    start = time.perf_counter()
    import structspec.masks._sweep

    imported = time.perf_counter() - start
    compiled = structspec.compile(Grammar.from_gbnf(GRAMMAR), vocab)
    state = compiled.grammar.initial_state().advance(b'"')
    start = time.perf_counter()
    words = compiled._runner.mask(state)
    first = time.perf_counter() - start
    runs = []
    for _ in range(50):
        start = time.perf_counter()
        compiled._runner.mask(state)
        runs.append(time.perf_counter() - start)
    print(f"{imported:.6f} {first:.6f} {np.median(runs):.6f} {int(np.unpackbits(words.view(np.uint8)).sum())}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--numba-child":
        numba_child(sys.argv[2])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--cython-child":
        cython_child()
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as cache:
        env["NUMBA_CACHE_DIR"] = cache
        rows = {}
        for label in ("numba, empty cache", "numba, cache on disk"):
            out = subprocess.run([sys.executable, __file__, "--numba-child", cache], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            rows[label] = out
        rows["cython"] = subprocess.run([sys.executable, __file__, "--cython-child"], env=env, check=True,
                                        capture_output=True, text=True).stdout.split()
    print(f"{'route':22} {'import':>8} {'first mask':>11} {'warm mask':>10} {'allowed':>8}")
    for label, (imported, first, warm, allowed) in rows.items():
        print(f"{label:22} {float(imported) * 1e3:6.0f}ms {float(first) * 1e3:9.1f}ms "
              f"{float(warm) * 1e6:8.0f}us {allowed:>8}")


if __name__ == "__main__":
    main()
