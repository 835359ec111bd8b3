# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The token-mask hot path in C: a lazily determinized pushdown swept over the token trie.

A *run state* is a parse state: a set of parse stacks and whether the root rule may end
there. Stacks are interned frames ``(automaton state, parent frame)`` numbered in a C hash
table, a run state is a set of head frames interned the same way, and
each run state's row of transitions (one per byte class) is filled on demand by advancing every head over
the class's byte and closing the result (rule calls pushed, finished rules popped) -- the same
steps as ``structspec.grammar.parse_state``, on integers. A sweep walks the trie depth first
from given nodes, one table lookup per (node, run state) pair; a node whose whole subtree's
rest bytes loop on its run state is accepted whole. Inside a string, the sweep reads the
vocabulary split by the state's loop set instead (``split_sweep``): the tokens of loop bytes
only in one OR, and a small trie of the other tokens' rests. Nothing here creates a Python
object on the way to a mask, and sweeps run with the GIL released (callers serialize calls
per object).
"""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset

import weakref

import numpy as np

from structspec.tokens.trie import NODE

cdef enum:
    TRANS_SHIFT = 8  # a block of the transition table holds 1 << TRANS_SHIFT run states (see row())
    TRANS_BLOCK = 1 << TRANS_SHIFT
    UNKNOWN = -2
    DEAD = -1
    ERR_STACKS = -3  # more than max_stacks heads: GrammarError E110
    ERR_SIZE = -4  # the tables outgrew their limits (or memory): GrammarError E108
    ESCAPE = -5  # a sweep of cut stacks popped into the frame that stands for what was cut off

cdef int32_t NO_MOVE = -2147483648  # structspec.grammar.ruleset.no_move of int32 rows: no move on a class
cdef int16_t NO_MOVE16 = -32768  # the same of int16 rows

cdef int MAX_CLOSED = 16  # run states a probed loop set may wander through
cdef int RUN_BYTES = 4 + 8 + 2 * 16 + 5 * 4 + 3  # the tables' bytes per run state but its transitions (_grow_runs)
cdef int KEY_FILTERS = 8  # first-byte sets whose token words a grammar keeps (see first_bytes())
cdef int MAX_SPLITS = 64  # loop splits one grammar keeps at hand (the vocabulary's cache keeps more)


cdef struct Node:  # one record of structspec.tokens.trie.NODE
    int32_t child_lo, child_hi, row_lo, end_hi, row_hi, height, below_index, byte
    uint64_t rest0, rest1


cdef struct Trie:  # the token trie a sweep walks: the vocabulary's, or the rests of a loop split
    const Node* nodes
    const uint8_t* byte_p  # each node's last byte
    const int32_t* ids_p  # trie row -> token id
    const uint32_t* below  # [big subtrees, n_words]: the mask words of the tokens below
    Py_ssize_t n_words


cdef struct SplitData:
    Trie trie  # the rests
    const uint32_t* unit_p  # [steps, n_loop]: row m - 1, the mask words of the tokens of 1..m loop units
    Py_ssize_t n_loop
    int32_t steps


cdef class Split:
    """One vocabulary's split by a loop set (``structspec.tokens.trie.LoopSplit``) as the sweep
    reads it: the mask words of the tokens made of at most ``m`` loop units for each ``m`` up to
    ``steps``, and the trie of the other tokens' rests, whose depth-1 nodes stand for the units
    before a rest."""

    cdef SplitData data
    cdef readonly int32_t max_id  # the largest token id among the rests
    cdef object _keep

    def __init__(self, unit_words, nodes, trie_byte, below_words, row_ids, int steps):
        unit_words = np.ascontiguousarray(unit_words, np.uint32)
        if not 0 <= steps < 256:
            raise ValueError(f"a split reads 0..255 units, not {steps}")
        kept = point_trie(&self.data.trie, nodes, trie_byte, below_words, row_ids, steps)
        if unit_words.ndim != 2 or unit_words.shape[0] != steps or unit_words.shape[1] != self.data.trie.n_words:
            raise ValueError("a split's words by unit count need one row per step, as wide as its mask words")
        self._keep = (unit_words, kept)
        cdef const uint32_t[:, ::1] w = unit_words
        self.data.unit_p = &w[0, 0] if w.shape[0] and w.shape[1] else NULL
        self.data.n_loop = w.shape[1]
        self.data.steps = steps
        self.max_id = int(kept[3].max(initial=-1))


cdef dict _FITTING = {}  # id of read-only node records -> weak references to the read-only arrays they fit


cdef tuple point_trie(Trie* out, nodes, trie_byte, below_words, row_ids, int first_bytes):
    """Point ``out`` at a token trie's arrays (:data:`structspec.tokens.trie.NODE` records,
    each node's byte, the big subtrees' mask words, each row's token id) once they are checked
    against each other (a ValueError otherwise, see trie_fits(); read-only arrays are checked
    once, not for every grammar over the vocabulary). Returns the contiguous arrays, which
    must outlive ``out``."""
    trie_byte = np.ascontiguousarray(trie_byte, np.uint8)
    below_words = np.ascontiguousarray(below_words, np.uint32)
    row_ids = np.ascontiguousarray(row_ids, np.int32)
    if getattr(nodes, "dtype", None) != NODE or nodes.ndim != 1 or len(nodes) == 0 or len(trie_byte) != len(nodes):
        raise ValueError("a token trie needs node records (structspec.tokens.trie.NODE), at least the root, one byte each")
    if below_words.ndim != 2:
        raise ValueError("a token trie's subtree mask words must be a table")
    nodes = np.ascontiguousarray(nodes)
    cdef const uint8_t[::1] raw = nodes.view(np.uint8).reshape(-1)
    cdef const uint8_t[::1] b = trie_byte
    cdef const uint32_t[:, ::1] below = below_words
    cdef const int32_t[::1] ids = row_ids
    out.nodes = <const Node*> &raw[0]
    out.byte_p = &b[0]
    out.ids_p = &ids[0] if ids.shape[0] else NULL
    out.below = &below[0, 0] if below.shape[0] and below.shape[1] else NULL
    out.n_words = below.shape[1]
    arrays = (nodes, trie_byte, below_words, row_ids)
    known = _FITTING.get(id(nodes))
    if known is not None and all(ref() is a for ref, a in zip(known, arrays)) and first_bytes >= known[4]:
        return arrays
    if not trie_fits(out, b.shape[0], ids.shape[0], below.shape[0], first_bytes):
        raise ValueError("a token trie does not fit its rows, nodes and mask words")
    if not any(a.flags.writeable for a in arrays):
        if len(_FITTING) >= 64:
            _FITTING.clear()
        _FITTING[id(nodes)] = (*map(weakref.ref, arrays), first_bytes)
    return arrays


cdef bint trie_fits(const Trie* trie, Py_ssize_t n, Py_ssize_t rows, Py_ssize_t n_below, int first_bytes) noexcept nogil:
    """Whether each node's children come after it and among the ``n`` nodes, its rows lie within
    the ``rows`` rows (in order: its own, then those below), its subtree words within the
    ``n_below`` rows of the table, every token id is not negative, and the root's children's
    bytes are at most ``first_bytes``."""
    cdef Py_ssize_t v
    cdef const Node* rec
    for v in range(n):
        rec = &trie.nodes[v]
        if not (0 <= rec.row_lo <= rec.end_hi <= rec.row_hi <= rows and rec.below_index < n_below):
            return 0
        if rec.child_hi > rec.child_lo and not (rec.child_lo > v and rec.child_hi <= n):
            return 0
    for v in range(rows):
        if trie.ids_p[v] < 0:
            return 0
    rec = &trie.nodes[0]
    for v in range(rec.child_lo, rec.child_hi):
        if trie.byte_p[v] > first_bytes:
            return 0
    return 1


cdef packed struct FrameSlot:  # 12 bytes: a frame's key and number side by side, one cache line read
    int64_t key
    int32_t val


cdef struct IVec:
    int32_t* data
    Py_ssize_t size
    Py_ssize_t cap


cdef inline void ivec_init(IVec* v) noexcept nogil:
    v.data = NULL
    v.size = v.cap = 0


cdef int ivec_reserve(IVec* v, Py_ssize_t size) noexcept nogil:
    """Room for ``size`` values in ``v``; -1 when memory runs out."""
    cdef Py_ssize_t cap = v.cap if v.cap >= 64 else 64
    cdef int32_t* grown
    if size <= v.cap:
        return 0
    while cap < size:
        cap *= 2
    grown = <int32_t*> realloc(v.data, cap * sizeof(int32_t))
    if grown == NULL:
        return -1
    v.data = grown
    v.cap = cap
    return 0


cdef inline int ivec_push(IVec* v, int32_t x) noexcept nogil:
    cdef Py_ssize_t cap
    cdef int32_t* grown
    if v.size == v.cap:
        cap = 64 if v.cap < 64 else 2 * v.cap
        grown = <int32_t*> realloc(v.data, cap * sizeof(int32_t))
        if grown == NULL:
            return -1
        v.data = grown
        v.cap = cap
    v.data[v.size] = x
    v.size += 1
    return 0


cdef inline uint64_t mix(uint64_t x) noexcept nogil:
    x ^= x >> 30
    x *= 0xbf58476d1ce4e5b9ULL
    x ^= x >> 27
    x *= 0x94d049bb133111ebULL
    x ^= x >> 31
    return x


cdef int grow(void** pointer, Py_ssize_t old_bytes, Py_ssize_t new_bytes, int fill) noexcept nogil:
    """Reallocate ``*pointer`` to ``new_bytes``, the new tail set to the byte ``fill``."""
    cdef void* grown = realloc(pointer[0], new_bytes)
    if grown == NULL:
        return -1
    memset(<char*> grown + old_bytes, fill, new_bytes - old_bytes)
    pointer[0] = grown
    return 0


cdef class Pushdown:
    """One grammar's lazily determinized pushdown over one vocabulary's token trie.

    Built from flat arrays only (see ``structspec.masks.runner``); every table it fills is
    private C memory, grown on demand up to ``max_frames`` frames and ``max_states`` run states.
    Not thread-safe by itself: the caller holds a lock around :meth:`mask` and :meth:`release`.
    """

    # grammar (read-only, owned by the numpy arrays kept below)
    cdef const int32_t[:, ::1] move_rows  # shared rows of moves relative to the state (see move()), int32
    cdef const int16_t[:, ::1] move_rows16  # or int16 (narrow)
    cdef bint narrow
    cdef const int32_t[::1] move_row  # each automaton state's row
    cdef const int32_t[::1] byte_class
    cdef const int32_t[::1] ref_off
    cdef const int32_t[::1] ref_start
    cdef const int32_t[::1] ref_ret
    cdef const uint8_t[::1] final
    cdef const uint8_t[::1] movable
    cdef const uint8_t[::1] sink
    cdef const uint8_t[::1] plain  # only byte moves: not final, no calls, no token edges
    cdef const int32_t[::1] multi_seq  # UTF-8 multi-byte sequences: offsets into multi_pos
    cdef const int32_t[::1] multi_pos  # per sequence position: offsets into multi_cls
    cdef const int32_t[::1] multi_cls  # the byte classes of each position
    cdef int n_classes
    cdef int n_states
    # trie (read-only)
    cdef Trie main  # the vocabulary's
    cdef Trie cur  # the one the sweep walks now: main, or a split's rests
    cdef object split_of  # see mask()
    cdef dict splits  # loop set -> Split (or None: not worth one), asked of split_of once
    cdef readonly int split_bits  # loop bits (of 128) from which a state's sweep reads a loop split
    cdef readonly int split_steps  # the units a loop split reads before a rest, at most
    cdef const int32_t* class_p
    cdef object _keep  # the arrays above, kept alive
    # frames
    cdef int32_t* f_state
    cdef int32_t* f_parent
    cdef int32_t* f_seen
    cdef readonly Py_ssize_t n_frames
    cdef Py_ssize_t cap_frames
    cdef FrameSlot* fh_slots  # the frames' hash table: key (state, parent), value the frame; key -1 when empty
    cdef Py_ssize_t fh_cap
    # run states
    cdef int32_t* rs_off
    cdef IVec rs_heads
    cdef uint64_t* rs_hash
    cdef Py_ssize_t n_runs, cap_runs
    cdef int32_t* rh_slots
    cdef Py_ssize_t rh_cap
    cdef int32_t** trans  # blocks of TRANS_BLOCK run states' rows: growing never moves a filled row
    cdef Py_ssize_t n_blocks
    cdef uint8_t* pops
    cdef uint64_t* loops
    cdef uint8_t* has_loop
    cdef int32_t* visits
    cdef int32_t* mb_end  # see char_end(): UNKNOWN until computed, per automaton state
    cdef int32_t* q_same  # see same_as(): UNKNOWN until computed, per automaton state
    cdef uint64_t* q_loops  # see _self_loops(): each automaton state's self-loop words, once q_looped[q]
    cdef uint8_t* q_looped
    cdef int32_t* uni_next  # see uniform(): UNKNOWN until computed, DEAD for none
    cdef uint64_t* uni_words
    cdef uint8_t* uni_chars
    cdef int32_t* jump_len  # see segment(): -1 until computed
    cdef int32_t* jump_to
    cdef int32_t* rs_seen
    # scratch
    cdef IVec tops, todo, heads, stack, found, chars, chain, chain_off, chain_cut  # chain*: mask()'s stacks
    cdef IVec ahead  # split_sweep()'s chain states
    cdef IVec moved  # fill()'s (state, parent) pairs its heads move to
    cdef IVec last_moved  # those of the last fill() that closed, and the run state it closed to
    cdef int32_t last_closed
    cdef IVec mb  # chars_lead()'s run states
    cdef uint32_t* gwords  # key_sweep()'s words of the tokens read through the split
    cdef uint64_t filter_keys[2 * 8]  # first_bytes(): the byte sets (two words each) and their token words
    cdef uint32_t* filter_words[8]
    cdef int n_filters, next_filter
    cdef int32_t max_id
    cdef readonly Py_ssize_t expanded, probes, split_sweeps, key_sweeps  # counters for profiling: trie nodes
    # expanded, loop probes, sweeps through a loop split, and those of them one byte in (key_sweep())
    cdef readonly int probe_at  # expansions of a run state after which its loop set is probed
    cdef readonly int chains_after  # expansions of a run state after which its counted chain is tried
    cdef readonly int chain_height  # subtrees taller than this are expanded, not checked along a chain
    cdef int32_t stamp, rs_stamp
    cdef int32_t opaque  # the frame under cut stacks (see mask()), -1 until made
    cdef readonly Py_ssize_t max_frames, max_states, max_stacks

    def __cinit__(self):
        self.f_state = self.f_parent = self.f_seen = NULL
        self.fh_slots = NULL
        self.rs_off = self.rh_slots = self.visits = self.rs_seen = NULL
        self.trans = NULL
        self.n_blocks = 0
        self.uni_next = self.jump_len = self.jump_to = self.mb_end = self.q_same = NULL
        self.q_loops = NULL
        self.q_looped = NULL
        self.gwords = NULL
        self.n_filters = self.next_filter = 0
        self.uni_words = NULL
        self.uni_chars = NULL
        self.rs_hash = self.loops = NULL
        self.pops = self.has_loop = NULL
        ivec_init(&self.rs_heads); ivec_init(&self.tops); ivec_init(&self.todo); ivec_init(&self.heads)
        ivec_init(&self.stack); ivec_init(&self.found); ivec_init(&self.chars)
        ivec_init(&self.chain); ivec_init(&self.chain_off); ivec_init(&self.chain_cut); ivec_init(&self.ahead); ivec_init(&self.mb)
        ivec_init(&self.moved); ivec_init(&self.last_moved)

    def __init__(self, move_rows, move_row, byte_class, ref_off, ref_start, ref_ret, final, movable, sink, plain,
                 multi_seq, multi_pos, multi_cls, nodes, trie_byte, below_words, row_ids, Py_ssize_t max_frames, Py_ssize_t max_states, Py_ssize_t max_stacks,
                 int probe_at=256, int chains_after=8, int chain_height=32, split_of=None, int split_bits=64,
                 int split_steps=16):
        self._keep = (move_rows, move_row, byte_class, ref_off, ref_start, ref_ret, final, movable, sink, plain, multi_seq,
                      multi_pos, multi_cls)
        self.narrow = move_rows.dtype.itemsize == 2
        if self.narrow:
            self.move_rows16 = move_rows
        else:
            self.move_rows = move_rows
        self.move_row = move_row
        self.byte_class = byte_class
        self.ref_off = ref_off
        self.ref_start = ref_start
        self.ref_ret = ref_ret
        self.final = final
        self.movable = movable
        self.sink = sink
        self.plain = plain
        self.multi_seq = multi_seq
        self.multi_pos = multi_pos
        self.multi_cls = multi_cls
        self.class_p = &self.byte_class[0]
        trie = point_trie(&self.main, nodes, trie_byte, below_words, row_ids, 255)
        self.cur = self.main
        self.split_of = split_of
        self.splits = {}
        self.split_bits = split_bits
        self.split_steps = split_steps
        if not 1 <= split_steps < 256:
            raise ValueError(f"a loop split reads 1..255 units, not {split_steps}")
        self.n_states = move_row.shape[0]
        self.max_id = int(trie[3].max(initial=-1))
        self._keep += trie
        self.probe_at = probe_at
        self.chains_after = chains_after
        self.chain_height = chain_height
        self.n_classes = move_rows.shape[1]
        self.max_frames, self.max_states, self.max_stacks = max_frames, max_states, max_stacks
        self.stamp = self.rs_stamp = 0
        self.opaque = -1
        # no tables until the first mask (see reset()): a grammar never masked holds none

    def __dealloc__(self):
        self.free_tables()
        free(self.tops.data); free(self.todo.data); free(self.heads.data)
        free(self.stack.data); free(self.found.data); free(self.chars.data)
        free(self.chain.data); free(self.chain_off.data); free(self.chain_cut.data); free(self.ahead.data); free(self.mb.data)
        free(self.moved.data); free(self.last_moved.data)
        self.free_filters()

    cdef void free_filters(self) noexcept nogil:
        cdef int k
        for k in range(self.n_filters):
            free(self.filter_words[k])
        free(self.gwords)
        self.gwords = NULL
        self.n_filters = self.next_filter = 0

    @property
    def n_run_states(self) -> int:
        return self.n_runs

    @property
    def nbytes(self) -> int:
        """Bytes of the tables this object allocated (the grammar and trie arrays aside)."""
        return (self.cap_frames * 12 + self.fh_cap * 12 + self.n_blocks * TRANS_BLOCK * 4 * self.n_classes
                + self.cap_runs * RUN_BYTES
                + self.rh_cap * 4 + self.rs_heads.cap * 4 + (self.n_states * 25 if self.mb_end != NULL else 0)
                + (self.n_filters + (self.gwords != NULL)) * self.main.n_words * 4)

    cdef inline int32_t move(self, int32_t q, int c) noexcept nogil:
        """Automaton state ``q``'s move on byte class ``c``, DEAD for none."""
        cdef int32_t d
        if self.narrow:
            d = self.move_rows16[self.move_row[q], c]
            return DEAD if d == NO_MOVE16 else q + d
        d = self.move_rows[self.move_row[q], c]
        return DEAD if d == NO_MOVE else q + d

    # -- storage -----------------------------------------------------------------------------
    cdef int _grow_frames(self) noexcept nogil:
        cdef Py_ssize_t old = self.cap_frames, new = 4096 if old == 0 else old + old // 2
        if (grow(<void**> &self.f_state, old * 4, new * 4, 0) or grow(<void**> &self.f_parent, old * 4, new * 4, 0)
                or grow(<void**> &self.f_seen, old * 4, new * 4, 0)):
            return -1
        self.cap_frames = new
        return 0

    cdef int _rehash_frames(self, Py_ssize_t cap) noexcept nogil:
        cdef FrameSlot* slots = <FrameSlot*> malloc(cap * sizeof(FrameSlot))
        cdef Py_ssize_t i, slot
        if slots == NULL:
            return -1
        for i in range(cap):
            slots[i].key = -1
        for i in range(self.fh_cap):
            if self.fh_slots[i].key >= 0:
                slot = mix(self.fh_slots[i].key) & (cap - 1)
                while slots[slot].key >= 0:
                    slot = (slot + 1) & (cap - 1)
                slots[slot] = self.fh_slots[i]
        free(self.fh_slots)
        self.fh_slots, self.fh_cap = slots, cap
        return 0

    cdef int32_t frame(self, int32_t state, int32_t parent) noexcept nogil:
        """The interned frame ``state`` on ``parent`` (-1: none), or ERR_SIZE; an automaton
        state stands for itself or for the state it behaves as (same_as())."""
        cdef int64_t key
        cdef Py_ssize_t slot
        cdef int32_t found
        if state < self.n_states:
            found = self.q_same[state]
            state = found if found != UNKNOWN else self.same_as(state)
        key = (<int64_t> state << 32) | <uint32_t> (parent + 1)
        slot = mix(key) & (self.fh_cap - 1)
        while self.fh_slots[slot].key >= 0:
            if self.fh_slots[slot].key == key:
                return self.fh_slots[slot].val
            slot = (slot + 1) & (self.fh_cap - 1)
        if self.n_frames >= self.max_frames:
            return ERR_SIZE
        if self.n_frames == self.cap_frames and self._grow_frames():
            return ERR_SIZE
        found = <int32_t> self.n_frames
        self.n_frames += 1
        self.f_state[found] = state
        self.f_parent[found] = parent
        self.fh_slots[slot].key = key
        self.fh_slots[slot].val = found
        if 2 * self.n_frames > self.fh_cap and self._rehash_frames(2 * self.fh_cap):
            return ERR_SIZE
        return found

    cdef int32_t same_as(self, int32_t q) noexcept nogil:
        """The automaton state frames of ``q`` stand on: the state of its first move when that
        one moves to the same states on every class, calls the same rules with the same returns
        and has the same flags (a rule's start state beside the loop state of ``x*``, which the
        compiler keeps apart), so that a string's characters that re-enter the rule come back to
        the same run state; else ``q`` itself. Computed once per state."""
        cdef int32_t found = self.q_same[q], t = DEAD
        cdef int c
        cdef Py_ssize_t i, j
        if found != UNKNOWN:
            return found
        self.q_same[q] = q  # while the first move's own is computed
        for c in range(self.n_classes):
            t = self.move(q, c)
            if t >= 0:
                break
        if t < 0 or t == q or self.final[q] != self.final[t] or self.movable[q] != self.movable[t]:
            return q
        if (self.sink[q] != self.sink[t] or self.plain[q] != self.plain[t]
                or self.ref_off[q + 1] - self.ref_off[q] != self.ref_off[t + 1] - self.ref_off[t]):
            return q
        for c in range(self.n_classes):
            if self.move(q, c) != self.move(t, c):
                return q
        j = self.ref_off[t]
        for i in range(self.ref_off[q], self.ref_off[q + 1]):
            if self.ref_start[i] != self.ref_start[j] or self.ref_ret[i] != self.ref_ret[j]:
                return q
            j += 1
        found = self.same_as(t)
        self.q_same[q] = found
        return found

    cdef int _grow_runs(self) noexcept nogil:
        cdef Py_ssize_t old = self.cap_runs, new = 256 if old == 0 else old + old // 2
        cdef Py_ssize_t k = self.n_classes
        if (grow(<void**> &self.rs_off, (old + 1) * 4 if old else 4, (new + 1) * 4, 0)
                or grow(<void**> &self.rs_hash, old * 8, new * 8, 0)
                or grow(<void**> &self.pops, old, new, 0) or grow(<void**> &self.loops, old * 16, new * 16, 0)
                or grow(<void**> &self.has_loop, old, new, 0) or grow(<void**> &self.visits, old * 4, new * 4, 0)
                or grow(<void**> &self.rs_seen, old * 4, new * 4, 0)
                or grow(<void**> &self.uni_next, old * 4, new * 4, 0xfe)
                or grow(<void**> &self.uni_words, old * 16, new * 16, 0)
                or grow(<void**> &self.uni_chars, old, new, 0)
                or grow(<void**> &self.jump_len, old * 4, new * 4, 0xff)
                or grow(<void**> &self.jump_to, old * 4, new * 4, 0)):
            return -1
        cdef Py_ssize_t i, blocks = (new + TRANS_BLOCK - 1) // TRANS_BLOCK
        cdef int32_t* block
        if grow(<void**> &self.trans, self.n_blocks * sizeof(int32_t*), blocks * sizeof(int32_t*), 0):
            return -1
        while self.n_blocks < blocks:
            block = <int32_t*> malloc(TRANS_BLOCK * k * 4)
            if block == NULL:
                return -1
            for i in range(TRANS_BLOCK * k):
                block[i] = UNKNOWN
            self.trans[self.n_blocks] = block
            self.n_blocks += 1
        for i in range(old, new):
            self.uni_next[i] = UNKNOWN
        self.cap_runs = new
        return 0

    cdef int _rehash_runs(self, Py_ssize_t cap) noexcept nogil:
        cdef int32_t* slots = <int32_t*> malloc(cap * sizeof(int32_t))
        cdef Py_ssize_t r, slot
        if slots == NULL:
            return -1
        memset(slots, 0xff, cap * sizeof(int32_t))
        for r in range(self.n_runs):
            slot = self.rs_hash[r] & (cap - 1)
            while slots[slot] >= 0:
                slot = (slot + 1) & (cap - 1)
            slots[slot] = <int32_t> r
        free(self.rh_slots)
        self.rh_slots, self.rh_cap = slots, cap
        return 0

    cdef int32_t intern_run(self, IVec* heads, bint accepting) noexcept nogil:
        """The run state of the set ``heads`` (distinct frames, in any order) and ``accepting``,
        numbered on first sight. Its hash is a sum over the heads, so no order is needed: a
        candidate of the same hash and size is the same set when each of its heads is among
        ``heads`` (marked in ``f_seen``)."""
        cdef uint64_t h = mix(<uint64_t> accepting + 0x9e3779b97f4a7c15ULL)
        cdef Py_ssize_t i, slot, n = heads.size
        cdef int32_t r, lo
        cdef bint marked = 0
        for i in range(n):
            h += mix(<uint64_t> heads.data[i] + 0x9e3779b97f4a7c15ULL)
        slot = h & (self.rh_cap - 1)
        while self.rh_slots[slot] >= 0:
            r = self.rh_slots[slot]
            if self.rs_hash[r] == h and self.pops[r] == accepting and self.rs_off[r + 1] - self.rs_off[r] == n:
                if not marked:
                    self.next_stamp()
                    for i in range(n):
                        self.f_seen[heads.data[i]] = self.stamp
                    marked = 1
                lo = self.rs_off[r]
                for i in range(n):
                    if self.f_seen[self.rs_heads.data[lo + i]] != self.stamp:
                        break
                else:
                    return r
            slot = (slot + 1) & (self.rh_cap - 1)
        if self.n_runs >= self.max_states:
            return ERR_SIZE
        if self.n_runs == self.cap_runs and self._grow_runs():
            return ERR_SIZE
        r = <int32_t> self.n_runs
        for i in range(n):
            if ivec_push(&self.rs_heads, heads.data[i]):
                return ERR_SIZE
        self.n_runs += 1
        self.rs_off[r + 1] = <int32_t> self.rs_heads.size
        self.rs_hash[r] = h
        self.pops[r] = accepting
        self.rh_slots[slot] = r
        self._self_loops(r)
        if 2 * self.n_runs > self.rh_cap and self._rehash_runs(2 * self.rh_cap):
            return ERR_SIZE
        return r

    cdef void _self_loops(self, int32_t r) noexcept nogil:
        """The bytes on which every stack of ``r`` stays put: its heads' shared self-loops (the
        words of each automaton state, computed once, ANDed: set_words commutes with the AND)."""
        cdef Py_ssize_t i
        cdef int32_t q
        cdef int lo = self.rs_off[r], hi = self.rs_off[r + 1]
        cdef uint64_t low = ~(<uint64_t> 0), high = ~(<uint64_t> 0)
        if lo == hi:
            return
        for i in range(lo, hi):
            q = self.f_state[self.rs_heads.data[i]]
            if not self.q_looped[q]:
                self._state_loops(q)
            low &= self.q_loops[2 * q]
            high &= self.q_loops[2 * q + 1]
        self.loops[2 * r] |= low
        self.loops[2 * r + 1] |= high
        self.has_loop[r] = (self.loops[2 * r] | self.loops[2 * r + 1]) != 0

    cdef void _state_loops(self, int32_t q) noexcept nogil:
        """The loop words of the bytes on which automaton state ``q`` moves to itself."""
        cdef uint8_t cls_ok[256]
        cdef uint8_t ok[256]
        cdef Py_ssize_t c, b
        for c in range(self.n_classes):
            cls_ok[c] = self.move(q, c) == q
        for b in range(256):
            ok[b] = cls_ok[self.byte_class[b]]
        set_words(ok, 0, &self.q_loops[2 * q], &self.q_loops[2 * q + 1])
        self.q_looped[q] = 1

    cdef void _set_loops(self, int32_t r, uint8_t* ok, bint utf8) noexcept nogil:
        """OR into ``loops[r]`` the loop words of the bytes ``ok`` (see :func:`loop_words`)."""
        cdef uint64_t low, high
        set_words(ok, utf8, &low, &high)
        self.loops[2 * r] |= low
        self.loops[2 * r + 1] |= high
        self.has_loop[r] = (self.loops[2 * r] | self.loops[2 * r + 1]) != 0

    cdef inline void next_stamp(self) noexcept nogil:
        """A fresh mark for ``f_seen`` (frames visited by a closure, or heads being compared)."""
        self.stamp += 1
        if self.stamp == 0x7fffffff:
            memset(self.f_seen, 0, self.cap_frames * 4)
            self.stamp = 1

    # -- the pushdown ------------------------------------------------------------------------
    cdef int32_t close(self, IVec* tops) noexcept nogil:
        """The run state of the closure of the frames ``tops`` (rule calls pushed, finished
        rules popped), DEAD when nothing is left, or an error code."""
        cdef IVec* todo = &self.todo
        cdef IVec* heads = &self.heads
        cdef Py_ssize_t i
        cdef int32_t top, q, parent, below, callee
        cdef bint accepting = 0
        self.next_stamp()
        todo.size = heads.size = 0
        for i in range(tops.size):
            if ivec_push(todo, tops.data[i]):
                return ERR_SIZE
        while todo.size:
            todo.size -= 1
            top = todo.data[todo.size]
            if self.f_seen[top] == self.stamp:
                continue
            self.f_seen[top] = self.stamp
            q = self.f_state[top]
            parent = self.f_parent[top]
            if self.movable[q]:
                if ivec_push(heads, top):
                    return ERR_SIZE
            for i in range(self.ref_off[q], self.ref_off[q + 1]):
                below = parent if self.sink[self.ref_ret[i]] else self.frame(self.ref_ret[i], parent)
                if below < -1:
                    return below
                callee = self.frame(self.ref_start[i], below)
                if callee < 0:
                    return callee
                if ivec_push(todo, callee):
                    return ERR_SIZE
            if self.final[q]:
                if parent < 0:
                    accepting = 1
                elif parent == self.opaque:
                    return ESCAPE
                elif ivec_push(todo, parent):
                    return ERR_SIZE
        if heads.size > self.max_stacks:
            return ERR_STACKS
        if heads.size == 0 and not accepting:
            return DEAD
        return self.intern_run(heads, accepting)

    cdef inline int32_t* row(self, int32_t r) noexcept nogil:
        """Run state ``r``'s transitions, one per byte class (UNKNOWN until filled)."""
        return self.trans[r >> TRANS_SHIFT] + (r & (TRANS_BLOCK - 1)) * self.n_classes

    cdef int32_t fill(self, int32_t r, int c) noexcept nogil:
        """``trans[r, c]``, computed on first use. A fill whose heads move to the same (state,
        parent) pairs as the last closing fill's takes that fill's run state: a closure is a
        function of the frames moved to alone (sibling bytes that keep only the free key, most
        bytes of a uniform step)."""
        cdef int32_t found = self.row(r)[c]
        cdef Py_ssize_t i
        cdef int32_t h, q2, top
        cdef IVec* moved = &self.moved
        if found != UNKNOWN:
            return found
        moved.size = 0
        for i in range(self.rs_off[r], self.rs_off[r + 1]):
            h = self.rs_heads.data[i]
            q2 = self.move(self.f_state[h], c)
            if q2 >= 0 and (ivec_push(moved, q2) or ivec_push(moved, self.f_parent[h])):
                return ERR_SIZE
        if moved.size == 0:
            found = DEAD
        elif (moved.size == self.last_moved.size
                and memcmp(moved.data, self.last_moved.data, moved.size * sizeof(int32_t)) == 0):
            found = self.last_closed
        else:
            self.tops.size = 0
            for i in range(0, moved.size, 2):
                top = self.frame(moved.data[i], moved.data[i + 1])
                if top < 0:
                    return top
                if ivec_push(&self.tops, top):
                    return ERR_SIZE
            found = self.close(&self.tops)
            if found >= 0:
                self.last_moved.size = 0
                if ivec_reserve(&self.last_moved, moved.size):
                    return ERR_SIZE
                memcpy(self.last_moved.data, moved.data, moved.size * sizeof(int32_t))
                self.last_moved.size = moved.size
                self.last_closed = found
        if found >= DEAD:
            self.row(r)[c] = found
        return found

    # -- loop probes -------------------------------------------------------------------------
    cdef int _add_reached(self, int32_t target, int32_t step, int32_t* reached_step) noexcept nogil:
        """Remember ``target`` (first reached by ``step``); -1 when the closure overflows."""
        cdef Py_ssize_t i
        for i in range(self.found.size):
            if self.found.data[i] == target:
                return 0
        if self.found.size >= MAX_CLOSED + 1:
            return -1
        reached_step[self.found.size] = step
        return ivec_push(&self.found, target)

    cdef int32_t _broken_step(self, int32_t state, uint8_t* allowed, bint utf8) noexcept nogil:
        """The step to drop (a class, or n_classes for "whole characters") so that the run
        states reached from ``state`` by ``allowed`` classes (and characters) all stay alive
        among at most MAX_CLOSED; -1 when none needs dropping, -2 on overflow, -3 on error."""
        cdef int32_t reached_step[32]
        cdef Py_ssize_t at = 0, i, s
        cdef int32_t current, c, t, via, step, utf8_step = self.n_classes
        self.found.size = 0
        ivec_push(&self.found, state)
        reached_step[0] = -1
        while at < self.found.size:
            current = self.found.data[at]
            via = reached_step[at]
            at += 1
            for c in range(self.n_classes):
                if not allowed[c]:
                    continue
                t = self.fill(current, c)
                if t < DEAD:
                    return -3
                step = c if via < 0 else via
                if t == DEAD:
                    return step
                if self._add_reached(t, step, reached_step):
                    return -2
            if not utf8:
                continue
            step = utf8_step if via < 0 else via
            for s in range(self.multi_seq.shape[0] - 1):
                t = self.char_states(current, s, &self.chars)
                if t == DEAD:
                    return step
                if t < 0:
                    return -3
                for i in range(self.chars.size):
                    if self._add_reached(self.chars.data[i], step, reached_step):
                        return -2
        return -1

    cdef void probe(self, int32_t state) noexcept nogil:
        """Learn a loop set of ``state``: the largest set of byte classes (and, if possible,
        whole multi-byte characters) under which the run states reachable from it stay few
        and all alive, found by dropping the step that first reached a breaking state."""
        cdef uint8_t allowed[256]
        cdef uint8_t ok[256]
        cdef bint utf8 = 1
        cdef int32_t c, broken, t
        cdef int b
        for c in range(self.n_classes):
            t = self.fill(state, c)
            if t < DEAD:
                return
            allowed[c] = t >= 0
        while True:
            broken = self._broken_step(state, allowed, utf8)
            if broken == -1:
                break
            if broken < -1:
                return
            if broken == self.n_classes:
                utf8 = 0
            else:
                allowed[broken] = 0
        for b in range(256):
            ok[b] = allowed[self.byte_class[b]]
        self._set_loops(state, ok, utf8)

    # -- counted repetition -------------------------------------------------------------------
    cdef int32_t uniform(self, int32_t s) noexcept nogil:
        """The run state most bytes lead ``s`` to, in ``uni_words[s]`` the loop words of the
        bytes (and, if every one does, the whole multi-byte characters) that lead there, and
        in ``uni_chars[s]`` whether whole characters do;
        DEAD when every byte dies, an error code on error. A counted repetition (``x{16}``,
        a ``maxLength`` string) is a chain of such steps, one state per count."""
        cdef int32_t found = self.uni_next[s], t, best = DEAD
        cdef int32_t counts[256]
        cdef int32_t targets[256]
        cdef uint8_t ok[256]
        cdef int n_targets = 0, c, b, i, most = 0
        cdef uint64_t low, high
        if found != UNKNOWN:
            return found
        for c in range(self.n_classes):
            t = self.fill(s, c)
            if t < DEAD:
                return t
        for b in range(256):
            t = self.row(s)[self.byte_class[b]]
            if t < 0:
                continue
            for i in range(n_targets):
                if targets[i] == t:
                    counts[i] += 1
                    break
            else:
                targets[n_targets] = t
                counts[n_targets] = 1
                n_targets += 1
        for i in range(n_targets):
            if counts[i] > most:
                most, best = counts[i], targets[i]
        if best >= 0:
            for b in range(256):
                ok[b] = self.row(s)[self.byte_class[b]] == best
            # whole characters too: told from the automaton, else by filling the run states they pass
            self.uni_chars[s] = self.chars_uniform(s, ok) or self.chars_lead(s, best)
            set_words(ok, self.uni_chars[s], &low, &high)
            self.uni_words[2 * s] = low
            self.uni_words[2 * s + 1] = high
        self.uni_next[s] = best
        return best

    cdef int32_t char_end(self, int32_t q) noexcept nogil:
        """The automaton state every well-formed multi-byte character leads ``q`` to through
        plain states (byte moves only), DEAD when none can start, UNKNOWN when they differ
        (or pass a state with calls or ends)."""
        cdef int32_t found = self.mb_end[q], x, y, end = UNKNOWN
        cdef Py_ssize_t seq, p, k
        cdef bint dead = 1
        if found != UNKNOWN or q >= self.n_states:
            return found
        for seq in range(self.multi_seq.shape[0] - 1):
            p = self.multi_seq[seq]
            for k in range(self.multi_pos[p], self.multi_pos[p + 1]):
                if self.move(q, self.multi_cls[k]) >= 0:
                    dead = 0
        if dead:
            self.mb_end[q] = DEAD
            return DEAD
        for seq in range(self.multi_seq.shape[0] - 1):
            x = q
            for p in range(self.multi_seq[seq], self.multi_seq[seq + 1]):
                if p > self.multi_seq[seq] and not self.plain[x]:
                    return self._no_char_end(q)
                y = UNKNOWN
                for k in range(self.multi_pos[p], self.multi_pos[p + 1]):
                    if y == UNKNOWN:
                        y = self.move(x, self.multi_cls[k])
                    elif self.move(x, self.multi_cls[k]) != y:
                        return self._no_char_end(q)
                if y < 0:
                    return self._no_char_end(q)
                x = y
            if end == UNKNOWN:
                end = x
            elif end != x:
                return self._no_char_end(q)
        self.mb_end[q] = end
        return end

    cdef int32_t _no_char_end(self, int32_t q) noexcept nogil:
        self.mb_end[q] = -3  # computed: no common end
        return UNKNOWN

    cdef int32_t char_states(self, int32_t s, Py_ssize_t seq, IVec* at) noexcept nogil:
        """In ``at`` the run states (each once) that the characters of UTF-8 sequence ``seq``
        (``multi_seq``) lead run state ``s`` to: 0, DEAD when one dies on the way, or an error
        code."""
        cdef Py_ssize_t p, k, i, mark
        cdef int32_t t
        at.size = 0
        if ivec_push(at, s):
            return ERR_SIZE
        for p in range(self.multi_seq[seq], self.multi_seq[seq + 1]):
            mark = at.size
            self.rs_stamp += 1
            for i in range(mark):
                for k in range(self.multi_pos[p], self.multi_pos[p + 1]):
                    t = self.fill(at.data[i], self.multi_cls[k])
                    if t < 0:
                        return t
                    if self.rs_seen[t] != self.rs_stamp:
                        self.rs_seen[t] = self.rs_stamp
                        if ivec_push(at, t):
                            return ERR_SIZE
            for i in range(at.size - mark):  # keep only this position's states
                at.data[i] = at.data[mark + i]
            at.size -= mark
        return 0

    cdef bint chars_lead(self, int32_t s, int32_t target) noexcept nogil:
        """Whether every well-formed multi-byte character leads run state ``s`` to ``target``
        (0 on any error: the answer is then only less useful, never wrong)."""
        cdef Py_ssize_t seq, i
        for seq in range(self.multi_seq.shape[0] - 1):
            if self.char_states(s, seq, &self.mb):
                return 0
            for i in range(self.mb.size):
                if self.mb.data[i] != target:
                    return 0
        return 1

    cdef bint chars_uniform(self, int32_t s, uint8_t* ok) noexcept nogil:
        """Whether every well-formed multi-byte character leads ``s`` where the ASCII bytes
        ``ok`` do: each head's character end is its move on such a byte (or both die)."""
        cdef int b, c0 = -1
        cdef Py_ssize_t i
        cdef int32_t q, e
        for b in range(1, 127):
            if ok[b]:
                c0 = self.byte_class[b]
                break
        if c0 < 0:
            return 0
        for i in range(self.rs_off[s], self.rs_off[s + 1]):
            q = self.f_state[self.rs_heads.data[i]]
            e = self.char_end(q)
            if e == UNKNOWN or e == -3 or e != self.move(q, c0):
                return 0
        return 1

    cdef int32_t segment(self, int32_t s) noexcept nogil:
        """How many steps from ``s`` the uniform chain keeps ``s``'s loop words (every state
        alive; capped past ``chain_height`` and the longest token), with ``jump_to[s]`` the state after them; an
        error code on error. Filled backwards along the chain, so each state is walked once."""
        cdef int32_t t = s, nxt, cap = min(self.chain_height, self.main.nodes[0].height) + 1, n, k, length
        cdef uint64_t w0 = self.uni_words[2 * s], w1 = self.uni_words[2 * s + 1]
        if self.jump_len[s] >= 0:
            return self.jump_len[s]
        self.chars.size = 0
        while True:
            if ivec_push(&self.chars, t):
                return ERR_SIZE
            nxt = self.uni_next[t]  # computed: t's words were read
            if nxt == t:  # a loop: the words hold for ever
                length = cap
                break
            if nxt < 0:
                length = 1
                nxt = t
                break
            k = self.uniform(nxt)
            if k < DEAD:
                return k
            if self.uni_words[2 * nxt] != w0 or self.uni_words[2 * nxt + 1] != w1:
                length = 1
                break
            if self.jump_len[nxt] >= 0:
                length = self.jump_len[nxt] + 1
                nxt = self.jump_to[nxt]
                break
            if self.chars.size >= cap:
                length = 1
                break
            t = nxt
        n = self.chars.size
        for k in range(n - 1, -1, -1):
            t = self.chars.data[k]
            self.jump_len[t] = length if length < cap else cap
            self.jump_to[t] = nxt
            length += 1
        return self.jump_len[s]

    cdef int chain_accepts(self, int32_t s, int32_t node) noexcept nogil:
        """Whether every token below ``node`` stays alive from ``s``: at each of the node's
        ``height`` steps, the rest bytes lead every state of the chain to the same next state
        (1 yes, 0 no, or an error code)."""
        cdef int32_t h = self.cur.nodes[node].height, t, k
        cdef uint64_t r0 = self.cur.nodes[node].rest0, r1 = self.cur.nodes[node].rest1
        while h > 0:
            if self.uni_next[s] == UNKNOWN:
                k = self.rest_parts(s, r0, r1)
                if k != 0:
                    return k if k < 0 else 0
            t = self.uniform(s)
            if t < DEAD:
                return t
            if t == DEAD or (r0 & ~self.uni_words[2 * s]) or (r1 & ~self.uni_words[2 * s + 1]):
                return 0
            k = self.segment(s)
            if k < 0:
                return k
            if k >= h:
                return 1
            h -= k
            s = self.jump_to[s]
        return 1

    cdef int rest_parts(self, int32_t s, uint64_t r0, uint64_t r1) noexcept nogil:
        """Whether the ASCII bytes of the rest words ``r0``, ``r1`` (bits 1..126) lead ``s``
        apart -- one of them dies, or two lead to different run states -- so that they cannot
        all be in its uniform step (1), else 0, or an error code. Reads the known transitions
        first and fills the others one at a time, up to the first that parts them: a chain
        check at a key's states settles on this without filling every byte class."""
        cdef int b, c, known
        cdef int32_t t, seen = UNKNOWN
        cdef uint64_t w
        for known in range(1, -1, -1):
            for b in range(1, 127):
                w = r0 if b < 64 else r1
                if not (w >> (b & 63)) & 1:
                    continue
                c = self.class_p[b]
                t = self.row(s)[c]
                if t == UNKNOWN:
                    if known:
                        continue
                    t = self.fill(s, c)
                    if t < DEAD:
                        return t
                if t == DEAD or (seen != UNKNOWN and t != seen):
                    return 1
                seen = t
        return 0

    # -- sweeps ------------------------------------------------------------------------------
    cdef inline void accept(self, uint32_t* words, int32_t lo, int32_t hi) noexcept nogil:
        cdef int32_t r, token
        cdef const int32_t* ids = self.cur.ids_p
        for r in range(lo, hi):
            token = ids[r]
            words[token >> 5] |= (<uint32_t> 1) << (token & 31)

    cdef inline void accept_below(self, uint32_t* words, int32_t node) noexcept nogil:
        """Accept every token strictly below ``node``."""
        cdef int32_t big = self.cur.nodes[node].below_index
        cdef Py_ssize_t i, n = self.cur.n_words
        cdef const uint32_t* row
        if big < 0:
            self.accept(words, self.cur.nodes[node].end_hi, self.cur.nodes[node].row_hi)
            return
        row = self.cur.below + big * n
        for i in range(n):
            words[i] |= row[i]

    cdef inline int settled(self, int32_t node, int32_t s) noexcept nogil:
        """Whether every token below ``node`` (an alive node in run state ``s``) is consumed
        alive, by the loop set or the counted chain of ``s`` (1 yes, 0 no, or an error)."""
        cdef const Node* rec = &self.cur.nodes[node]
        cdef const uint64_t* loops
        if rec.child_lo == rec.child_hi:
            return 1
        if self.has_loop[s]:
            loops = self.loops + 2 * s
            if (rec.rest0 & ~loops[0]) == 0 and (rec.rest1 & ~loops[1]) == 0:
                return 1
        if self.visits[s] < self.chains_after or rec.height > self.chain_height:
            return 0
        if (self.jump_len[s] >= rec.height and (rec.rest0 & ~self.uni_words[2 * s]) == 0
                and (rec.rest1 & ~self.uni_words[2 * s + 1]) == 0 and self.uni_next[s] >= 0):
            return 1  # the chain's first segment is long enough
        return self.chain_accepts(s, node)

    cdef bint wide(self, int32_t s) noexcept nogil:
        """Whether most bytes keep ``s`` on its loop or chain (inside a string): a subtree is
        then cheaper to take whole and prune than to collect token by token. Told from the loop
        set, or from the uniform step where it is known: computing the step here would fill
        every byte class of the key states the walk passes (a quarter of the slowest masks'
        time), and either mode gives the same mask."""
        if self.has_loop[s] and popcount(self.loops[2 * s]) + popcount(self.loops[2 * s + 1]) >= 64:
            return 1
        return self.uni_next[s] >= 0 and popcount(self.uni_words[2 * s]) + popcount(self.uni_words[2 * s + 1]) >= 64

    cdef inline void reject(self, uint32_t* words, int32_t lo, int32_t hi) noexcept nogil:
        cdef int32_t r, token
        cdef const int32_t* ids = self.cur.ids_p
        for r in range(lo, hi):
            token = ids[r]
            words[token >> 5] &= ~((<uint32_t> 1) << (token & 31))

    cdef int32_t sweep(self, int32_t start, uint32_t* words, IVec* stack) noexcept nogil:
        """OR into ``words`` every token whose bytes run state ``start`` consumes alive: a
        depth-first walk of the vocabulary's trie from the root, one transition per (node, run
        state)."""
        cdef int32_t code
        self.cur = self.main
        stack.size = 0
        code = self.seed(0, start, words, stack)
        return code if code < 0 else self.walk(words, stack)

    cdef int chain_ahead(self, int32_t start, int32_t steps, const uint8_t* flags) noexcept nogil:
        """How many uniform steps ``m`` from ``start`` a split by its step ``flags`` may read,
        with in ``ahead`` the ``m + 1`` states they pass: ``steps`` when each of the states takes
        at least the bytes (and whole characters) of ``start``'s step to the next, or fewer
        when the chain's state ``m`` (the end of a count) dies on every one of them; 0 when
        neither, or an error code."""
        cdef int32_t t = start, j, checked = start
        cdef int same
        self.ahead.size = 0
        for j in range(steps + 1):
            if ivec_push(&self.ahead, t):
                return ERR_SIZE
            if j == steps:
                break
            if j > 0 and t != checked:  # a loop's chain stays on one or two states
                same = self.same_step(start, t)
                if same == 0:
                    same = self.dies_on_units(t, flags)
                    return j if same > 0 else same
                if same < 0:
                    return same
                checked = t
            t = self.uni_next[t]
        return steps

    cdef int dies_on_units(self, int32_t s, const uint8_t* flags) noexcept nogil:
        """Whether every byte of the step ``flags`` and, with ``flags[256]``, every lead byte
        of a multi-byte character dies in run state ``s`` (1 yes, 0 no, or an error code)."""
        cdef int b
        cdef int32_t t
        for b in range(256):
            if flags[b] or (flags[256] and 0xC2 <= b <= 0xF4):
                t = self.fill(s, self.byte_class[b])
                if t != DEAD:
                    return t if t < DEAD else 0
        return 1

    cdef int32_t split_sweep(self, const SplitData* split, int32_t steps, uint32_t* words,
                             IVec* stack) noexcept nogil:
        """``sweep`` from ``ahead[0]`` through ``split`` (a split by that state's uniform step,
        whose chain ``ahead`` holds for ``steps`` steps, see chain_ahead()): the tokens of at
        most ``steps`` loop units are taken (one OR of their words), and the rests
        after at most ``steps`` units are walked, each from the state as many units ahead on
        the chain. Any other token reads a unit more, which the chain's end does not take."""
        cdef int32_t code = 0, node, lo, hi, m = steps if steps < split.steps else split.steps
        cdef int32_t* ahead = self.ahead.data
        cdef Py_ssize_t i
        cdef const uint32_t* row
        self.split_sweeps += 1
        if m > 0:
            row = split.unit_p + (m - 1) * split.n_loop
            for i in range(split.n_loop):
                words[i] |= row[i]
        self.cur = split.trie
        stack.size = 0
        lo, hi = self.cur.nodes[0].child_lo, self.cur.nodes[0].child_hi
        for node in range(lo, hi):
            if self.cur.byte_p[node] > steps:
                break  # the depth-1 nodes come in byte order
            code = self.seed(node, ahead[self.cur.byte_p[node]], words, stack)
            if code < 0:
                break
        if code >= 0:
            code = self.walk(words, stack)
        self.cur = self.main
        return code

    cdef int32_t loop_after(self, int32_t s, uint8_t* flags) noexcept nogil:
        """The state ``t`` that ``s``'s uniform step leads into when ``t`` loops through a
        whole loop split (``split_steps`` units of ``t``'s step, whose bytes and characters
        ``flags`` then holds, with its chain in ``ahead``) and every ASCII byte of ``s``'s step
        is a unit of it: a key's first byte outside the declared names' (see key_sweep());
        DEAD when not, or an error code."""
        cdef int32_t t = self.uni_next[s]
        cdef int found, b
        if t < 0 or t == s:
            return DEAD
        found = self.step_flags(t, flags)
        if found <= 0:
            return found if found < 0 else DEAD
        found = self.chain_ahead(t, self.split_steps, flags)
        if found < self.split_steps:
            return found if found < 0 else DEAD
        for b in range(128):
            if self.row(s)[self.byte_class[b]] == t and not flags[b]:
                return DEAD
        return t

    cdef const uint32_t* first_bytes(self, int32_t s, int32_t t) noexcept nogil:
        """The mask words of the tokens whose first byte is an ASCII byte leading ``s`` to
        ``t``, kept for the last KEY_FILTERS such byte sets; NULL when memory runs out."""
        cdef uint64_t low = 0, high = 0
        cdef int b, k
        cdef int32_t node
        cdef uint32_t* words
        for b in range(128):
            if self.row(s)[self.byte_class[b]] == t:
                if b < 64:
                    low |= (<uint64_t> 1) << b
                else:
                    high |= (<uint64_t> 1) << (b - 64)
        for k in range(self.n_filters):
            if self.filter_keys[2 * k] == low and self.filter_keys[2 * k + 1] == high:
                return self.filter_words[k]
        k = self.n_filters if self.n_filters < KEY_FILTERS else self.next_filter
        self.next_filter = (k + 1) % KEY_FILTERS
        if k == self.n_filters:
            self.filter_words[k] = <uint32_t*> malloc(self.main.n_words * sizeof(uint32_t))
            if self.filter_words[k] == NULL:
                return NULL
            self.n_filters += 1
        words = self.filter_words[k]
        memset(words, 0, self.main.n_words * sizeof(uint32_t))
        self.filter_keys[2 * k] = low
        self.filter_keys[2 * k + 1] = high
        self.cur = self.main
        for node in range(self.main.nodes[0].child_lo, self.main.nodes[0].child_hi):
            b = self.main.byte_p[node]
            if b < 128 and ((low >> b) & 1 if b < 64 else (high >> (b - 64)) & 1):
                self.accept(words, self.main.nodes[node].row_lo, self.main.nodes[node].end_hi)
                self.accept_below(words, node)  # a big subtree's words in one OR
        return words

    cdef int32_t key_sweep(self, int32_t s, int32_t t, const SplitData* split, uint32_t* words,
                           IVec* stack) noexcept nogil:
        """``sweep`` from ``s`` whose uniform step leads into the loop ``t`` (loop_after(), its
        chain in ``ahead``): the tokens whose first byte takes that step are read through the
        split by ``t``'s step, as split_sweep() reads them one unit later (a token of at most
        ``split_steps`` units is consumed, a rest after ``j`` units is walked from ``t``'s
        chain ``j - 1`` steps on), into words of their own kept for those first bytes; the
        vocabulary's trie is walked below every other first byte."""
        cdef const uint32_t* keep = self.first_bytes(s, t)
        cdef uint32_t* mine
        cdef Py_ssize_t i, n_words = self.main.n_words
        cdef int32_t code = 0, node, lo, hi, c, u
        cdef int b
        cdef const Node* rec
        if keep == NULL:
            return ERR_SIZE
        if self.gwords == NULL:
            self.gwords = <uint32_t*> malloc(n_words * sizeof(uint32_t))
            if self.gwords == NULL:
                return ERR_SIZE
        mine = self.gwords
        self.split_sweeps += 1
        self.key_sweeps += 1
        memcpy(mine, split.unit_p + (split.steps - 1) * n_words, n_words * sizeof(uint32_t))
        self.cur = split.trie
        stack.size = 0
        lo, hi = self.cur.nodes[0].child_lo, self.cur.nodes[0].child_hi
        for node in range(lo, hi):
            if self.cur.byte_p[node] == 0:
                continue  # the rests of tokens whose first byte is no unit: walked below
            code = self.seed(node, self.ahead.data[self.cur.byte_p[node] - 1], mine, stack)
            if code < 0:
                break
        if code >= 0:
            code = self.walk(mine, stack)
        self.cur = self.main
        if code < 0:
            return code
        for i in range(n_words):
            words[i] |= mine[i] & keep[i]
        stack.size = 0
        for node in range(self.main.nodes[0].child_lo, self.main.nodes[0].child_hi):
            b = self.main.byte_p[node]
            c = self.class_p[b]
            u = self.row(s)[c]
            if b < 128 and u == t:
                continue  # read through the split above
            if u == UNKNOWN:
                u = self.fill(s, c)
            if u < DEAD:
                return u
            if u < 0:
                continue
            rec = &self.main.nodes[node]
            self.accept(words, rec.row_lo, rec.end_hi)
            code = self.seed(node, u, words, stack)
            if code < 0:
                return code
        return self.walk(words, stack)

    cdef int step_flags(self, int32_t s, uint8_t* flags) noexcept nogil:
        """In ``flags[0..255]`` the bytes of ``s``'s uniform step and in ``flags[256]`` whether
        whole multi-byte characters take it too: 1 when the step is wide enough for a loop
        split (``split_bits``), 0 when not, or an error code. Also 0 when the step leads into a
        loop that takes more (a free key's state on the prefix of a declared name): a split by
        the narrower step would serve few states (5-11 ms to build each) where the walk reaches
        the loop in one byte."""
        cdef int32_t t = self.uniform(s), u
        cdef int b, c
        if t < 0:
            return t if t < DEAD else 0
        if popcount(self.uni_words[2 * s]) + popcount(self.uni_words[2 * s + 1]) < self.split_bits:
            return 0
        if t != s:
            u = self.uniform(t)
            if u < DEAD:
                return u
            if u == t:
                if self.uni_chars[t] > self.uni_chars[s]:
                    return 0
                for c in range(self.n_classes):
                    if self.row(t)[c] == t and self.row(s)[c] != t:
                        return 0
        for b in range(256):
            flags[b] = self.row(s)[self.byte_class[b]] == t
        flags[256] = self.uni_chars[s]
        return 1

    cdef int same_step(self, int32_t s, int32_t t) noexcept nogil:
        """Whether ``t``'s uniform step is taken on (at least) the bytes and whole characters
        of ``s``'s (1 yes, 0 no, or an error code)."""
        cdef int c
        cdef int32_t next_s = self.uni_next[s], next_t = self.uniform(t)
        cdef int32_t* row_s = self.row(s)
        cdef int32_t* row_t = self.row(t)
        if next_t < DEAD:
            return next_t
        if next_t == DEAD:
            return 0
        for c in range(self.n_classes):
            if row_s[c] == next_s and row_t[c] != next_t:
                return 0
        return self.uni_chars[s] <= self.uni_chars[t]

    cdef int32_t seed(self, int32_t node, int32_t s, uint32_t* words, IVec* stack) noexcept nogil:
        """Start the walk at ``node``, reached alive in run state ``s``: its subtree taken whole
        when settled, else the node put on ``stack``."""
        cdef int done = self.settled(node, s)
        if done < 0:
            return done
        if done:
            self.accept_below(words, node)
            return 0
        if ivec_push(stack, node) or ivec_push(stack, s):
            return ERR_SIZE
        return 0

    cdef int32_t walk(self, uint32_t* words, IVec* stack) noexcept nogil:
        """Walk ``cur`` depth first from the (node, run state) pairs on ``stack``.

        A node is expanded in one of two modes. Collecting (the default), each alive child's
        exact tokens are set and so is a settled child's subtree. Pruning (entered at a node
        with precomputed mask words, in a wide run state), the node's whole subtree is set
        first and a dead child's subtree is cleared: inside a string, far fewer tokens die
        than live. Each token is decided by exactly one node, so the modes never overlap."""
        cdef int32_t node, s, child, t, c, lo, hi, big
        cdef int32_t* row_s
        cdef int done
        cdef bint pruning
        cdef Py_ssize_t i, n_words = self.cur.n_words
        cdef const uint32_t* row
        cdef const Node* rec
        cdef const Node* nodes = self.cur.nodes
        cdef const uint8_t* byte_p = self.cur.byte_p
        while stack.size:
            stack.size -= 2
            node = stack.data[stack.size]
            s = stack.data[stack.size + 1]
            pruning = node < 0
            if pruning:
                node = -node - 1
            self.visits[s] += 1
            self.expanded += 1
            if self.visits[s] == self.probe_at:
                self.probes += 1
                self.probe(s)
            big = nodes[node].below_index
            if not pruning and big >= 0 and self.wide(s):
                row = self.cur.below + big * n_words
                for i in range(n_words):
                    words[i] |= row[i]
                pruning = 1
            lo = nodes[node].child_lo
            hi = nodes[node].child_hi
            if ivec_reserve(stack, stack.size + 2 * (hi - lo)):
                return ERR_SIZE
            row_s = self.row(s)  # rows never move: filling one grows the table by new blocks
            for child in range(lo, hi):
                c = self.class_p[byte_p[child]]
                t = row_s[c]
                if t == UNKNOWN:
                    t = self.fill(s, c)
                    if t < DEAD:
                        return t
                rec = &nodes[child]
                if t < 0:
                    if pruning:
                        self.reject(words, rec.row_lo, rec.row_hi)
                    continue
                if not pruning:
                    self.accept(words, rec.row_lo, rec.end_hi)
                done = self.settled(child, t)
                if done < 0:
                    return done
                if done:
                    if not pruning:
                        self.accept_below(words, child)
                    continue
                stack.data[stack.size] = -child - 1 if pruning else child
                stack.data[stack.size + 1] = t
                stack.size += 2
        return 0

    cdef void free_tables(self) noexcept nogil:
        """Forget every frame and run state and give all the tables' memory back, the per
        automaton state caches (mb_end, q_same, q_loops) included: nothing is held until reset()."""
        cdef Py_ssize_t i
        free(self.f_state); free(self.f_parent); free(self.f_seen); free(self.fh_slots)
        free(self.rs_off); free(self.rs_hash); free(self.rh_slots); free(self.pops)
        free(self.loops); free(self.has_loop); free(self.visits); free(self.rs_seen)
        free(self.uni_next); free(self.uni_words); free(self.uni_chars); free(self.jump_len); free(self.jump_to); free(self.rs_heads.data)
        free(self.mb_end); free(self.q_loops); free(self.q_looped); free(self.q_same)
        self.f_state = self.f_parent = self.f_seen = NULL
        self.fh_slots = NULL
        for i in range(self.n_blocks):
            free(self.trans[i])
        free(self.trans)
        self.trans = NULL
        self.n_blocks = 0
        self.rs_off = self.rh_slots = self.visits = self.rs_seen = NULL
        self.uni_next = self.jump_len = self.jump_to = self.mb_end = self.q_same = NULL
        self.uni_words = self.rs_hash = self.loops = self.q_loops = NULL
        self.pops = self.has_loop = self.q_looped = self.uni_chars = NULL
        ivec_init(&self.rs_heads)
        self.last_moved.size = 0  # its frames and run state are gone
        self.n_frames = self.n_runs = 0
        self.cap_frames = self.cap_runs = 0
        self.fh_cap = self.rh_cap = 0
        self.stamp = self.rs_stamp = 0
        self.opaque = -1

    cdef int reset(self) noexcept nogil:
        """Forget every frame and run state and give their tables' memory back, then allocate
        them again at their first size (the per automaton state caches are kept, or made when
        missing); -1 when memory runs out."""
        cdef Py_ssize_t i, n = max(self.n_states, 1)
        cdef int32_t* mb_end = self.mb_end
        cdef int32_t* q_same = self.q_same
        cdef uint64_t* q_loops = self.q_loops
        cdef uint8_t* q_looped = self.q_looped
        self.mb_end = self.q_same = NULL  # kept across the reset
        self.q_loops = NULL
        self.q_looped = NULL
        self.free_tables()
        if mb_end == NULL:
            mb_end = <int32_t*> malloc(n * sizeof(int32_t))
            q_same = <int32_t*> malloc(n * sizeof(int32_t))
            q_loops = <uint64_t*> malloc(n * 2 * sizeof(uint64_t))
            q_looped = <uint8_t*> calloc(n, 1)
            if mb_end != NULL and q_same != NULL:
                for i in range(n):
                    mb_end[i] = q_same[i] = UNKNOWN
        self.mb_end, self.q_same, self.q_loops, self.q_looped = mb_end, q_same, q_loops, q_looped
        if mb_end == NULL or q_same == NULL or q_loops == NULL or q_looped == NULL:
            return -1
        if (self._grow_frames() or self._grow_runs() or self._rehash_frames(1024) or self._rehash_runs(256)):
            return -1
        self.rs_off[0] = 0
        return 0

    cdef int32_t state_of(self, const int32_t* states, const int32_t* offsets, const int32_t* cut,
                          Py_ssize_t n_heads, bint accepting) noexcept nogil:
        """The run state of the stacks ``states[offsets[i]:offsets[i + 1]]`` (automaton states,
        top first), which must be closed (every top can move); a stack with ``cut[i]`` stands
        on the opaque frame instead of ending there."""
        cdef Py_ssize_t i, j
        cdef int32_t parent
        self.heads.size = 0
        for i in range(n_heads):
            parent = self.opaque if cut[i] else -1
            for j in range(offsets[i + 1] - 1, offsets[i] - 1, -1):
                parent = self.frame(states[j], parent)
                if parent < 0:
                    return parent
            if ivec_push(&self.heads, parent):
                return ERR_SIZE
        self.next_stamp()
        j = 0
        for i in range(self.heads.size):  # drop duplicates
            if self.f_seen[self.heads.data[i]] != self.stamp:
                self.f_seen[self.heads.data[i]] = self.stamp
                self.heads.data[j] = self.heads.data[i]
                j += 1
        self.heads.size = j
        if self.heads.size > self.max_stacks:
            return ERR_STACKS
        return self.intern_run(&self.heads, accepting)

    # -- Python entry points -----------------------------------------------------------------
    def mask(self, tuple heads, bint accepting, uint32_t[::1] words, Py_ssize_t max_bytes, Py_ssize_t frames=0):
        """OR into ``words`` (packed, bit ``j`` of word ``i`` = token ``32 * i + j``) every text
        token whose bytes the parse state of the stacks ``heads`` consumes: each head the top
        frame of a stack (an object with ``state``, an automaton state, and ``parent``, the
        frame below or None: ``structspec.grammar.parse_state.Frame``), which must be closed.
        Past ``max_bytes`` of tables, they are emptied and freed first. Returns 0, or
        ERR_STACKS / ERR_SIZE (``words`` partial).

        Where the state's uniform step keeps at least ``split_bits`` of the 128 loop bits (and
        the vocabulary's root has mask words), and the states ``split_steps`` steps along it
        take that step too (or fewer, up to the end of a count, where every unit dies), the
        sweep goes through the vocabulary split by the step's bytes:
        ``split_of(flags, utf8)`` (256 byte flags, whole characters or not) gives a
        :class:`Split` reading at most ``split_steps`` units, or None, once per loop set (a
        Split is read-only: one serves every grammar over the vocabulary).

        With ``frames`` > 0, only each stack's top ``frames`` frames are read, and a stack cut
        there stands on one opaque frame: the mask is then that of every state whose stacks
        agree on those frames, unless some token's bytes would pop into the opaque frame, which
        stops the sweep with ESCAPE (``words`` partial)."""
        cdef Py_ssize_t n_heads = len(heads), depth
        cdef long long q
        cdef object top
        cdef int32_t code
        cdef bint any_cut = 0
        cdef uint8_t flags[257]
        cdef int found = 0
        cdef int32_t into = DEAD
        cdef Split split = None
        if words.shape[0] * 32 <= self.max_id or words.shape[0] < self.main.n_words:
            raise ValueError(f"{words.shape[0]} mask words cannot hold token id {self.max_id} "
                             f"({self.main.n_words} words)")
        if not n_heads:
            return 0
        self.chain.size = self.chain_off.size = self.chain_cut.size = 0
        if ivec_push(&self.chain_off, 0):
            raise MemoryError()
        try:
            for top in heads:
                depth = 0
                while top is not None:
                    if depth == frames > 0:
                        any_cut = 1
                        break
                    q = top.state
                    if not 0 <= q < self.n_states:
                        raise ValueError(f"automaton state {q} is outside 0..{self.n_states - 1}")
                    depth += 1
                    if depth > self.max_frames:
                        raise ValueError(f"a stack deeper than {self.max_frames} frames")
                    if ivec_push(&self.chain, <int32_t> q):
                        raise MemoryError()
                    top = top.parent
                if depth == 0:
                    raise ValueError("a stack is empty")
                if ivec_push(&self.chain_off, <int32_t> self.chain.size) or ivec_push(&self.chain_cut, top is not None):
                    raise MemoryError()
        except (AttributeError, TypeError, OverflowError) as exc:
            raise ValueError(f"heads must be stack frames ({exc})") from exc
        with nogil:
            code = 0
            if (self.cap_runs == 0 or self.nbytes_now() > max_bytes) and self.reset():
                code = ERR_SIZE
            if code == 0 and any_cut and self.opaque < 0:
                code = self.frame(self.n_states, -1)  # no automaton state: a frame of its own
                if code >= 0:
                    self.opaque = code
                    code = 0
            if code == 0:
                code = self.state_of(self.chain.data, self.chain_off.data, self.chain_cut.data, n_heads, accepting)
            if code >= 0 and self.split_of is not None and self.main.nodes[0].below_index >= 0:
                found = self.step_flags(code, flags)
                if found > 0:
                    found = self.chain_ahead(code, self.split_steps, flags)
                elif found == 0 and not any_cut:
                    into = self.loop_after(code, flags)
                    if into < DEAD:
                        found = into
        if found < 0:
            return found
        if found or into >= 0:
            split = self._split(flags)
        with nogil:
            if code >= 0 and split is not None and found:
                code = self.split_sweep(&split.data, found, &words[0], &self.stack)
            elif code >= 0 and split is not None and split.data.steps == self.split_steps:
                code = self.key_sweep(code, into, &split.data, &words[0], &self.stack)
            elif code >= 0:
                code = self.sweep(code, &words[0], &self.stack)
        return code

    cdef Split _split(self, uint8_t* flags):
        """The loop split by the step ``flags`` (see step_flags()), None where not worth one."""
        cdef bytes key = flags[:257]
        cdef Split split
        if key in self.splits:
            return self.splits[key]
        split = self.split_of(key[:256], key[256] != 0)
        if split is not None and (split.max_id > self.max_id or split.data.n_loop != self.main.n_words
                                  or split.data.steps > self.split_steps):
            raise ValueError("a loop split must come from the vocabulary of the trie")
        if len(self.splits) >= MAX_SPLITS:
            self.splits.clear()
        self.splits[key] = split
        return split

    def release(self):
        """Free every table (frames, run states, the per automaton state caches) and drop the
        loop splits it holds (the vocabulary's cache keeps those in use): the next :meth:`mask`
        builds them again from nothing."""
        self.splits.clear()
        with nogil:
            self.free_tables()
            self.free_filters()

    cdef Py_ssize_t nbytes_now(self) noexcept nogil:
        return self.n_frames * 12 + self.n_runs * (4 * self.n_classes + RUN_BYTES) + self.rs_heads.size * 4


cdef void set_words(const uint8_t* ok, bint utf8, uint64_t* low_out, uint64_t* high_out) noexcept nogil:
    cdef uint64_t low = 0, high = 0
    cdef bint all_high = 1
    cdef int b
    for b in range(128, 256):
        if not ok[b]:
            all_high = 0
            break
    for b in range(1, 127):
        if ok[b]:
            if b < 64:
                low |= (<uint64_t> 1) << b
            else:
                high |= (<uint64_t> 1) << (b - 64)
    if ok[0] and all_high:
        low |= 1
    if ok[127] and (all_high or utf8):
        high |= (<uint64_t> 1) << 63
    low_out[0] = low
    high_out[0] = high


def loop_words(const uint8_t[::1] flags, bint utf8_loops=False):
    """The loop side of the subset test against a trie node's rest set
    (:mod:`structspec.tokens.trie`): the bytes ``flags`` (256 entries) that keep a run state
    where it is, as two 64-bit words. Bits 1-126 are those bytes; bit 0 needs NUL and every
    byte >= 0x80 (any byte string of them stays); bit 127 needs DEL and either every byte
    >= 0x80 or ``utf8_loops`` (every well-formed multi-byte character comes back)."""
    if flags.shape[0] != 256:
        raise ValueError(f"loop_words takes 256 byte flags, got {flags.shape[0]}")
    cdef uint64_t low, high
    set_words(&flags[0], utf8_loops, &low, &high)
    return low, high


cdef inline int popcount(uint64_t x) noexcept nogil:
    cdef int n = 0
    while x:
        x &= x - 1
        n += 1
    return n


cdef inline uint64_t load64(const uint32_t* at) noexcept nogil:
    """Two consecutive words as one 64-bit value (memcpy: no alignment or aliasing assumed)."""
    cdef uint64_t x
    memcpy(&x, at, 8)
    return x


def words_digest(const uint32_t[::1] words):
    """A 64-bit digest of packed mask words (to find equal masks; not cryptographic): four
    independent multiply-xor lanes over pairs of words, mixed together at the end."""
    cdef Py_ssize_t n = words.shape[0], pairs = words.shape[0] // 2, i = 0
    cdef uint64_t a = 0x9e3779b97f4a7c15ULL ^ <uint64_t> n, b = 0xbf58476d1ce4e5b9ULL
    cdef uint64_t c = 0x94d049bb133111ebULL, d = 0x2545f4914f6cdd1dULL, k = 0x9fb21c651e98df25ULL
    cdef const uint32_t* p = &words[0] if n else NULL
    with nogil:
        while i + 4 <= pairs:
            a = (a ^ load64(p + 2 * i)) * k
            b = (b ^ load64(p + 2 * i + 2)) * k
            c = (c ^ load64(p + 2 * i + 4)) * k
            d = (d ^ load64(p + 2 * i + 6)) * k
            a ^= a >> 29
            b ^= b >> 29
            c ^= c >> 29
            d ^= d >> 29
            i += 4
        while i < pairs:
            a = mix(a ^ load64(p + 2 * i))
            i += 1
        if n & 1:
            a = mix(a ^ words[n - 1])
        a = mix(a ^ mix(b ^ mix(c ^ mix(d))))
    return a


def same_words(const uint32_t[::1] a, const uint32_t[::1] b):
    """Whether two packed masks hold the same words."""
    return a.shape[0] == b.shape[0] and (a.shape[0] == 0 or memcmp(&a[0], &b[0], a.shape[0] * 4) == 0)


def call_arrays(tuple refs):
    """A rule set's rule calls (``RuleSet.refs``: per state, ``(rule start, return state - state)``
    pairs) as the core reads them: ``(ref_off, ref_start, ref_ret)``, int32, state ``q``'s calls at
    ``ref_off[q]:ref_off[q + 1]`` with absolute return states. One pass over the tuples, no Python
    object made per call. Malformed entries raise TypeError; a state outside ``0 .. len(refs) - 1``
    ValueError."""
    cdef Py_ssize_t n = len(refs), q, i, total = 0, at = 0
    cdef tuple row, pair
    cdef int64_t start, ret
    for q in range(n):
        total += len(<tuple?> refs[q])
    off_array = np.empty(n + 1, dtype=np.int32)
    start_array = np.empty(total, dtype=np.int32)
    ret_array = np.empty(total, dtype=np.int32)
    cdef int32_t[::1] off = off_array, starts = start_array, rets = ret_array
    for q in range(n):
        off[q] = <int32_t> at
        row = <tuple> refs[q]
        for i in range(len(row)):
            pair = <tuple?> row[i]
            if len(pair) != 2:
                raise TypeError(f"a rule call is a (start, return) pair, not {pair!r}")
            start = pair[0]
            ret = q + <int64_t> pair[1]
            if not (0 <= start < n and 0 <= ret < n):
                raise ValueError(f"a rule call of state {q} names states outside the {n} automaton states")
            starts[at] = <int32_t> start
            rets[at] = <int32_t> ret
            at += 1
    off[n] = <int32_t> at
    return off_array, start_array, ret_array
