# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The subset construction over bytes in C, for the grammar compiler's rule automata.

The NFA comes in as the compiler builds it (per state: epsilon targets, byte-range edges
``((lo, hi), target)``, symbol edges) and is copied into flat arrays once. Each subset is
closed and numbered with C arrays; a Python dict keyed by the subset's bytes numbers the
subsets (one object per deterministic state, none per byte). States are numbered in discovery
order, bytes in increasing order before symbols, so the result does not depend on how the
NFA's sets iterate. Moves are kept per *atom*, the byte ranges between the ends of the NFA's
ranges (every deterministic state moves all bytes of an atom alike); atoms that move every
state alike share a local class, classes numbered by their lowest byte.
"""

from libc.stdint cimport int32_t, uint8_t
from libc.stdlib cimport qsort

import numpy as np


cdef int _compare(const void* a, const void* b) noexcept nogil:
    cdef int32_t x = (<int32_t*> a)[0]
    cdef int32_t y = (<int32_t*> b)[0]
    return (x > y) - (x < y)


cdef class _Subsets:
    """The deterministic states found so far: their NFA state sets, laid end to end."""

    cdef int32_t[::1] eps_off, eps_dst, stamp
    cdef int32_t[::1] members, member_off, buf
    cdef int32_t n_states, n_members, tick
    cdef dict ids
    cdef int32_t limit, end
    cdef list accept

    def __init__(self, int32_t[::1] eps_off, int32_t[::1] eps_dst, int n, int end, int limit):
        self.eps_off = eps_off
        self.eps_dst = eps_dst
        self.stamp = np.zeros(n, dtype=np.int32)
        self.buf = np.empty(n, dtype=np.int32)
        self.members = np.empty(max(16, n), dtype=np.int32)
        self.member_off = np.zeros(64, dtype=np.int32)
        self.n_states = 0
        self.n_members = 0
        self.tick = 0
        self.ids = {}
        self.limit = limit
        self.end = end
        self.accept = []

    cdef int32_t close(self, int32_t* targets, int32_t count) except -2:
        """The number of the closure of ``targets`` (distinct NFA states), numbering it if it
        is new; -1 when it would be past the limit."""
        cdef int32_t size = 0, i, q, j, t
        cdef int32_t[::1] buf = self.buf, stamp = self.stamp, eps_off = self.eps_off, eps_dst = self.eps_dst
        cdef int32_t[::1] members
        self.tick += 1
        for i in range(count):
            q = targets[i]
            if stamp[q] != self.tick:
                stamp[q] = self.tick
                buf[size] = q
                size += 1
        i = 0
        while i < size:
            q = buf[i]
            i += 1
            for j in range(eps_off[q], eps_off[q + 1]):
                t = eps_dst[j]
                if stamp[t] != self.tick:
                    stamp[t] = self.tick
                    buf[size] = t
                    size += 1
        qsort(&buf[0], size, sizeof(int32_t), _compare)
        key = (<char*> &buf[0])[: size * sizeof(int32_t)]
        found = self.ids.get(key)
        if found is not None:
            return found
        if self.n_states >= self.limit:
            return -1
        number = self.n_states
        self.ids[key] = number
        if self.n_members + size > self.members.shape[0]:
            self.members = np.concatenate((self.members, np.empty(max(size, self.members.shape[0]), dtype=np.int32)))
        if self.n_states + 2 > self.member_off.shape[0]:
            self.member_off = np.concatenate((self.member_off, np.zeros(self.member_off.shape[0], dtype=np.int32)))
        members = self.members
        for i in range(size):
            members[self.n_members + i] = buf[i]
        self.n_members += size
        self.n_states += 1
        self.member_off[self.n_states] = self.n_members
        self.accept.append(stamp[self.end] == self.tick)
        return number


def _csr(list lists, int n, bint pairs):
    """Per-state lists as offsets and flat columns: targets, or (label, target) pairs."""
    cdef int32_t[::1] off = np.zeros(n + 1, dtype=np.int32)
    cdef Py_ssize_t total = 0, q
    for q in range(n):
        total += len(<list> lists[q])
        off[q + 1] = total
    first = np.empty(total, dtype=np.int32)
    second = np.empty(total if pairs else 0, dtype=np.int32)
    third = np.empty(total if pairs else 0, dtype=np.int32)
    cdef int32_t[::1] a = first, b = second, c = third
    cdef Py_ssize_t i = 0
    for q in range(n):
        for item in <list> lists[q]:
            if pairs:
                label, target = item
                a[i] = label[0]
                b[i] = label[1]
                c[i] = target
            else:
                a[i] = item
            i += 1
    return np.asarray(off), first, second, third


def byte_subsets(list eps, list edges, dict symbols, int start, int end, int limit):
    """The subset construction of a byte NFA from the closure of ``start``; ``end`` is the
    accepting state. Returns ``(byte_class, table, calls, symbols, accept)``: the local class
    of each byte (uint8), ``table[q, class]`` (int32, -1 for no move), the symbol moves as
    ``(state, index into symbols, target)`` columns, the symbols in order of first use, and
    each state's acceptance; None past ``limit`` states."""
    cdef int n = len(eps)
    eps_off, eps_dst, _, _ = _csr(eps, n, False)
    edge_off_a, edge_lo_a, edge_hi_a, edge_dst_a = _csr(edges, n, True)
    cdef int32_t[::1] edge_off = edge_off_a, edge_lo = edge_lo_a, edge_hi = edge_hi_a, edge_dst = edge_dst_a
    cdef _Subsets subsets = _Subsets(eps_off, eps_dst, n, end, limit)
    cdef int32_t one = start
    if subsets.close(&one, 1) < 0:
        return None
    cdef int32_t[::1] single = np.full(n, -1, dtype=np.int32)  # the number of each one-state closure
    cdef Py_ssize_t room = max(n, len(edge_dst_a), 1)  # targets of one move: at most every edge or state
    cdef int32_t atom_of[257]  # byte -> atom (atom_of[256]: the number of atoms)
    cdef uint8_t ends[257]
    cdef int32_t b, a, k
    for b in range(257):
        ends[b] = 0
    for k in range(len(edge_dst_a)):
        ends[edge_lo[k]] = 1
        ends[edge_hi[k] + 1] = 1
    a = 0
    for b in range(256):
        if b and ends[b]:
            a += 1
        atom_of[b] = a
    cdef int32_t atoms = a + 1
    atom_of[256] = atoms
    cdef uint8_t[::1] has_symbols = np.zeros(max(n, 1), dtype=np.uint8)
    for k in symbols:
        has_symbols[k] = 1
    cdef int32_t[::1] targets = np.empty(room, dtype=np.int32)
    cdef int32_t[::1] seg_lo = np.empty(room, dtype=np.int32)
    cdef int32_t[::1] seg_hi = np.empty(room, dtype=np.int32)
    cdef int32_t[::1] seg_dst = np.empty(room, dtype=np.int32)
    cdef uint8_t marks[257]
    rows = np.empty((64, atoms), dtype=np.int32)
    cdef int32_t[:, ::1] row = rows
    cdef int32_t done = 0, q, s, e, m, count, number, t, i, i0, i1
    cdef bint moving_on_symbols
    symbol_index: dict = {}
    call_state: list = []
    call_symbol: list = []
    call_target: list = []
    while done < subsets.n_states:
        q = done
        done += 1
        if q >= row.shape[0]:
            rows = np.concatenate((rows, np.empty_like(rows)))
            row = rows
        i0 = subsets.member_off[q]
        i1 = subsets.member_off[q + 1]
        m = 0
        moving_on_symbols = False
        for i in range(atoms):
            row[q, i] = -1
        for i in range(257):
            marks[i] = 0
        for i in range(i0, i1):
            s = subsets.members[i]
            moving_on_symbols |= has_symbols[s]
            for e in range(edge_off[s], edge_off[s + 1]):
                seg_lo[m] = edge_lo[e]
                seg_hi[m] = edge_hi[e]
                seg_dst[m] = edge_dst[e]
                marks[edge_lo[e]] = 1
                marks[edge_hi[e] + 1] = 1
                m += 1
        if m:
            a = 0
            while a < 256:
                b = a + 1  # the segment [a, b) between two marks
                while b < 256 and not marks[b]:
                    b += 1
                count = 0
                for e in range(m):
                    if seg_lo[e] <= a and seg_hi[e] >= b - 1:
                        targets[count] = seg_dst[e]
                        count += 1
                if count:
                    if count == 1 and single[targets[0]] >= 0:
                        number = single[targets[0]]
                    else:
                        number = subsets.close(&targets[0], count)
                        if number < 0:
                            return None
                        if count == 1:
                            single[targets[0]] = number
                    for i in range(atom_of[a], atom_of[b - 1] + 1):
                        row[q, i] = number
                a = b
        if not moving_on_symbols:
            continue
        moves: dict = {}
        for i in range(i0, i1):
            s = subsets.members[i]
            found = symbols.get(s)
            if found is not None:
                for symbol, target in found:
                    moves.setdefault(symbol, []).append(target)
        for symbol, to in moves.items():
            count = 0
            for target in dict.fromkeys(to):
                targets[count] = target
                count += 1
            number = subsets.close(&targets[0], count)
            if number < 0:
                return None
            call_state.append(q)
            call_symbol.append(symbol_index.setdefault(symbol, len(symbol_index)))
            call_target.append(number)
    cdef int32_t n_dfa = subsets.n_states
    byte_class, table = _classes(row, n_dfa, atom_of)
    calls = tuple(np.array(column, dtype=np.int32) for column in (call_state, call_symbol, call_target))
    return byte_class, table, calls, tuple(symbol_index), subsets.accept


cdef tuple _classes(int32_t[:, ::1] row, int32_t n, int32_t* atom_of):
    """Atoms whose columns of ``row`` (the first ``n`` states) are equal share a class,
    numbered by lowest byte; each byte's class and the table of moves per class."""
    cdef int32_t cls[256]
    cdef int32_t fresh[256]
    cdef int32_t head[256]  # per old class: its first new class in this state, -1 for none
    cdef int32_t link[256]  # per new class: the next new class from the same old class
    cdef int32_t target[256]  # per new class: the move of this state
    cdef int32_t classes = 1, made, q, b, c, k, atoms = atom_of[256]
    for b in range(atoms):
        cls[b] = 0
    for q in range(n):
        if classes == atoms:
            break
        for c in range(classes):
            head[c] = -1
        made = 0
        for b in range(atoms):
            c = cls[b]
            k = head[c]
            while k >= 0 and target[k] != row[q, b]:
                k = link[k]
            if k < 0:
                k = made
                made += 1
                target[k] = row[q, b]
                link[k] = head[c]
                head[c] = k
            fresh[b] = k
        # Renumber by lowest byte.
        for c in range(made):
            head[c] = -1
        classes = 0
        for b in range(atoms):
            k = fresh[b]
            if head[k] < 0:
                head[k] = classes
                classes += 1
            cls[b] = head[k]
    byte_class = np.empty(256, dtype=np.uint8)
    table = np.empty((n, classes), dtype=np.int32)
    cdef uint8_t[::1] out_class = byte_class
    cdef int32_t[:, ::1] out = table
    cdef int32_t lowest[256]
    for c in range(classes):
        lowest[c] = -1
    for b in range(atoms):
        if lowest[cls[b]] < 0:
            lowest[cls[b]] = b
    for b in range(256):
        out_class[b] = cls[atom_of[b]]
    for q in range(n):
        for c in range(classes):
            out[q, c] = row[q, lowest[c]]
    return byte_class, table
