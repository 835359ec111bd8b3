# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The token trie's construction in C, over flat arrays (see structspec.tokens.trie).

``trie_nodes`` numbers the nodes of byte-sorted rows breadth first, one pass per node over
its rows; ``unit_rows`` reads each row as loop units for a loop split. Both release the GIL
and check their input (a ValueError, never a read out of bounds).
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t

import numpy as np

cdef uint8_t SECOND_LO[256]
cdef uint8_t SECOND_HI[256]
cdef int8_t CHAR_LENGTH[256]  # 0: a byte no character starts with


cdef void _tables() noexcept nogil:
    cdef int b
    for b in range(256):
        SECOND_LO[b], SECOND_HI[b] = 0x80, 0xBF
        CHAR_LENGTH[b] = 1 if b < 0x80 else 2 if 0xC2 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF5 else 0
    SECOND_LO[0xE0], SECOND_HI[0xED], SECOND_LO[0xF0], SECOND_HI[0xF4] = 0xA0, 0x9F, 0x90, 0x8F


_tables()


cdef inline bint _continues(const uint8_t* row, int32_t length, int32_t o, int k) noexcept nogil:
    """Whether byte ``o + k`` of a row may continue the character that starts at ``o`` (or is past the end)."""
    if o + k >= length:
        return 1
    if k == 1:
        return SECOND_LO[row[o]] <= row[o + 1] <= SECOND_HI[row[o]]
    return (row[o + k] & 0xC0) == 0x80


cdef void _well_formed(const uint8_t* row, int32_t length, uint8_t* ok) noexcept nogil:
    """``ok[o]`` for ``o`` in 0..length: whether the row from offset ``o`` on is whole
    well-formed UTF-8 characters, the last one possibly cut by the row's end."""
    cdef int32_t o, size, k
    cdef bint good
    ok[length] = 1
    for o in range(length - 1, -1, -1):
        size = CHAR_LENGTH[row[o]]
        good = size > 0
        for k in range(1, size):
            good = good and _continues(row, length, o, k)
        ok[o] = good and (o + size >= length or ok[o + size])


def _checked(matrix, lengths):
    matrix = np.ascontiguousarray(matrix, np.uint8)
    lengths = np.ascontiguousarray(lengths, np.int32)
    if matrix.ndim != 2 or len(lengths) != len(matrix):
        raise ValueError("one length per row of a 2-d byte matrix")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > matrix.shape[1]):
        raise ValueError(f"row lengths must lie in 0..{matrix.shape[1]}")
    return matrix, lengths


def trie_nodes(matrix, lengths):
    """The trie of the rows of ``matrix`` (``lengths`` bytes each, sorted by their bytes), as
    ``(byte, child_lo, child_hi, row_lo, end_hi, row_hi, rest, height)``: the arrays of
    :class:`structspec.tokens.trie.TokenTrie` (``rest`` its ``rest_sets``). A leaf's children are the empty range at the id its
    first child would have had."""
    matrix, lengths = _checked(matrix, lengths)
    cdef const uint8_t[:, ::1] m = matrix
    cdef const int32_t[::1] lens = lengths
    cdef Py_ssize_t n = len(lengths), width = matrix.shape[1], total_bytes = int(lengths.sum(dtype=np.int64))
    cdef Py_ssize_t cap = total_bytes + 1
    out_byte = np.zeros(cap, np.uint8)
    out = np.zeros((6, cap), np.int32)  # child_lo, child_hi, row_lo, end_hi, row_hi, height
    rest_out = np.zeros((cap, 2), np.uint64)
    depth_out = np.zeros(cap, np.int32)
    parent_out = np.zeros(cap, np.int32)
    bad_out = np.zeros(cap, np.uint8)  # some row below does not continue well-formed from the node on
    okay = np.zeros(total_bytes + n, np.uint8)  # row r's ok[] at okay[starts[r]:]
    starts_out = np.zeros(n + 1, np.int64)
    cdef uint8_t[::1] byte = out_byte
    cdef int32_t[:, ::1] f = out
    cdef uint64_t[:, ::1] rest = rest_out
    cdef int32_t[::1] depth = depth_out
    cdef int32_t[::1] parent = parent_out
    cdef uint8_t[::1] bad = bad_out
    cdef uint8_t[::1] ok = okay
    cdef int64_t[::1] starts = starts_out
    cdef Py_ssize_t count = 1, v, r, e, lo, hi, d, b, bit, p
    with nogil:
        for r in range(n):
            starts[r + 1] = starts[r] + lens[r] + 1
            if lens[r]:
                _well_formed(&m[r, 0], lens[r], &ok[starts[r]])
            else:
                ok[starts[r]] = 1
        f[4, 0] = <int32_t> n
        v = 0
        while v < count:  # nodes in breadth-first order: each appends its children
            lo, hi, d = f[2, v], f[4, v], depth[v]
            e = lo
            while e < hi and lens[e] == d:
                e += 1
            f[3, v] = <int32_t> e
            f[0, v] = <int32_t> count
            for r in range(lo, hi):
                if lens[r] < d:
                    break
                if not ok[starts[r] + d]:
                    bad[v] = 1
            for r in range(e, hi):
                if lens[r] <= d:
                    break
                if r == e or m[r, d] != m[r - 1, d]:
                    if count >= cap:
                        break
                    if r > e:
                        f[4, count - 1] = <int32_t> r
                    byte[count] = m[r, d]
                    f[2, count] = <int32_t> r
                    f[4, count] = <int32_t> hi
                    depth[count] = <int32_t> (d + 1)
                    parent[count] = <int32_t> v
                    count += 1
            f[1, v] = <int32_t> count
            v += 1
        for v in range(count - 1, 0, -1):  # bottom up: a node's rest bytes and height from its children's
            p = parent[v]
            b = byte[v]
            bit = b if b < 128 else 127
            rest[p, bit >> 6] |= (<uint64_t> 1) << (bit & 63)
            rest[p, 0] |= rest[v, 0]
            rest[p, 1] |= rest[v, 1]
            if f[5, v] + 1 > f[5, p]:
                f[5, p] = f[5, v] + 1
        for v in range(count):
            rest[v, 0] |= bad[v]
    return (out_byte[:count], out[0, :count], out[1, :count], out[2, :count], out[3, :count], out[4, :count],
            rest_out[:count], out[5, :count])


def unit_rows(matrix, lengths, loops, bint utf8, int steps, row_sets=None, row_high=None):
    """Each row read as *loop units* for a loop split (structspec.tokens.trie.LoopSplit): a
    byte with ``loops[b]`` (a byte >= 0x80 only when all of them loop) or, with ``utf8``, a
    well-formed multi-byte character (the last one possibly cut by the row's end). Returns
    ``(offsets, units)``: where the row's rest starts -- at its first other byte, or at its
    unit after ``steps`` units -- or -1 when the whole row is units; and the units before it
    (or in the row). With the rows' byte sets (row_bytes()), a row of loop bytes only, no
    longer than ``steps``, is told from them without reading its bytes."""
    matrix, lengths = _checked(matrix, lengths)
    flags = np.ascontiguousarray(loops, np.uint8)
    if flags.shape != (256,):
        raise ValueError(f"a loop set is 256 byte flags, got {flags.shape}")
    if row_sets is None or row_high is None:
        row_sets, row_high = np.full((len(lengths), 2), ~np.uint64(0)), np.ones(len(lengths), np.uint8)
    row_sets = np.ascontiguousarray(row_sets, np.uint64)
    row_high = np.ascontiguousarray(row_high, np.uint8)
    if row_sets.shape != (len(lengths), 2) or row_high.shape != (len(lengths),):
        raise ValueError("two words and one flag per row")
    outside = np.packbits(flags[:128] == 0, bitorder="little").view(np.uint64)
    cdef const uint64_t[:, ::1] sets = row_sets
    cdef const uint8_t[::1] highs = row_high
    cdef uint64_t out0 = outside[0], out1 = outside[1]
    cdef const uint8_t[:, ::1] m = matrix
    cdef const int32_t[::1] lens = lengths
    cdef const uint8_t[::1] loop = flags
    cdef bint per_byte = bool(flags[0x80:].all())
    offsets_out = np.full(len(lengths), -1, np.int32)
    units_out = np.zeros(len(lengths), np.int32)
    cdef int32_t[::1] offsets = offsets_out
    cdef int32_t[::1] units = units_out
    cdef Py_ssize_t r
    cdef int32_t i, n, size, k, length
    cdef uint8_t b
    cdef bint good
    with nogil:
        for r in range(lens.shape[0]):
            i = n = 0
            length = lens[r]
            if length <= steps and not highs[r] and not (sets[r, 0] & out0) and not (sets[r, 1] & out1):
                units[r] = length
                continue
            while i < length:
                b = m[r, i]
                if n >= steps:
                    offsets[r] = i
                    break
                if loop[b] and (b < 0x80 or per_byte):
                    i += 1
                    n += 1
                    continue
                size = CHAR_LENGTH[b]
                if utf8 and not per_byte and size > 1:
                    good = 1
                    for k in range(1, size):
                        good = good and _continues(&m[r, 0], length, i, k)
                    if good:
                        i += size
                        n += 1
                        continue
                offsets[r] = i
                break
            units[r] = n
    return offsets_out, units_out


def rest_rows(matrix, lengths, rows, offsets, heads):
    """The rests of ``rows`` of ``matrix``: row ``rows[i]`` from byte ``offsets[i]`` on, after
    one byte ``heads[i]``, as a 0-padded byte matrix and its lengths."""
    matrix, lengths = _checked(matrix, lengths)
    rows = np.ascontiguousarray(rows, np.int64)
    offsets = np.ascontiguousarray(offsets, np.int32)
    heads = np.ascontiguousarray(heads, np.uint8)
    if not len(rows) == len(offsets) == len(heads):
        raise ValueError("one offset and one head byte per row")
    if len(rows) and (rows.min() < 0 or rows.max() >= len(lengths) or offsets.min() < 0
                      or (offsets > lengths[rows]).any()):
        raise ValueError("rows and offsets must lie inside the matrix")
    out_lengths = (lengths[rows] - offsets + 1).astype(np.int32)
    out = np.zeros((len(rows), int(out_lengths.max(initial=0))), np.uint8)
    cdef const uint8_t[:, ::1] m = matrix
    cdef const int64_t[::1] which = rows
    cdef const int32_t[::1] at = offsets
    cdef const int32_t[::1] size = out_lengths
    cdef const uint8_t[::1] head = heads
    cdef uint8_t[:, ::1] o = out
    cdef Py_ssize_t i, k
    with nogil:
        for i in range(which.shape[0]):
            o[i, 0] = head[i]
            for k in range(1, size[i]):
                o[i, k] = m[which[i], at[i] + k - 1]
    return out, out_lengths


def row_bytes(matrix, lengths):
    """Which bytes each row of ``matrix`` contains: ASCII byte ``b`` as bit ``b`` of two
    uint64 words per row, whether it has any byte >= 0x80 (a bool per row), and how many
    rows contain each ASCII byte (int64, 128 counts)."""
    matrix, lengths = _checked(matrix, lengths)
    cdef const uint8_t[:, ::1] m = matrix
    cdef const int32_t[::1] lens = lengths
    sets_out = np.zeros((len(lengths), 2), np.uint64)
    high_out = np.zeros(len(lengths), np.uint8)
    counts_out = np.zeros(128, np.int64)
    cdef uint64_t[:, ::1] sets = sets_out
    cdef uint8_t[::1] high = high_out
    cdef int64_t[::1] counts = counts_out
    cdef Py_ssize_t r, i
    cdef uint8_t b
    with nogil:
        for r in range(lens.shape[0]):
            for i in range(lens[r]):
                b = m[r, i]
                if b >= 0x80:
                    high[r] = 1
                elif not (sets[r, b >> 6] >> (b & 63)) & 1:
                    sets[r, b >> 6] |= (<uint64_t> 1) << (b & 63)
                    counts[b] += 1
    return sets_out, high_out.view(bool), counts_out


def count_outside(row_sets, row_high, outside, bint high, Py_ssize_t limit):
    """How many rows (see row_bytes()) contain an ASCII byte of the two words ``outside``, or
    with ``high`` a byte >= 0x80, counted up to one past ``limit``."""
    row_sets = np.ascontiguousarray(row_sets, np.uint64)
    row_high = np.ascontiguousarray(row_high, np.uint8)
    outside = np.ascontiguousarray(outside, np.uint64)
    if row_sets.ndim != 2 or row_sets.shape[1] != 2 or len(row_high) != len(row_sets) or outside.shape != (2,):
        raise ValueError("two words per row, one flag per row and two words outside")
    cdef const uint64_t[:, ::1] sets = row_sets
    cdef const uint8_t[::1] highs = row_high
    cdef const uint64_t[::1] out = outside
    cdef Py_ssize_t r, count = 0
    with nogil:
        for r in range(sets.shape[0]):
            if (sets[r, 0] & out[0]) or (sets[r, 1] & out[1]) or (high and highs[r]):
                count += 1
                if count > limit:
                    break
    return count
