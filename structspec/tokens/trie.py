"""The token trie of a vocabulary as flat arrays, for the native mask core's sweeps.

Nodes are numbered breadth-first (node 0 is the empty prefix), so the children of one node are
a contiguous range and the children of a whole level are ordered by parent. Every node is a
range of *trie rows* (the vocabulary's text tokens sorted by bytes): the rows whose bytes start
with the node's prefix; the rows spelled exactly by the prefix lead that range. A node also
knows the set of bytes that follow its prefix anywhere below it (``rest_sets``), so a run can
accept a whole subtree at once when all of those bytes loop on its state.

Byte sets are 128 bits in two uint64 words: bit ``b`` for ASCII byte ``b`` (1..126); bit 127
for DEL and for any non-ASCII byte, provided every token's rest below the node is well-formed
UTF-8 from there on (whole characters, the last one possibly cut by the token's end); bit 0 for
NUL and for a rest that is not (a stray continuation byte, an invalid lead). A state "loops" on
bit 127 only when every well-formed multi-byte character takes it back to itself (see
``loop_words`` in ``structspec/masks/_sweep.pyx``), so the subset test stays exact while
multilingual tokens inside a string are accepted without expanding their subtrees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from structspec.lru import BoundedCache
from structspec.tokens.vocabulary import Vocabulary

NODE = np.dtype([("child_lo", np.int32), ("child_hi", np.int32), ("row_lo", np.int32), ("end_hi", np.int32),
                 ("row_hi", np.int32), ("height", np.int32), ("below_index", np.int32), ("byte", np.int32),
                 ("rest", np.uint64, (2,))])  # one node's fields side by side: a sweep reads them together


@dataclass(frozen=True)
class TokenTrie:
    """Flat token trie; all arrays are indexed by node id unless noted. The per-node arrays
    but ``byte`` are views of the fields of ``nodes`` (one :data:`NODE` record per node)."""

    byte: np.ndarray  # uint8: last byte of the node's prefix (0 for the root)
    child_lo: np.ndarray  # int32: first child node
    child_hi: np.ndarray  # int32: one past the last child node
    row_lo: np.ndarray  # int32: first trie row below the node
    end_hi: np.ndarray  # int32: rows [row_lo, end_hi) are spelled exactly by the prefix
    row_hi: np.ndarray  # int32: one past the last trie row below the node
    rest_sets: np.ndarray  # uint64 [nodes, 2]: bytes after the prefix in the rows below
    height: np.ndarray  # int32: the most bytes after the prefix in a row below (0 for a leaf)
    below_index: np.ndarray  # int32: the node's row of below_words, -1 for a small subtree
    below_words: np.ndarray  # uint32 [big nodes, ceil(vocab size / 32)]: token ids strictly below
    n_rows: int
    nodes: np.ndarray  # NODE [nodes]: the fields above, record by record


TRIE_CACHE_ENTRIES = 8  # vocabularies whose tries are kept (with the vocabularies themselves)
TRIE_CACHE_BYTES = 512 << 20


def _trie_bytes(vocab: Vocabulary, trie: TokenTrie) -> int:
    """The trie's arrays plus the vocabulary's, which the cache keeps alive as its key."""
    arrays = (trie.nodes, trie.byte, trie.below_words,  # the other per-node arrays are views of ``nodes``
              vocab.byte_matrix, vocab.lengths, vocab.lcp, vocab.text_ids)
    return sum(a.nbytes for a in arrays) + 64 * vocab.size  # the token byte strings


_TRIES: BoundedCache[Vocabulary, TokenTrie] = BoundedCache(
    max_entries=TRIE_CACHE_ENTRIES, max_bytes=TRIE_CACHE_BYTES, weigh=_trie_bytes
)


def token_trie(vocab: Vocabulary) -> TokenTrie:
    """The :class:`TokenTrie` of ``vocab``'s text tokens (built once per vocabulary while it
    stays among the recently used)."""
    trie = _TRIES.get(vocab, None)
    if trie is None:
        trie = _TRIES.put(vocab, _build(vocab))
    return trie


def _build(vocab: Vocabulary) -> TokenTrie:
    lengths, lcp, matrix = vocab.lengths, vocab.lcp, vocab.byte_matrix
    n = len(lengths)
    width = int(lengths.max(initial=0))
    ends_before = np.zeros(n + 1, dtype=np.int64)
    levels: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # row_lo, end_hi, row_hi, byte
    for depth in range(1, width + 1):
        breaks = np.flatnonzero(lcp < depth)
        starts = breaks[lengths[breaks] >= depth]
        bounds = np.append(breaks, n)
        row_hi = bounds[np.searchsorted(bounds, starts, side="right")]
        np.cumsum(lengths == depth, out=ends_before[1:])
        end_hi = starts + (ends_before[row_hi] - ends_before[starts])
        levels.append((starts, end_hi, row_hi, matrix[starts, depth - 1]))
    sizes = [1] + [len(level[0]) for level in levels]
    first_id = np.cumsum([0, *sizes])
    total = int(first_id[-1])
    byte = np.zeros(total, dtype=np.uint8)
    row_lo = np.zeros(total, dtype=np.int32)
    end_hi = np.zeros(total, dtype=np.int32)
    row_hi = np.full(total, n, dtype=np.int32)
    child_lo = np.zeros(total, dtype=np.int32)
    child_hi = np.zeros(total, dtype=np.int32)
    parents = (np.zeros(1, np.int64), np.zeros(1, np.int64), np.full(1, n, np.int64))  # the root
    for d, (starts, ends, his, last) in enumerate(levels, start=1):
        at = slice(first_id[d], first_id[d + 1])
        byte[at], row_lo[at], end_hi[at], row_hi[at] = last, starts, ends, his
        parent_lo, _, parent_hi = parents
        lo = np.searchsorted(starts, parent_lo, side="left")
        hi = np.searchsorted(starts, parent_hi, side="left")
        child_lo[first_id[d - 1] : first_id[d]] = first_id[d] + lo
        child_hi[first_id[d - 1] : first_id[d]] = first_id[d] + hi
        parents = (starts, ends, his)
    child_lo[first_id[-2] : first_id[-1]] = child_hi[first_id[-2] : first_id[-1]] = total
    rest = _rest_sets(byte, child_lo, child_hi, first_id)
    malformed = ~_well_formed_suffixes(matrix, lengths)
    for d in range(len(first_id) - 1):  # a node whose rows below do not all continue well-formed
        level = slice(first_id[d], first_id[d + 1])
        bad_before = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(malformed[:, d], out=bad_before[1:])
        rest[level][bad_before[row_hi[level]] > bad_before[end_hi[level]], 0] |= np.uint64(1)
    height = np.zeros(total, dtype=np.int32)
    for d in range(len(first_id) - 1):  # every row at least d bytes long is below a node of depth d
        level = slice(first_id[d], first_id[d + 1])
        if n:
            height[level] = np.maximum.reduceat(lengths, row_lo[level]) - d
    below_index, below_words = _big_subtrees(vocab, end_hi, row_hi)
    nodes = np.zeros(total, dtype=NODE)
    fields = {"byte": byte, "child_lo": child_lo, "child_hi": child_hi, "row_lo": row_lo, "end_hi": end_hi,
              "row_hi": row_hi, "rest": rest, "height": height, "below_index": below_index}
    for name, values in fields.items():
        nodes[name] = values
    nodes.flags.writeable = False
    views = {name: nodes[name] for name in fields}
    views["byte"] = byte  # uint8, kept apart
    views["rest_sets"] = views.pop("rest")
    return TokenTrie(**views, below_words=below_words, n_rows=n, nodes=nodes)


BIG_SUBTREE = 512  # tokens strictly below a node from which its mask words are kept


def _big_subtrees(vocab: Vocabulary, end_hi: np.ndarray, row_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The packed mask words of the tokens below each node with at least ``BIG_SUBTREE`` of
    them: a sweep accepting such a subtree ORs its words instead of setting each token's bit
    (there are a few dozen such nodes, and they hold most of the vocabulary)."""
    big = np.flatnonzero(row_hi - end_hi >= BIG_SUBTREE)
    index = np.full(len(end_hi), -1, dtype=np.int32)
    index[big] = np.arange(len(big), dtype=np.int32)
    n_words = (vocab.size + 31) // 32
    bits = np.zeros((len(big), n_words * 32), dtype=bool)
    for row, node in enumerate(big.tolist()):
        bits[row, vocab.text_ids[end_hi[node] : row_hi[node]]] = True
    words = np.packbits(bits, axis=1, bitorder="little").view(np.uint32).reshape(len(big), n_words)
    return index, np.ascontiguousarray(words)


def _rest_sets(byte: np.ndarray, child_lo: np.ndarray, child_hi: np.ndarray, first_id: np.ndarray) -> np.ndarray:
    """Bottom-up, one level at a time: a node's rest set is the union over its children of
    their own byte and their rest set (``reduceat`` over each parent's contiguous children)."""
    rest = np.zeros((len(byte), 2), dtype=np.uint64)
    own = _byte_words(byte)
    for d in range(len(first_id) - 3, -1, -1):
        level = np.arange(first_id[d], first_id[d + 1])
        parents = level[child_hi[level] > child_lo[level]]
        if not len(parents):
            continue
        lo, hi = int(first_id[d + 1]), int(first_id[d + 2])
        values = own[lo:hi] | rest[lo:hi]
        rest[parents] = np.bitwise_or.reduceat(values, child_lo[parents] - lo, axis=0)
    return rest


_SECOND_LO = np.full(256, 0x80, dtype=np.uint8)
_SECOND_HI = np.full(256, 0xBF, dtype=np.uint8)
_SECOND_LO[0xE0], _SECOND_HI[0xED], _SECOND_LO[0xF0], _SECOND_HI[0xF4] = 0xA0, 0x9F, 0x90, 0x8F
_CHAR_LENGTH = np.zeros(256, dtype=np.int8)  # 0: a byte no character starts with
_CHAR_LENGTH[:0x80], _CHAR_LENGTH[0xC2:0xE0], _CHAR_LENGTH[0xE0:0xF0], _CHAR_LENGTH[0xF0:0xF5] = 1, 2, 3, 4


def _well_formed_suffixes(matrix: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Bool ``[rows, width + 1]``: whether each row's bytes from offset ``o`` on are whole
    well-formed UTF-8 characters (the Unicode table: no overlong forms, no surrogates, nothing
    past U+10FFFF), the last one possibly cut by the end of the token."""
    n, width = matrix.shape
    padded = np.zeros((n, width + 3), dtype=np.uint8)
    padded[:, :width] = matrix
    ok = np.ones((n, width + 4), dtype=bool)  # offsets at or past the end: the empty rest
    for o in range(width - 1, -1, -1):
        live = np.flatnonzero(lengths > o)
        b = padded[live, o]
        size = _CHAR_LENGTH[b]
        has = [lengths[live] > o + k for k in (1, 2, 3)]
        second = padded[live, o + 1]
        good = np.where(has[0], (second >= _SECOND_LO[b]) & (second <= _SECOND_HI[b]), True)
        for k in (2, 3):
            cont = (padded[live, o + k] & 0xC0) == 0x80
            good &= np.where((size > k) & has[k - 1], cont, True)
        rest_ok = ok[live, np.minimum(o + size.astype(np.int64), o + 4)]
        ok[live, o] = (size > 0) & np.where(size > 1, good, True) & rest_ok
    return ok[:, : width + 1]


def _byte_words(values: np.ndarray) -> np.ndarray:
    bits = np.where(values < 128, values, 127).astype(np.uint64)
    words = np.zeros((len(values), 2), dtype=np.uint64)
    low = bits < 64
    words[low, 0] = np.left_shift(np.uint64(1), bits[low])
    words[~low, 1] = np.left_shift(np.uint64(1), bits[~low] - np.uint64(64))
    return words
