# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The grammar compiler's rule automata over bytes, built in C: the epsilon-NFA of a rule's
expression, then the subset construction.

The NFA is built from the expression tree with an explicit work list (no recursion, however
deep the expression or the chain of inlined rules), into flat growable arrays: epsilon edges,
byte-range edges (UTF-8 byte-range sequences for characters) and symbol edges (a called rule's
name, or a :class:`~structspec.ir.expr.TokenRef`). Each subset is closed with C arrays and
numbered through an open-addressed table of the subsets' hashes (no Python object per subset
or per byte). States are numbered in discovery order, bytes in increasing order before
symbols. Moves are kept per *atom*, the byte ranges between the ends of the NFA's ranges (every
deterministic state moves all bytes of an atom alike); atoms that move every state alike share
a local class, classes numbered by their lowest byte.

The GIL: the loops over typed arrays alone run without it (the edge ordering, the class
refinement and the class table, :func:`rule_move_rows`'s work on the rules' tables). The
expression walks (NFA construction, :func:`rule_key`) read Python trees and
hold it, as does :func:`cut_per_state`, which makes tuples; :func:`inline_estimate` recurses
over the tree, as deep as the parser's nesting limit lets a rule be. So does the subset construction: its symbol moves (calls and token references) are
grouped in Python dicts per state, and its arrays grow as numpy arrays; moving those to C
arrays would let it run without the GIL. For the small rules schema grammars are made of
(a median of 51 states, ~0.1 ms), releasing it per subset would cost about what the scans of
one subset cost.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcmp, memcpy, memset

import numpy as np

from structspec.ir.expr import Alt, CharClass, Chars, Lit, Ref, Rep, Seq, TokenRef


class AutomatonLimit(Exception):
    """A rule's automaton would pass a size limit: ``stage`` is "nfa" or "dfa"."""

    def __init__(self, stage):
        super().__init__(stage)
        self.stage = stage


cdef struct Column:
    int32_t* data
    Py_ssize_t size
    Py_ssize_t room


cdef int _push(Column* column, int32_t value) except -1:
    cdef Py_ssize_t room
    cdef int32_t* grown
    if column.size == column.room:
        room = 2 * column.room if column.room else 64
        grown = <int32_t*> realloc(column.data, room * sizeof(int32_t))
        if grown == NULL:
            raise MemoryError()
        column.data = grown
        column.room = room
    column.data[column.size] = value
    column.size += 1
    return 0


cdef class _NFA:
    """An epsilon-NFA under construction: edges as columns, states numbered from 0."""

    cdef Column eps_src, eps_dst, src, lo, hi, dst
    cdef int32_t n, limit
    cdef dict symbols  # state -> [(symbol, target)]

    def __cinit__(self, int limit):
        self.limit = limit
        self.n = 0
        self.symbols = {}

    def __dealloc__(self):
        free(self.eps_src.data)
        free(self.eps_dst.data)
        free(self.src.data)
        free(self.lo.data)
        free(self.hi.data)
        free(self.dst.data)

    cdef int32_t state(self) except -1:
        if self.n >= self.limit:
            raise AutomatonLimit("nfa")
        self.n += 1
        return self.n - 1

    cdef int epsilon(self, int32_t start, int32_t end) except -1:
        _push(&self.eps_src, start)
        _push(&self.eps_dst, end)
        return 0

    cdef int edge(self, int32_t start, int32_t low, int32_t high, int32_t end) except -1:
        _push(&self.src, start)
        _push(&self.lo, low)
        _push(&self.hi, high)
        _push(&self.dst, end)
        return 0

    cdef int chain(self, int32_t start, int32_t end, tuple ranges) except -1:
        """The byte ranges of ``ranges`` one after the other from ``start`` to ``end``."""
        cdef Py_ssize_t i, last = len(ranges) - 1
        cdef int32_t current = start, following
        for i in range(last + 1):
            following = end if i == last else self.state()
            low, high = ranges[i]
            if not 0 <= low <= high <= 255:
                raise ValueError(f"a byte range must lie in 0..255, got {low}..{high}")
            self.edge(current, low, high, following)
            current = following
        return 0

    cdef int build(self, expr, int32_t start, int32_t end, table, inline, sequences) except -1:
        """Add states and edges so that ``expr`` leads from ``start`` to ``end``."""
        cdef list todo = [(expr, start, end)]
        cdef Py_ssize_t i, count
        cdef int32_t current, following, loop, body_end
        cdef bytes text
        while todo:
            expr, start, end = todo.pop()
            kind = type(expr)  # compared by identity: no node type is subclassed
            if kind is Lit:
                text = (<str> expr.text).encode("utf-8")
                if not text:
                    self.epsilon(start, end)
                current = start
                count = len(text)
                for i in range(count):
                    following = end if i == count - 1 else self.state()
                    self.edge(current, text[i], text[i], following)
                    current = following
            elif kind is Seq:
                items = expr.items
                count = len(items)
                if not count:
                    self.epsilon(start, end)
                current = start
                for i in range(count):
                    following = end if i == count - 1 else self.state()
                    todo.append((items[i], current, following))
                    current = following
            elif kind is Ref:
                if expr.name in inline:
                    todo.append((table[expr.name].body, start, end))
                else:
                    self.symbols.setdefault(start, []).append((expr.name, end))
            elif kind is Alt:
                for item in expr.items:
                    todo.append((item, start, end))
            elif kind is Rep:
                item = expr.item
                current = start
                for i in range(expr.low):
                    following = self.state()
                    todo.append((item, current, following))
                    current = following
                if expr.high is None:
                    loop = self.state()
                    self.epsilon(current, loop)
                    body_end = self.state()
                    todo.append((item, loop, body_end))
                    self.epsilon(body_end, loop)
                    self.epsilon(loop, end)
                else:
                    for i in range(expr.high - expr.low):
                        following = self.state()
                        self.epsilon(current, end)
                        todo.append((item, current, following))
                        current = following
                    self.epsilon(current, end)
            elif kind is Chars or kind is CharClass:
                ranges = expr.charset.ranges if kind is Chars else expr.code_points()
                for path in sequences(ranges):
                    self.chain(start, end, path)
            elif kind is TokenRef:
                self.symbols.setdefault(start, []).append((expr, end))
            else:
                raise TypeError(f"cannot build an automaton for {expr!r}")
        return 0


cdef _order(int32_t n, Column* src):
    """Offsets per state of edges whose sources are ``src``, and where each edge goes in the
    edges grouped by source (stable: a counting sort)."""
    off = np.zeros(n + 1, dtype=np.int32)
    cdef int32_t[::1] offsets = off
    cdef Py_ssize_t i
    with nogil:
        for i in range(src.size):
            offsets[src.data[i] + 1] += 1
        for i in range(n):
            offsets[i + 1] += offsets[i]
    cdef int32_t[::1] place = off[:n].copy()
    where = np.empty(src.size, dtype=np.int32)
    cdef int32_t[::1] at = where
    with nogil:
        for i in range(src.size):
            at[i] = place[src.data[i]]
            place[src.data[i]] += 1
    return off, where


cdef _placed(Column* column, int32_t[::1] where):
    """``column`` with each value moved to ``where`` says."""
    result = np.empty(column.size, dtype=np.int32)
    cdef int32_t[::1] out = result
    cdef Py_ssize_t i
    with nogil:
        for i in range(column.size):
            out[where[i]] = column.data[i]
    return result


def rule_automaton(body, table, inline, sequences, int nfa_limit, int dfa_limit):
    """The deterministic automaton of a rule with body ``body``: a reference to a rule named in
    ``inline`` is built in place from ``table[name].body``, any other one, and a token
    reference, is a symbol edge; ``sequences(ranges)`` gives the UTF-8 byte-range sequences of
    code point ranges. Returns ``(byte_class, table, calls, symbols, accept)``: the local class
    of each byte (uint8), ``table[q, class]`` (int32, -1 for no move; 0 is the start), the
    symbol moves as ``(state, index into symbols, target)`` columns, the symbols in order of
    first use, and each state's acceptance. Raises :class:`AutomatonLimit` past ``nfa_limit``
    NFA states or ``dfa_limit`` deterministic ones."""
    cdef _NFA nfa = _NFA(nfa_limit)
    cdef int32_t start = nfa.state(), end = nfa.state()
    nfa.build(body, start, end, table, inline, sequences)
    eps_off, where = _order(nfa.n, &nfa.eps_src)
    eps_dst = _placed(&nfa.eps_dst, where)
    edge_off, where = _order(nfa.n, &nfa.src)
    edge_lo, edge_hi, edge_dst = _placed(&nfa.lo, where), _placed(&nfa.hi, where), _placed(&nfa.dst, where)
    found = _determinize(nfa.n, eps_off, eps_dst, edge_off, edge_lo, edge_hi, edge_dst, nfa.symbols, start, end,
                         dfa_limit)
    if found is None:
        raise AutomatonLimit("dfa")
    return found


def rule_key(body, table, inline):
    """The cache key of :func:`rule_automaton`'s result for ``body``, and the names of the rules
    it refers to in the order the key numbers them. The key is the body, then the body of each
    rule inlined into it (directly or through others), as one flat tuple of strings and numbers
    in prefix order with arities (so it reads back to one tree); a reference is written as
    inlined or called and the referred rule's number (by first reference), not its name, so
    rules that differ only in the names of the rules they refer to share a key (their automata
    differ only in those names). Flat, the keys cost no per-node objects while cached, and the
    collector skips them. (Built here rather than in Python: it walks every node of every
    compiled rule, a tenth of compiling a typical schema's grammar.)"""
    cdef list atoms = []
    cdef dict numbers = {}
    cdef list named = []
    cdef list todo = [body]
    cdef Py_ssize_t written = 0, i  # referred rules whose inlined body is queued (or that are called)
    while todo or written < len(named):
        if not todo:
            name = named[written]
            written += 1
            if name in inline:
                atoms += ("=", numbers[name])
                todo.append(table[name].body)
            continue
        node = todo.pop()
        kind = type(node)
        if kind is Seq or kind is Alt:
            items = node.items
            atoms += ("S" if kind is Seq else "A", len(items))
            for i in range(len(items) - 1, -1, -1):
                todo.append(items[i])
        elif kind is Rep:
            atoms += ("P", node.low, node.high)
            todo.append(node.item)
        elif kind is Lit:
            atoms += ("L", node.text)
        elif kind is Ref:
            number = numbers.get(node.name)
            if number is None:
                number = numbers[node.name] = len(named)
                named.append(node.name)
            atoms += ("I" if node.name in inline else "R", number)
        elif kind is TokenRef:
            atoms += ("T", node.token, node.negated)
        else:
            ranges = node.code_points() if kind is CharClass else node.charset.ranges
            atoms += ("C", len(ranges))
            for pair in ranges:
                atoms += pair
    return tuple(atoms), tuple(named)


SATURATED = 1 << 62
"""Where :func:`inline_estimate` stops counting (any larger count reads as this)."""


cdef inline int64_t _plus(int64_t a, int64_t b) noexcept:
    return a + b if a + b < SATURATED else SATURATED  # both at most SATURATED: no overflow


cdef int64_t _estimate(object node, set inline, dict estimates, object sequences) except -1:
    kind = type(node)
    cdef int64_t total, copies
    if kind is Seq or kind is Alt:
        total = 2
        for child in node.items:
            total = _plus(total, _estimate(child, inline, estimates, sequences))
        return total
    if kind is Ref:
        return estimates[node.name] if node.name in inline else 1
    if kind is Lit:
        return len(node.text.encode("utf-8")) + 1
    if kind is CharClass or kind is Chars:
        total = 1
        for found in sequences(node.code_points() if kind is CharClass else node.charset.ranges):
            total += len(found)
        return total
    if kind is TokenRef:
        return 1
    copies = min(max(node.low, 1) if node.high is None else max(node.high, 1), SATURATED)
    total = _estimate(node.item, inline, estimates, sequences)
    total = total * copies if total <= SATURATED // copies else SATURATED
    return _plus(total, 2)


def inline_estimate(body, set inline, dict estimates, sequences):
    """NFA states ``body`` takes with the rules of ``inline`` (their ``estimates``) built in
    place: 2 per sequence, alternation or repetition node besides its parts, a repetition's
    item once per copy it may need, a literal's bytes plus one, a class's UTF-8 byte ranges
    (``sequences`` of its code points) plus one, a called rule or token 1. Counts past
    :data:`SATURATED` read as it. (Here rather than in Python: it visits every node of every
    rule of a grammar once.)"""
    return _estimate(body, inline, estimates, sequences)


cdef int _compare(const void* a, const void* b) noexcept nogil:
    cdef int32_t x = (<int32_t*> a)[0]
    cdef int32_t y = (<int32_t*> b)[0]
    return (x > y) - (x < y)


cdef class _Subsets:
    """The deterministic states found so far: their NFA state sets, laid end to end."""

    cdef int32_t[::1] eps_off, eps_dst, stamp
    cdef int32_t[::1] members, member_off, buf
    cdef int32_t n_states, n_members, tick
    cdef int32_t[::1] slots  # open-addressed table of the states by their sets' hash (-1: free)
    cdef uint64_t[::1] hashes  # each state's hash, for probing and growing the table
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
        self.slots = np.full(128, -1, dtype=np.int32)
        self.hashes = np.empty(64, dtype=np.uint64)
        self.limit = limit
        self.end = end
        self.accept = []

    cdef int32_t close(self, int32_t* targets, int32_t count) except -2:
        """The number of the closure of ``targets`` (distinct NFA states), numbering it if it
        is new; -1 when it would be past the limit."""
        cdef int32_t size = 0, i, q, j, t
        # Raw pointers, not memoryview locals: taking a memoryview is two atomic operations on its
        # acquisition count, which were most of this method's time (it runs per move of every state).
        cdef int32_t* buf = &self.buf[0]
        cdef int32_t* stamp = &self.stamp[0]
        cdef const int32_t* eps_off = &self.eps_off[0]
        cdef const int32_t* eps_dst = &self.eps_dst[0]
        cdef int32_t* members
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
        qsort(buf, size, sizeof(int32_t), _compare)
        cdef uint64_t h = 14695981039346656037ULL
        for i in range(size):
            h = (h ^ <uint32_t>buf[i]) * 1099511628211ULL
        h ^= h >> 29
        cdef Py_ssize_t mask = self.slots.shape[0] - 1
        cdef Py_ssize_t slot = <Py_ssize_t>(h & <uint64_t>mask)
        cdef int32_t other
        while self.slots[slot] >= 0:
            other = self.slots[slot]
            if (self.hashes[other] == h and self.member_off[other + 1] - self.member_off[other] == size
                    and memcmp(&self.members[self.member_off[other]], buf, size * sizeof(int32_t)) == 0):
                return other
            slot = (slot + 1) & mask
        if self.n_states >= self.limit:
            return -1
        number = self.n_states
        if self.n_members + size > self.members.shape[0]:
            self.members = np.concatenate((self.members, np.empty(max(size, self.members.shape[0]), dtype=np.int32)))
        if self.n_states + 2 > self.member_off.shape[0]:
            self.member_off = np.concatenate((self.member_off, np.zeros(self.member_off.shape[0], dtype=np.int32)))
            self.hashes = np.concatenate((self.hashes, np.empty(self.hashes.shape[0], dtype=np.uint64)))
        self.hashes[number] = h
        self.slots[slot] = number
        if 2 * (number + 1) > self.slots.shape[0]:  # at most half full
            self._grow()
        members = &self.members[0]
        for i in range(size):
            members[self.n_members + i] = buf[i]
        self.n_members += size
        self.n_states += 1
        self.member_off[self.n_states] = self.n_members
        self.accept.append(stamp[self.end] == self.tick)
        return number


    cdef int _grow(self) except -1:
        """Twice the table, every state placed again by its hash."""
        self.slots = np.full(2 * self.slots.shape[0], -1, dtype=np.int32)
        cdef Py_ssize_t mask = self.slots.shape[0] - 1, slot
        cdef int32_t q
        for q in range(self.n_states + 1):
            slot = <Py_ssize_t>(self.hashes[q] & <uint64_t>mask)
            while self.slots[slot] >= 0:
                slot = (slot + 1) & mask
            self.slots[slot] = q
        return 0


cdef extern from *:
    int __builtin_ctzll(unsigned long long) nogil


cdef inline int32_t _next_mark(const uint64_t* marks, int32_t b) noexcept nogil:
    """The first set bit of ``marks`` (256 bits) at ``b`` or after; 256 when none."""
    cdef int32_t w = b >> 6
    cdef uint64_t word
    if w >= 4:
        return 256
    word = marks[w] & (~0ULL << (b & 63))
    while True:
        if word:
            return (w << 6) + __builtin_ctzll(word)
        w += 1
        if w == 4:
            return 256
        word = marks[w]


cdef object _determinize(int n, int32_t[::1] eps_off, int32_t[::1] eps_dst, int32_t[::1] edge_off,
                         int32_t[::1] edge_lo, int32_t[::1] edge_hi, int32_t[::1] edge_dst, dict symbols,
                         int start, int end, int limit):
    """The subset construction from the closure of ``start`` (``end`` accepting), as
    :func:`rule_automaton` returns it; None past ``limit`` states."""
    cdef _Subsets subsets = _Subsets(eps_off, eps_dst, n, end, limit)
    cdef int32_t one = start
    if subsets.close(&one, 1) < 0:
        return None
    cdef int32_t[::1] single = np.full(n, -1, dtype=np.int32)  # the number of each one-state closure
    cdef Py_ssize_t room = max(n, edge_dst.shape[0], 1)  # targets of one move: at most every edge or state
    cdef int32_t atom_of[257]  # byte -> atom (atom_of[256]: the number of atoms)
    cdef uint8_t ends[257]
    cdef int32_t b, a, k
    for b in range(257):
        ends[b] = 0
    for k in range(edge_dst.shape[0]):
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
    cdef uint64_t marks[4]  # bit b: some edge of the state starts at byte b or ends at byte b - 1
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
        marks[0] = marks[1] = marks[2] = marks[3] = 0
        for i in range(i0, i1):
            s = subsets.members[i]
            moving_on_symbols |= has_symbols[s]
            for e in range(edge_off[s], edge_off[s + 1]):
                seg_lo[m] = edge_lo[e]
                seg_hi[m] = edge_hi[e]
                seg_dst[m] = edge_dst[e]
                marks[edge_lo[e] >> 6] |= 1ULL << (edge_lo[e] & 63)
                if edge_hi[e] < 255:
                    marks[(edge_hi[e] + 1) >> 6] |= 1ULL << ((edge_hi[e] + 1) & 63)
                m += 1
        if m:
            a = 0
            while a < 256:
                b = _next_mark(marks, a + 1)  # the segment [a, b) between two marks
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
    with nogil:
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
    with nogil:
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


cdef inline int32_t _relative(int32_t target, int32_t state) noexcept nogil:
    return target - state if target >= 0 else -2147483648


cdef void _sort_rows(int32_t* order, int32_t* spare, Py_ssize_t count, const int32_t* rows,
                     Py_ssize_t k) noexcept nogil:
    """``order`` (0 .. count - 1) sorted by the rows' bytes (``memcmp``, as numpy orders whole rows
    viewed as raw bytes): a bottom-up merge sort, ``spare`` as scratch."""
    cdef Py_ssize_t width = 1, lo, mid, hi, i, j, out
    cdef size_t size = <size_t>k * sizeof(int32_t)
    cdef int32_t* source = order
    cdef int32_t* target = spare
    cdef int32_t* swap
    while width < count:
        lo = 0
        while lo < count:
            mid = min(lo + width, count)
            hi = min(lo + 2 * width, count)
            i, j, out = lo, mid, lo
            while i < mid and j < hi:
                if memcmp(rows + <Py_ssize_t>source[j] * k, rows + <Py_ssize_t>source[i] * k, size) < 0:
                    target[out] = source[j]
                    j += 1
                else:
                    target[out] = source[i]
                    i += 1
                out += 1
            while i < mid:
                target[out] = source[i]
                i += 1
                out += 1
            while j < hi:
                target[out] = source[j]
                j += 1
                out += 1
            lo = hi
        swap = source
        source = target
        target = swap
        width *= 2
    if source != order:
        for i in range(count):
            order[i] = source[i]


cdef struct _Distinct:  # an open-addressed table of distinct rows of ``width`` int32 values
    int32_t* rows  # [capacity, width]: the rows found so far, in order of first sight
    uint64_t* hashes
    int32_t* slots  # -1: free
    Py_ssize_t count, capacity, size, width


cdef inline uint64_t _hash_row(const int32_t* row, Py_ssize_t width) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t j
    for j in range(width):
        h = (h ^ <uint32_t>row[j]) * 1099511628211ULL
    return h ^ (h >> 29)


cdef int32_t _number(_Distinct* d, const int32_t* row) noexcept nogil:
    """The number of ``row`` among ``d``'s rows, added when new (room for it is the caller's)."""
    cdef uint64_t h = _hash_row(row, d.width)
    cdef Py_ssize_t slot = <Py_ssize_t>(h & <uint64_t>(d.size - 1))
    cdef int32_t other
    while d.slots[slot] >= 0:
        other = d.slots[slot]
        if d.hashes[other] == h and memcmp(d.rows + other * d.width, row, d.width * sizeof(int32_t)) == 0:
            return other
        slot = (slot + 1) & (d.size - 1)
    other = <int32_t>d.count
    d.slots[slot] = other
    d.hashes[other] = h
    memcpy(d.rows + other * d.width, row, d.width * sizeof(int32_t))
    d.count += 1
    return other


cdef int _open(_Distinct* d, Py_ssize_t capacity, Py_ssize_t width) noexcept nogil:
    """Room for ``capacity`` distinct rows (the table at most half full); -1 without memory."""
    d.size = 1
    while d.size < 2 * capacity:
        d.size *= 2
    d.count = 0
    d.capacity = capacity
    d.width = width
    d.rows = <int32_t*>malloc(max(capacity * width, 1) * sizeof(int32_t))
    d.hashes = <uint64_t*>malloc(max(capacity, 1) * sizeof(uint64_t))
    d.slots = <int32_t*>malloc(d.size * sizeof(int32_t))
    if d.rows == NULL or d.hashes == NULL or d.slots == NULL:
        return -1
    memset(d.slots, 0xFF, d.size * sizeof(int32_t))
    return 0


cdef void _close(_Distinct* d) noexcept nogil:
    free(d.rows)
    free(d.hashes)
    free(d.slots)


ctypedef fused _local_target:
    int8_t
    int16_t
    int32_t


cdef int _rule_rows(const _local_target[:, ::1] table, const int32_t[::1] columns, _Distinct* shared,
                    int32_t* group, int32_t* scratch) noexcept nogil:
    """Number each state's relative row over the grammar's classes (``columns``: each class's
    local class) in ``shared``, writing it to ``group``. A rule's own distinct rows are found
    first, over its local classes (fewer than the grammar's, and most states share a row with
    another: the inlined copies of a rule, the bytes of its literals), and only those are read
    through ``columns``. -1 without memory, -2 for a column outside the table."""
    cdef Py_ssize_t n = table.shape[0], width = table.shape[1], k = columns.shape[0], q, j
    cdef _Distinct own
    cdef int32_t i
    cdef int32_t* found
    for j in range(k):
        if not 0 <= columns[j] < width:
            return -2
    if _open(&own, n, width) < 0:
        _close(&own)
        return -1
    for q in range(n):
        for j in range(width):
            scratch[j] = _relative(table[q, j], <int32_t>q)
        group[q] = _number(&own, scratch)
    found = <int32_t*>malloc(max(own.count, 1) * sizeof(int32_t))
    if found == NULL:
        _close(&own)
        return -1
    for i in range(<int32_t>own.count):
        for j in range(k):
            scratch[j] = own.rows[i * width + columns[j]]
        found[i] = _number(shared, scratch)
    for q in range(n):
        group[q] = found[group[q]]
    free(found)
    _close(&own)
    return 0


def rule_move_rows(list tables, const int32_t[:, ::1] columns, int64_t narrow_reach):
    """``(move_rows, move_row)`` of a grammar laid out from its rules' move tables (``tables[r]``:
    local targets by local class, -1 for none; int8, int16 or int32; the rules' states numbered
    one after the other), ``columns[r, k]`` the local class of rule ``r`` for the grammar's
    class ``k``: each distinct row of moves relative to its state (target - state) once, in the
    order of its bytes, and each state's row. The rows are int16 (``INT16_MIN``: no move) when
    no move reaches past ``narrow_reach`` states, else int32 (``INT32_MIN``). A state's
    relative row is the same whatever the rule's offset, so the grammar's dense class table is
    never written: each rule's distinct rows are read through ``columns`` (a dense table is one
    rule whose columns are its classes)."""
    cdef Py_ssize_t n_rules = len(tables), k = columns.shape[1], r, total = 0, widest = k, at = 0, count, g, j
    cdef int64_t reach = -1  # the furthest move; -1 for none
    cdef int32_t value
    cdef int code = 0
    if columns.shape[0] != n_rules:
        raise ValueError(f"{columns.shape[0]} rows of columns for {n_rules} rules")
    arrays = [np.ascontiguousarray(table) for table in tables]
    for table in arrays:
        if table.ndim != 2:
            raise ValueError("a rule's move table is a 2-d array")
        total += table.shape[0]
        widest = max(widest, table.shape[1])
    group_array = np.empty(total, dtype=np.int32)
    cdef int32_t[::1] group = group_array
    cdef const int8_t[:, ::1] narrow_table
    cdef const int16_t[:, ::1] middle_table
    cdef const int32_t[:, ::1] wide_table
    cdef _Distinct shared
    shared.rows = shared.hashes = NULL
    shared.slots = NULL
    cdef int32_t* scratch = <int32_t*>malloc(max(widest, 1) * sizeof(int32_t))
    try:
        if scratch == NULL or _open(&shared, total, k) < 0:
            raise MemoryError("no memory for the grammar's move rows")
        for r in range(n_rules):
            table = arrays[r]
            if table.dtype == np.int8:
                narrow_table = table
                with nogil:
                    code = _rule_rows(narrow_table, columns[r], &shared, &group[at] if total else NULL, scratch)
            elif table.dtype == np.int16:
                middle_table = table
                with nogil:
                    code = _rule_rows(middle_table, columns[r], &shared, &group[at] if total else NULL, scratch)
            elif table.dtype == np.int32:
                wide_table = table
                with nogil:
                    code = _rule_rows(wide_table, columns[r], &shared, &group[at] if total else NULL, scratch)
            else:
                raise ValueError(f"a rule's move table is int8, int16 or int32, not {table.dtype}")
            if code == -1:
                raise MemoryError("no memory for the grammar's move rows")
            if code == -2:
                raise ValueError("a rule's columns name classes it does not have")
            at += table.shape[0]
        count = shared.count
        rows_array = np.empty((count, k), dtype=np.int32)
        order_array = np.arange(count, dtype=np.int32)
        spare_array = np.empty(count, dtype=np.int32)
        _finish(shared.rows, count, k, rows_array, order_array, spare_array, group, &reach)
    finally:
        free(scratch)
        _close(&shared)
    cdef int32_t[:, ::1] rows = rows_array
    cdef int32_t[::1] order = order_array
    cdef int16_t[:, ::1] narrow
    cdef int32_t[:, ::1] wide
    if reach <= narrow_reach or reach < 0:
        ordered = np.empty((count, k), dtype=np.int16)
        narrow = ordered
        with nogil:
            for g in range(count):
                for j in range(k):
                    value = rows[order[g], j]
                    narrow[g, j] = -32768 if value == -2147483648 else <int16_t>value
    else:
        ordered = np.empty((count, k), dtype=np.int32)
        wide = ordered
        with nogil:
            for g in range(count):
                for j in range(k):
                    wide[g, j] = rows[order[g], j]
    return ordered, group_array


cdef void _finish(const int32_t* found, Py_ssize_t count, Py_ssize_t k, int32_t[:, ::1] rows, int32_t[::1] order,
                  int32_t[::1] spare, int32_t[::1] group, int64_t* reach) noexcept nogil:
    """Copy the distinct rows out, find the furthest move, sort the rows by their bytes and
    renumber each state's row by its rank."""
    cdef Py_ssize_t g, j, q
    cdef int32_t value
    for g in range(count):
        for j in range(k):
            value = found[g * k + j]
            rows[g, j] = value
            if value != -2147483648 and (value if value >= 0 else -<int64_t>value) > reach[0]:
                reach[0] = value if value >= 0 else -<int64_t>value
    if count:
        _sort_rows(&order[0], &spare[0], count, &rows[0, 0], k)
    for g in range(count):
        spare[order[g]] = <int32_t>g  # the rank of each row
    for q in range(group.shape[0]):
        group[q] = spare[group[q]]


def cut_per_state(list out, const int64_t[::1] at, const int64_t[::1] first, const int64_t[::1] second,
                  bint share):
    """Write the pairs ``(first[i], second[i])``, sorted by their state ``at[i]``, into ``out``
    as one tuple per state, in their order; with ``share``, equal tuples are one object. A
    state outside ``out`` or arrays of unequal lengths are a ValueError."""
    cdef Py_ssize_t n = at.shape[0], i = 0, j, x, states = len(out)
    cdef dict shared = {}
    if first.shape[0] != n or second.shape[0] != n:
        raise ValueError(f"{n} states given for {first.shape[0]} and {second.shape[0]} pair ends")
    while i < n:
        if not 0 <= at[i] < states:
            raise ValueError(f"state {at[i]} outside the {states} states")
        j = i + 1
        while j < n and at[j] == at[i]:
            j += 1
        edges = tuple([(first[x], second[x]) for x in range(i, j)])
        out[at[i]] = shared.setdefault(edges, edges) if share else edges
        i = j
