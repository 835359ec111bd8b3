# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The suffix automaton's online construction in C, over flat arrays (see structspec.ir.suffix).

Moves live in one edge array (code, target, next edge of the same state) with an
open-addressing hash table from (state, code) to the edge, so that the walk up the suffix links
and the cloning of a state cost no Python object. The result is handed back grouped by source
state.
"""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc

import numpy as np


cdef struct Builder:
    int32_t* length
    int32_t* link
    int32_t* head  # first edge of each state, -1 for none
    uint32_t* code
    int32_t* dst
    int32_t* src
    int32_t* next  # the next edge of the same state
    int32_t* slots  # hash table: edge index or -1
    uint64_t mask
    int32_t n_edges


cdef inline uint64_t _slot(uint64_t mask, int32_t state, uint32_t code) noexcept nogil:
    cdef uint64_t key = (<uint64_t> state << 21) ^ code
    key *= 0x9E3779B97F4A7C15ULL
    return (key >> 20) & mask


cdef inline int32_t _find(Builder* b, int32_t state, uint32_t code) noexcept nogil:
    cdef uint64_t i = _slot(b.mask, state, code)
    cdef int32_t e
    while True:
        e = b.slots[i]
        if e < 0:
            return -1
        if b.src[e] == state and b.code[e] == code:
            return e
        i = (i + 1) & b.mask


cdef inline void _add(Builder* b, int32_t state, uint32_t code, int32_t target) noexcept nogil:
    cdef int32_t e = b.n_edges
    cdef uint64_t i = _slot(b.mask, state, code)
    b.n_edges += 1
    b.src[e] = state
    b.code[e] = code
    b.dst[e] = target
    b.next[e] = b.head[state]
    b.head[state] = e
    while b.slots[i] >= 0:
        i = (i + 1) & b.mask
    b.slots[i] = e


cdef int32_t _build(Builder* b, const uint32_t[::1] text) noexcept nogil:
    """Returns the number of states."""
    cdef int32_t size = 1, last = 0, cur, p, q, clone, e
    cdef uint32_t c
    cdef Py_ssize_t i
    b.length[0] = 0
    b.link[0] = -1
    b.head[0] = -1
    for i in range(text.shape[0]):
        c = text[i]
        cur = size
        size += 1
        b.length[cur] = b.length[last] + 1
        b.head[cur] = -1
        p = last
        while p != -1 and _find(b, p, c) < 0:
            _add(b, p, c, cur)
            p = b.link[p]
        if p == -1:
            b.link[cur] = 0
        else:
            q = b.dst[_find(b, p, c)]
            if b.length[p] + 1 == b.length[q]:
                b.link[cur] = q
            else:
                clone = size
                size += 1
                b.length[clone] = b.length[p] + 1
                b.link[clone] = b.link[q]
                b.head[clone] = -1
                e = b.head[q]
                while e >= 0:
                    _add(b, clone, b.code[e], b.dst[e])
                    e = b.next[e]
                while p != -1:
                    e = _find(b, p, c)
                    if b.dst[e] != q:
                        break
                    b.dst[e] = clone
                    p = b.link[p]
                b.link[q] = clone
                b.link[cur] = clone
        last = cur
    return size


def build(const uint32_t[::1] text):
    """The suffix automaton of ``text`` (code points): ``(length, link, start, code, dst)``, where
    state ``q``'s moves are on ``code[start[q]:start[q + 1]]`` to ``dst[start[q]:start[q + 1]]``."""
    cdef Py_ssize_t n = text.shape[0]
    cdef Py_ssize_t max_states = 2 * n + 1, max_edges = 3 * n + 3
    cdef uint64_t table_size = 16
    while table_size < <uint64_t> (2 * max_edges):
        table_size *= 2
    cdef Builder b
    b.length = <int32_t*> malloc(max_states * sizeof(int32_t))
    b.link = <int32_t*> malloc(max_states * sizeof(int32_t))
    b.head = <int32_t*> malloc(max_states * sizeof(int32_t))
    b.code = <uint32_t*> malloc(max_edges * sizeof(uint32_t))
    b.dst = <int32_t*> malloc(max_edges * sizeof(int32_t))
    b.src = <int32_t*> malloc(max_edges * sizeof(int32_t))
    b.next = <int32_t*> malloc(max_edges * sizeof(int32_t))
    b.slots = <int32_t*> malloc(table_size * sizeof(int32_t))
    b.mask = table_size - 1
    b.n_edges = 0
    cdef int32_t n_states = 0, k
    try:
        if (b.length == NULL or b.link == NULL or b.head == NULL or b.code == NULL or b.dst == NULL
                or b.src == NULL or b.next == NULL or b.slots == NULL):
            raise MemoryError()
        with nogil:
            for k in range(<int32_t> table_size):
                b.slots[k] = -1
            n_states = _build(&b, text)
        length = np.empty(n_states, dtype=np.int32)
        link = np.empty(n_states, dtype=np.int32)
        start = np.empty(n_states + 1, dtype=np.int64)
        code = np.empty(b.n_edges, dtype=np.uint32)
        dst = np.empty(b.n_edges, dtype=np.int32)
        _fill(&b, n_states, length, link, start, code, dst)
        return length, link, start, code, dst
    finally:
        free(b.length)
        free(b.link)
        free(b.head)
        free(b.code)
        free(b.dst)
        free(b.src)
        free(b.next)
        free(b.slots)


cdef void _fill(Builder* b, int32_t n_states, int32_t[::1] length, int32_t[::1] link, int64_t[::1] start,
                uint32_t[::1] code, int32_t[::1] dst) noexcept nogil:
    """Copy the states out, each state's moves together (in the order they were added)."""
    cdef int32_t q, e
    cdef int64_t at = 0
    for q in range(n_states):
        length[q] = b.length[q]
        link[q] = b.link[q]
        start[q] = at
        e = b.head[q]
        while e >= 0:
            code[at] = b.code[e]
            dst[at] = b.dst[e]
            at += 1
            e = b.next[e]
    start[n_states] = at
