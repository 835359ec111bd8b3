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

from structspec.lru import MISSING, BoundedCache
from structspec.tokens._trie import count_outside, rest_rows, row_bytes, trie_nodes, unit_rows
from structspec.tokens.arrays import byte_order
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
    # the vocabulary's trie only (None in a loop split's, which never reads them):
    row_sets: np.ndarray | None  # uint64 [rows, 2]: the ASCII bytes of each row, bit ``b`` for byte ``b``
    row_high: np.ndarray | None  # bool [rows]: whether a row has a byte >= 0x80
    byte_counts: np.ndarray | None  # int64 [128]: the rows with each ASCII byte


TRIE_CACHE_ENTRIES = 8  # vocabularies whose tries are kept (with the vocabularies themselves)
TRIE_CACHE_BYTES = 512 << 20


def _trie_bytes(vocab: Vocabulary, trie: TokenTrie) -> int:
    """The trie's arrays (the per-node ones but ``byte`` are views of ``nodes``) plus the
    vocabulary's, which the cache keeps alive as its key."""
    arrays = (trie.nodes, trie.byte, trie.below_words, trie.row_sets, trie.row_high, trie.byte_counts,
              vocab.byte_matrix, vocab.lengths, vocab.text_ids)
    return sum(a.nbytes for a in arrays) + 64 * vocab.size  # the token byte strings


_TRIES: BoundedCache[Vocabulary, TokenTrie] = BoundedCache(
    max_entries=TRIE_CACHE_ENTRIES, max_bytes=TRIE_CACHE_BYTES, weigh=_trie_bytes
)


def token_trie(vocab: Vocabulary) -> TokenTrie:
    """The :class:`TokenTrie` of ``vocab``'s text tokens (built once per vocabulary while it
    stays among the recently used)."""
    trie = _TRIES.get(vocab, None)
    if trie is None:
        trie = _TRIES.put(vocab, _build(vocab.byte_matrix, vocab.lengths, vocab.text_ids, vocab.size, row_sets=True))
    return trie


def _build(matrix: np.ndarray, lengths: np.ndarray, ids: np.ndarray, size: int, row_sets: bool) -> TokenTrie:
    """The trie of the byte-sorted rows ``matrix`` (``lengths`` bytes each), row ``i`` standing
    for token ``ids[i]`` of ``size`` (the nodes are numbered in C, ``_trie.trie_nodes``), with
    each row's byte set where ``row_sets``."""
    byte, child_lo, child_hi, row_lo, end_hi, row_hi, rest, height = trie_nodes(matrix, lengths)
    below_index, below_words = _big_subtrees(ids, size, end_hi, row_hi)
    nodes = np.zeros(len(byte), dtype=NODE)
    fields = {"byte": byte, "child_lo": child_lo, "child_hi": child_hi, "row_lo": row_lo, "end_hi": end_hi,
              "row_hi": row_hi, "rest": rest, "height": height, "below_index": below_index}
    for name, values in fields.items():
        nodes[name] = values
    for array in (nodes, byte, below_words):
        array.flags.writeable = False
    views = {name: nodes[name] for name in fields}
    views["byte"] = byte  # uint8, kept apart
    views["rest_sets"] = views.pop("rest")
    sets, high, counts = row_bytes(matrix, lengths) if row_sets else (None, None, None)
    return TokenTrie(**views, below_words=below_words, n_rows=len(lengths), nodes=nodes,
                     row_sets=sets, row_high=high, byte_counts=counts)


SPLIT_STEPS = 16  # loop units after which a token's rest is walked from the state that many steps ahead


@dataclass(frozen=True, eq=False)  # compared (and hashed) by identity: one per vocabulary and loop set
class LoopSplit:
    """A vocabulary split by one *loop set*: the bytes (and, with ``utf8``, the whole multi-byte
    characters) each of which takes a run state one *step* along its loop or counted chain. A
    token is read as such units up to its first other byte, or up to ``steps`` units: a token
    of at most ``steps`` units is consumed alive from any state whose chain stays on the loop
    set that long, and any other token needs walking only from there on (from the state as
    many steps ahead), in a trie much smaller than the vocabulary's (inside a JSON string: the
    tokens with a quote, a backslash or a control byte, and the few longer than ``steps``).
    The tokens' words by unit count serve a chain that holds fewer steps and then dies on every
    unit (near the end of a count): the tokens of at most that many units, and the rests after
    them."""

    unit_words: np.ndarray  # uint32 [steps, ceil(vocab size / 32)]: row m - 1, the tokens of 1..m loop units
    rests: TokenTrie  # the other tokens: a first byte j (the units before the rest), then the rest's bytes
    rest_ids: np.ndarray  # int32: row of ``rests`` -> token id
    steps: int  # the most units before a rest or in a token of ``unit_words``: the chain must stay that long

    @property
    def nbytes(self) -> int:
        """Bytes of the split's arrays."""
        r = self.rests
        return (self.unit_words.nbytes + r.nodes.nbytes + r.byte.nbytes + r.below_words.nbytes
                + self.rest_ids.nbytes)


SPLIT_SHARE = 8  # no split where more than the text tokens / SPLIT_SHARE have a rest (0: no limit)
SPLIT_CACHE_ENTRIES = 512  # loop splits (and refusals) kept over all vocabularies
SPLIT_CACHE_BYTES = 128 << 20

_SPLITS: BoundedCache[tuple[Vocabulary, bytes, bool, int], LoopSplit | None] = BoundedCache(
    max_entries=SPLIT_CACHE_ENTRIES, max_bytes=SPLIT_CACHE_BYTES,
    weigh=lambda _key, split: 64 if split is None else split.nbytes)


def loop_split(vocab: Vocabulary, loops: bytes, utf8: bool, steps: int = SPLIT_STEPS) -> LoopSplit | None:
    """The :class:`LoopSplit` of ``vocab`` by the bytes ``b`` with ``loops[b]`` nonzero (256
    flags) and, with ``utf8``, every well-formed multi-byte character, reading at most ``steps``
    units (1..255) before a rest; None where too many tokens would have a rest (built once per
    vocabulary and loop set while it stays among the recently used)."""
    if len(loops) != 256:
        raise ValueError(f"a loop set is 256 byte flags, got {len(loops)}")
    if not 1 <= steps <= 255:
        raise ValueError(f"a loop split reads 1..255 units, not {steps}")
    flags = np.frombuffer(loops, np.uint8) != 0
    key = (vocab, flags.astype(np.uint8).tobytes(), bool(utf8), steps)
    split = _SPLITS.get(key)
    if split is MISSING:
        split = _SPLITS.put(key, _split(vocab, flags, bool(utf8), steps) if _few_rests(vocab, flags, utf8) else None)
    return split


def _rest_limit(vocab: Vocabulary) -> int:
    return len(vocab.text_ids) // SPLIT_SHARE if SPLIT_SHARE else len(vocab.text_ids)


def _few_rests(vocab: Vocabulary, flags: np.ndarray, utf8: bool) -> bool:
    """Whether a split by ``flags`` may leave few enough rows with a rest (``SPLIT_SHARE``),
    told cheaply from the rows sure to have one: those with an ASCII byte outside the loop
    set, or any byte >= 0x80 when neither each such byte nor whole characters loop."""
    trie = token_trie(vocab)
    limit = _rest_limit(vocab)
    high = not utf8 and not flags[0x80:].all()
    if int(trie.byte_counts[~flags[:128]].max(initial=0)) > limit or (high and int(trie.row_high.sum()) > limit):
        return False  # one byte outside is in too many rows
    outside = np.packbits(~flags[:128], bitorder="little").view(np.uint64)
    return count_outside(trie.row_sets, trie.row_high, outside, high, limit) <= limit


def _split(vocab: Vocabulary, flags: np.ndarray, utf8: bool, steps: int) -> LoopSplit | None:
    """Each row read as loop units (``_trie.unit_rows``), then the rows with a rest grouped
    by the units before it and sorted by the rest; None past ``SPLIT_SHARE``."""
    trie = token_trie(vocab)
    offsets, units = unit_rows(vocab.byte_matrix, vocab.lengths, flags, utf8, steps, trie.row_sets, trie.row_high)
    looping = offsets < 0
    rows = np.flatnonzero(~looping)
    if len(rows) > _rest_limit(vocab):
        return None
    most = int(units.max(initial=0))
    fewer = np.full((vocab.size + 31) // 32 * 32, 255, np.uint8)  # each token's units - 1, 255 for none
    fewer[vocab.text_ids[looping]] = units[looping] - 1
    taken = fewer[None, :] < np.arange(1, most + 1, dtype=np.uint8)[:, None]  # row m - 1: 1..m units
    unit_words = np.packbits(taken, axis=1, bitorder="little").view(np.uint32)
    matrix, lengths = rest_rows(vocab.byte_matrix, vocab.lengths, rows, offsets[rows], units[rows])
    order = byte_order(matrix, lengths)
    ids = np.ascontiguousarray(vocab.text_ids[rows[order]], np.int32)
    rests = _build(matrix[order], lengths[order], ids, vocab.size, row_sets=False)
    return LoopSplit(unit_words=np.ascontiguousarray(unit_words), rests=rests, rest_ids=ids, steps=most)


BIG_SUBTREE = 512  # tokens strictly below a node from which its mask words are kept


def _big_subtrees(ids: np.ndarray, size: int, end_hi: np.ndarray, row_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The packed mask words of the tokens below each node with at least ``BIG_SUBTREE`` of
    them: a sweep accepting such a subtree ORs its words instead of setting each token's bit
    (there are a few dozen such nodes, and they hold most of the vocabulary)."""
    big = np.flatnonzero(row_hi - end_hi >= BIG_SUBTREE)
    index = np.full(len(end_hi), -1, dtype=np.int32)
    index[big] = np.arange(len(big), dtype=np.int32)
    n_words = (size + 31) // 32
    bits = np.zeros((len(big), n_words * 32), dtype=bool)
    for row, node in enumerate(big.tolist()):
        bits[row, ids[end_hi[node] : row_hi[node]]] = True
    words = np.packbits(bits, axis=1, bitorder="little").view(np.uint32).reshape(len(big), n_words)
    return index, np.ascontiguousarray(words)
