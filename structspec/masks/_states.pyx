# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Parse states numbered per compiled grammar, their token steps in one flat table, and greedy
verification's walk over a draft tree read from them.

A decoding round after the model's forward pays for each Python object and each line of
bytecode it touches, cold (docs/speculative.md, *ninth pass*): the parse states, the step
caches' dict entries, the matcher's history. Here a state is a small number, a step one probe
of a flat open-addressed table, and a state's finishing cost and flags flat arrays by number,
so the walk of a draft tree (:meth:`StateTable.greedy_path`) touches the rows, the draft's
tokens and these arrays, and calls Python only for what the table does not know yet.

The numbers are a cache, not an identity -- a :class:`~structspec.grammar.parse_state.ParseState`
stays what everything else reads -- so the table is bounded simply: past ``max_states``
numbered states or ``max_steps`` known steps it starts a new *epoch*, forgetting every number,
and numbers are given again on demand. A number is only meaningful with the epoch it was read
in. The table holds no reference to its compiled grammar (whose caches compute a step it does
not know): the callers pass what computes it, so the two are freed together without the
cyclic collector.

The GIL is held throughout: a walk costs microseconds and calls Python for whatever the table
does not know yet (a step, a mask, a finishing cost), so releasing it would only hand the
interpreter to another thread for as long as that thread's next Python step takes.

Thread safety: a hit (a known step) reads the flat table under the GIL without a lock; it calls
no Python code, so no other thread runs meanwhile. A miss computes the step in Python (which may
let other threads run), then, under the table's lock, inserts it only if the epoch has not
changed since it was read; the caller's number is then stale and :meth:`StateTable.step` says so.
"""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.math cimport INFINITY, NAN, isnan
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memset

import threading

FORBIDDEN = -2  # what :meth:`StateTable.step` gives for a token the grammar forbids
STALE = -3  # what it gives when the table started a new epoch while the step was computed
HANDED_OVER = -1  # greedy_path's token when the Python walk decides the token after the path
FINISHED = -2  # greedy_path's token when the path's last node finished the text

cdef enum:
    _EMPTY = -1


cdef inline uint64_t _mix(int64_t key) noexcept nogil:
    """A 64-bit finalizer (splitmix64's): consecutive numbers and tokens spread over the slots."""
    cdef uint64_t h = <uint64_t>key
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL
    return h ^ (h >> 31)


@cython.trashcan(True)
cdef class History:
    """A node of a matcher's persistent history: the parse state after a token, the node before
    it (None at the start), whether an end-of-sequence token finished the text there, how many
    tokens lead to it, and its state's number in the state table (valid in ``epoch``; -1 when
    not numbered). Native so that the table's walks add the nodes of the tokens they take
    without running Python code for each. Freeing a long history frees a chain of nodes, each
    the last reference to the one before: the trashcan keeps that from recursing once per node
    (millions of tokens overflowed the C stack without it)."""

    cdef readonly object state
    cdef readonly History previous
    cdef readonly bint finished
    cdef readonly Py_ssize_t length, number, epoch

    def __init__(self, state, History previous, bint finished=False, Py_ssize_t number=-1,
                 Py_ssize_t epoch=-1) -> None:
        self.state = state
        self.previous = previous
        self.finished = finished
        self.length = 0 if previous is None else previous.length + 1
        self.number = number
        self.epoch = epoch


cdef History _after(History node, state, Py_ssize_t number, Py_ssize_t epoch):
    """The node after ``node`` at ``state``, numbered ``number`` in ``epoch``."""
    cdef History following = History.__new__(History)
    following.state = state
    following.previous = node
    following.finished = False
    following.length = node.length + 1
    following.number = number
    following.epoch = epoch
    return following


cdef class StateTable:
    """Numbers for the parse states of one compiled grammar, and the known token steps between
    them. A step the table does not know is computed by ``advance(state, token)`` (the parse
    state after a non-end-of-sequence token, or None), which the caller passes, called without
    the table's lock held."""

    cdef dict _numbers
    cdef list _states
    cdef list _forced  # by number: the forced tokens (a list), None until asked
    cdef int64_t* _keys
    cdef int32_t* _next
    cdef Py_ssize_t _slots, _steps, _max_states, _max_steps
    cdef readonly Py_ssize_t epoch
    cdef object _lock
    cdef double* _cost  # by number: tokens to finish (NaN: not asked yet)
    cdef unsigned char* _finished  # by number: the text is complete and nothing may follow
    cdef unsigned char* _masked  # by number: its mask was computed in this epoch (a hint: the mask cache may drop it)

    def __cinit__(self, Py_ssize_t max_states=4096, Py_ssize_t max_steps=4096):
        if max_states < 1 or max_steps < 1:
            raise ValueError("a state table holds at least one state and one step")
        self._max_states = max_states
        self._max_steps = max_steps
        self._slots = 16
        while self._slots < 2 * max_steps:
            self._slots *= 2
        self._keys = <int64_t*>PyMem_Malloc(self._slots * sizeof(int64_t))
        self._next = <int32_t*>PyMem_Malloc(self._slots * sizeof(int32_t))
        self._cost = <double*>PyMem_Malloc(max_states * sizeof(double))
        self._finished = <unsigned char*>PyMem_Malloc(max_states)
        self._masked = <unsigned char*>PyMem_Malloc(max_states)
        if (self._keys == NULL or self._next == NULL or self._cost == NULL or self._finished == NULL
                or self._masked == NULL):
            raise MemoryError("no memory for a state table")
        self._lock = threading.Lock()
        self._numbers = {}
        self._states = []
        self._forced = []
        self._clear()

    def __dealloc__(self):
        PyMem_Free(self._keys)
        PyMem_Free(self._next)
        PyMem_Free(self._cost)
        PyMem_Free(self._finished)
        PyMem_Free(self._masked)

    cdef void _clear(self) noexcept:
        memset(self._keys, 0xFF, self._slots * sizeof(int64_t))  # every key _EMPTY
        self._steps = 0

    @property
    def size(self) -> int:
        """States numbered in this epoch."""
        return len(self._states)

    @property
    def steps(self) -> int:
        """Steps known in this epoch."""
        return self._steps

    @property
    def nbytes(self) -> int:
        """Bytes of the flat arrays (the numbered states' own objects are the caches')."""
        return self._slots * (sizeof(int64_t) + sizeof(int32_t)) + self._max_states * (sizeof(double) + 2)

    def number(self, state) -> int:
        """``state``'s number in the current epoch (given now if it has none)."""
        found = self._numbers.get(state)
        if found is not None:
            return found
        with self._lock:
            return self._number(state)

    def numbered(self, History node) -> tuple[int, int]:
        """``(number, epoch)``: ``node``'s state's number and the current epoch it is valid in
        (the node's own number while its epoch lasts, else the state numbered again)."""
        cdef Py_ssize_t number = self._numbered(node)
        return number, self.epoch

    cdef Py_ssize_t _numbered(self, History node) except -1:
        """``node``'s state's number in the current epoch (read :attr:`epoch` after: numbering
        a state may begin a new one)."""
        if node.epoch == self.epoch:
            return node.number
        return self.number(node.state)

    cdef Py_ssize_t _number(self, state) except -1:
        """Under the lock: ``state``'s number, given now if new (a new epoch first when full)."""
        found = self._numbers.get(state)
        if found is not None:
            return found
        if len(self._states) >= self._max_states:
            self._new_epoch()
        number = len(self._states)
        self._states.append(state)
        self._forced.append(None)
        self._cost[number] = NAN
        self._finished[number] = state.accepting and not state.heads
        self._masked[number] = False
        self._numbers[state] = number
        return number

    cdef int _new_epoch(self) except -1:
        """Forget every number and step. The flat table is cleared and the epoch moved on first,
        with no Python code run; the old dict and list are dropped last (their states' frames
        may run weak-reference callbacks as they go)."""
        old = (self._numbers, self._states, self._forced)
        self.epoch += 1
        self._clear()
        self._numbers = {}
        self._states = []
        self._forced = []
        del old
        return 0

    def state(self, Py_ssize_t number):
        """The parse state numbered ``number`` in the current epoch."""
        if not 0 <= number < len(self._states):
            raise IndexError(f"no state numbered {number} in epoch {self.epoch}")
        return self._states[number]

    cdef inline int32_t _lookup(self, int64_t key) noexcept:
        cdef Py_ssize_t mask = self._slots - 1
        cdef Py_ssize_t slot = <Py_ssize_t>(_mix(key) & <uint64_t>mask)
        while True:
            if self._keys[slot] == key:
                return self._next[slot]
            if self._keys[slot] == _EMPTY:
                return _EMPTY
            slot = (slot + 1) & mask

    cdef void _insert(self, int64_t key, int32_t value) noexcept:
        cdef Py_ssize_t mask = self._slots - 1
        cdef Py_ssize_t slot = <Py_ssize_t>(_mix(key) & <uint64_t>mask)
        while self._keys[slot] != _EMPTY and self._keys[slot] != key:
            slot = (slot + 1) & mask
        if self._keys[slot] == _EMPTY:
            self._steps += 1
        self._keys[slot] = key
        self._next[slot] = value

    def step(self, Py_ssize_t number, Py_ssize_t token, Py_ssize_t epoch, advance) -> tuple[int, int]:
        """``(after, its epoch)``: the number of the state after ``token`` from the state numbered
        ``number`` in ``epoch``, with the epoch that number belongs to (a later one when the
        table filled up meanwhile); ``after`` is :data:`FORBIDDEN` when the grammar forbids the
        token, :data:`STALE` when ``epoch`` is not the current one (the caller numbers its
        state again)."""
        cdef Py_ssize_t now = epoch
        cdef int32_t after = self._step(number, token, &now, advance)
        return after, now

    def follow(self, Py_ssize_t number, Py_ssize_t token, Py_ssize_t epoch, advance) -> tuple:
        """``(after, its epoch, the state after)`` as :meth:`step` gives them, with the parse
        state itself (None when forbidden or stale), read in the same call."""
        cdef Py_ssize_t now = epoch
        cdef int32_t after = self._step(number, token, &now, advance)
        return after, now, (self._states[after] if after >= 0 and now == self.epoch else None)

    cdef int32_t _step(self, Py_ssize_t number, Py_ssize_t token, Py_ssize_t* epoch, advance) except? -4:
        """:meth:`step` for native callers: ``epoch`` in, the answer's epoch out."""
        cdef Py_ssize_t asked = epoch[0]
        if asked != self.epoch or not 0 <= number < len(self._states):
            return STALE
        if not 0 <= token <= 0x7FFFFFFF:
            raise ValueError(f"token id {token} out of range")
        cdef int64_t key = (<int64_t>number << 32) | token
        cdef int32_t found = self._lookup(key)
        if found != _EMPTY:
            return found
        following = advance(self._states[number], token)  # Python: other threads may run
        with self._lock:
            if asked == self.epoch and self._steps >= self._max_steps:
                self._new_epoch()
            found = FORBIDDEN if following is None else <int32_t>self._number(following)  # may start an epoch
            if asked == self.epoch:
                self._insert(key, found)
            epoch[0] = self.epoch
            return found

    cdef double _finish_cost(self, Py_ssize_t number, Py_ssize_t epoch, object cost_of) except? -1.0:
        """The tokens to finish of the state numbered ``number`` in ``epoch`` (asked of
        ``cost_of`` once per number); NaN when a new epoch began while it was asked."""
        cdef double cost = self._cost[number]
        if isnan(cost):
            cost = float(cost_of(self._states[number]))  # Python: other threads may run
            if self.epoch != epoch:
                return NAN
            self._cost[number] = cost
        return cost

    def forced(self, History node, forced_of) -> list:
        """The forced tokens of ``node``'s state (asked of ``forced_of(state)`` once per number;
        do not modify the list)."""
        cdef Py_ssize_t number = self._numbered(node), epoch = self.epoch
        found = self._forced[number]
        if found is None:
            found = forced_of(self._states[number])  # Python: other threads may run
            if epoch == self.epoch:
                self._forced[number] = found
        return found

    def unmasked_along(self, History node, Py_ssize_t n):
        """The states of a matcher's history nodes from ``n`` steps back to ``node``, from the
        first whose mask was not computed in this epoch (see :meth:`mark_masked`), with their
        numbers: ``(states, numbers, epoch)``. None when every one was, when a state before it
        completes the text (no mask comes after it), or when numbering a state began a new
        epoch."""
        cdef Py_ssize_t k, at = -1, epoch = self.epoch, number
        cdef Py_ssize_t[64] kept
        cdef Py_ssize_t* numbers = &kept[0]
        if n >= 64:
            numbers = <Py_ssize_t*>PyMem_Malloc((n + 1) * sizeof(Py_ssize_t))
        if numbers == NULL:
            raise MemoryError()
        try:
            nodes = [None] * (n + 1)
            for k in range(n, -1, -1):
                nodes[k] = node
                numbers[k] = self._numbered(node)
                node = node.previous
            if epoch != self.epoch:
                return None
            for k in range(n + 1):
                number = numbers[k]
                if not 0 <= number < len(self._states) or self._finished[number]:
                    return None
                if not self._masked[number]:
                    at = k
                    break
            if at < 0:
                return None
            return [nodes[k].state for k in range(at, n + 1)], [numbers[k] for k in range(at, n + 1)], epoch
        finally:
            if numbers != &kept[0]:
                PyMem_Free(numbers)

    def mark_masked(self, Py_ssize_t number, Py_ssize_t epoch) -> None:
        """Note that the mask of the state numbered ``number`` in ``epoch`` was computed."""
        if epoch == self.epoch and 0 <= number < len(self._states):
            self._masked[number] = True

    def walk(self, History node, list tokens, Py_ssize_t size, advance) -> History:
        """The history node after ``tokens`` in turn from ``node``, up to the first token the
        grammar forbids or outside ``[0, size)``, or the first step that finds a new epoch
        (``node`` itself when that is the first)."""
        cdef Py_ssize_t number = self._numbered(node), epoch = self.epoch, now
        cdef int32_t after
        for token in tokens:
            if not 0 <= token < size:
                break
            now = epoch
            after = self._step(number, token, &now, advance)
            if after < 0 or now != epoch:
                break
            node = _after(node, self._states[after], after, epoch)
            number = after
        return node

    def greedy_path(self, const float[:, :] rows, Py_ssize_t size, list tokens, list parents, list line,
                    History history, Py_ssize_t left, advance, words_of, cost_of) -> tuple:
        """Greedy verification of a draft tree, as far as it goes without Python objects:
        ``rows`` the target's float32 rows (row 0 after the committed text, row ``1 + i`` after
        node ``i``) over a vocabulary of ``size`` tokens, the draft's ``tokens``, ``parents``
        and main ``line``, ``history`` the matcher's node at the committed text, ``left`` the
        tokens the round may produce (-1: no budget guard). ``advance(state,
        token)`` computes a step the table lacks, ``words_of(state)`` a state's mask words,
        ``cost_of(state)`` its tokens to finish.

        At each node the choice is what the Python walk makes: the row's argmax where the
        grammar allows it, else its masked argmax (the first NaN, the lowest id among ties);
        the walk follows the child drafted with the chosen token (the main-line child first,
        then branches in node order) and stops at the first choice no child has. Returns
        ``(path, history, token)``: the accepted nodes, root first, the history node after
        them, then ``token`` chosen after them (``history`` is then the node after it), or
        :data:`FINISHED` (the path's last node completed the text), or :data:`HANDED_OVER`
        (the Python walk decides at the path's end: a step the budget guard refuses, an
        end-of-sequence token, a masked row with nothing left, or a stale epoch)."""
        cdef Py_ssize_t n = len(tokens), node = -1, number = self._numbered(history), epoch = self.epoch
        cdef Py_ssize_t j, chosen, best, depth = 0
        cdef Py_ssize_t width = rows.shape[1], now
        cdef int32_t after
        cdef const float* row
        cdef const uint32_t[::1] words
        path = []
        if (len(parents) != n or rows.shape[0] < n + 1 or width < 1
                or rows.strides[1] != sizeof(float)):
            return path, history, HANDED_OVER
        if size > width:
            size = width
        cdef int64_t* token = <int64_t*>PyMem_Malloc(3 * (n + 1) * sizeof(int64_t))
        if token == NULL:
            raise MemoryError()
        cdef int64_t* parent = token + n + 1
        cdef int64_t* main = token + 2 * (n + 1)
        try:
            for j in range(n):
                token[j] = tokens[j]
                parent[j] = parents[j]
                main[j] = 0
            for j in line:
                if 0 <= j < n:
                    main[<Py_ssize_t>j] = 1
            while True:
                row = &rows[node + 1, 0]
                best = _argmax(row, width)
                now = epoch
                after = self._step(number, best, &now, advance) if best < size else FORBIDDEN
                if now != epoch:
                    return path, history, HANDED_OVER
                if after == FORBIDDEN:  # the argmax is forbidden here (or an end of sequence): mask the row
                    words = words_of(self._states[number])  # Python: other threads may run
                    if words.shape[0] < (size + 31) >> 5:
                        return path, history, HANDED_OVER
                    if self.epoch == epoch:
                        self._masked[number] = True
                    best = _masked_argmax(row, size, &words[0])
                    if best < 0:
                        return path, history, HANDED_OVER
                    after = self._step(number, best, &now, advance)
                    if after < 0 or now != epoch:  # an end of sequence, or the epoch moved on
                        return path, history, HANDED_OVER
                if left >= 0 and not self._finish_cost(after, epoch, cost_of) <= left - depth - 1:  # NaN too
                    return path, history, HANDED_OVER
                chosen = -1
                for j in range(node + 1, n):  # a node's children come after it
                    if parent[j] == node and token[j] == best:
                        if main[j]:
                            chosen = j
                            break
                        if chosen < 0:
                            chosen = j
                history = _after(history, self._states[after], after, epoch)
                if chosen < 0:
                    return path, history, best
                path.append(chosen)
                if self._finished[after]:
                    return path, history, FINISHED
                node, number, depth = chosen, after, depth + 1
        finally:
            PyMem_Free(token)


cdef extern from *:
    """
    #include <stddef.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    /* The greatest score of row[0:width] (width a positive multiple of 16); *has_nan set when
       a NaN is among them (the greatest score is then meaningless). */
    static float structspec_block_max(const float* row, ptrdiff_t width, int* has_nan) {
    #if defined(__SSE2__)
        __m128 m0 = _mm_loadu_ps(row), m1 = _mm_loadu_ps(row + 4);
        __m128 m2 = _mm_loadu_ps(row + 8), m3 = _mm_loadu_ps(row + 12);
        __m128 n0 = _mm_cmpunord_ps(m0, m0), n1 = _mm_cmpunord_ps(m1, m1);
        __m128 n2 = _mm_cmpunord_ps(m2, m2), n3 = _mm_cmpunord_ps(m3, m3);
        for (ptrdiff_t j = 16; j < width; j += 16) {
            __m128 v0 = _mm_loadu_ps(row + j), v1 = _mm_loadu_ps(row + j + 4);
            __m128 v2 = _mm_loadu_ps(row + j + 8), v3 = _mm_loadu_ps(row + j + 12);
            m0 = _mm_max_ps(v0, m0); m1 = _mm_max_ps(v1, m1);
            m2 = _mm_max_ps(v2, m2); m3 = _mm_max_ps(v3, m3);
            n0 = _mm_or_ps(n0, _mm_cmpunord_ps(v0, v0)); n1 = _mm_or_ps(n1, _mm_cmpunord_ps(v1, v1));
            n2 = _mm_or_ps(n2, _mm_cmpunord_ps(v2, v2)); n3 = _mm_or_ps(n3, _mm_cmpunord_ps(v3, v3));
        }
        float lanes[16];
        _mm_storeu_ps(lanes, m0); _mm_storeu_ps(lanes + 4, m1);
        _mm_storeu_ps(lanes + 8, m2); _mm_storeu_ps(lanes + 12, m3);
        *has_nan = _mm_movemask_ps(_mm_or_ps(_mm_or_ps(n0, n1), _mm_or_ps(n2, n3))) != 0;
        float best = lanes[0];
        for (int k = 1; k < 16; k++) best = lanes[k] > best ? lanes[k] : best;
        return best;
    #else
        float best = row[0];
        int nan = 0;
        for (ptrdiff_t j = 0; j < width; j++) { float v = row[j]; nan |= v != v; best = v > best ? v : best; }
        *has_nan = nan;
        return best;
    #endif
    }
    /* The first index of row[0:width] whose score equals `value` (width when none does). */
    static ptrdiff_t structspec_first_equal(const float* row, ptrdiff_t width, float value) {
        ptrdiff_t j = 0;
    #if defined(__SSE2__)
        __m128 wanted = _mm_set1_ps(value);
        for (; j + 16 <= width; j += 16) {
            int found = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(row + j), wanted))
                      | _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(row + j + 4), wanted)) << 4
                      | _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(row + j + 8), wanted)) << 8
                      | _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(row + j + 12), wanted)) << 12;
            if (found) return j + __builtin_ctz(found);
        }
    #endif
        for (; j < width; j++)
            if (row[j] == value) return j;
        return width;
    }
    """
    float _block_max "structspec_block_max"(const float* row, Py_ssize_t width, int* has_nan) noexcept nogil
    Py_ssize_t _first_equal "structspec_first_equal"(const float* row, Py_ssize_t width, float value) noexcept nogil


cdef Py_ssize_t _argmax(const float* row, Py_ssize_t width) noexcept nogil:
    """numpy's argmax: the first NaN, else the first greatest score (one vectorized pass for the
    greatest score and any NaN, then a vectorized scan for its first place)."""
    cdef Py_ssize_t j, k = 0, blocks = width - width % 16
    cdef int has_nan = 0
    cdef float best, value
    if blocks:
        best = _block_max(row, blocks, &has_nan)
        for j in range(blocks, width):
            value = row[j]
            has_nan |= value != value
            best = value if value > best else best
        if not has_nan:
            return _first_equal(row, width, best)
    for j in range(width):
        if row[j] != row[j]:
            return j
    best = row[0]
    for j in range(1, width):
        if row[j] > best:
            best, k = row[j], j
    return k


cdef Py_ssize_t _masked_argmax(const float* row, Py_ssize_t width, const uint32_t* words) noexcept nogil:
    """The first NaN or the first greatest score among the allowed tokens; -1 when none is
    allowed or every allowed score is -inf (the Python walk decides those)."""
    cdef Py_ssize_t w, j, token, at = -1
    cdef uint32_t bits
    cdef float best = 0
    for w in range((width + 31) >> 5):
        bits = words[w]
        while bits:
            j = __builtin_ctz(bits)
            bits &= bits - 1
            token = (w << 5) + j
            if token >= width:
                break
            if row[token] != row[token]:
                return token
            if at < 0 or row[token] > best:
                best, at = row[token], token
    if at >= 0 and best == -INFINITY:
        return -1
    return at


cdef extern from *:
    int __builtin_ctz(unsigned int) nogil
