# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The n-gram source's byte work, native: the context's text kept across rounds, the lookup of
the longest earlier occurrence of its suffix, and what the occurrences agree on.

A round asks these a few times; written in Python each was a handful of slices and ``rfind``
calls, about 20 µs of a round's host time, which runs with caches the target's forward has
just evicted. Here each is one call over the bytes; the searches (``memmem``: the suffix's
length by galloping, then its occurrences a window at a time from the end) run without the GIL
and keep pace with ``rfind`` on long texts (a 100 KB prompt: 44-100 µs a lookup against 100-138).
Exact: ``tests/generation/test_ngram.py`` checks every function against a byte-by-byte oracle.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp

cdef extern from *:
    """
    #include <string.h>
    /* The first occurrence of the `m` bytes of `needle` within the `n` bytes from `start`, or
       NULL: memmem (glibc's and Apple's are two-way searches, vectorized for short needles),
       else a loop. */
    static const unsigned char* structspec_find(const unsigned char* start, size_t n,
                                                const unsigned char* needle, size_t m) {
    #if defined(__GLIBC__) || defined(__APPLE__)
        return (const unsigned char*)memmem(start, n, needle, m);
    #else
        for (size_t at = 0; at + m <= n; ++at)
            if (memcmp(start + at, needle, m) == 0) return start + at;
        return NULL;
    #endif
    }
    """
    const unsigned char* _find "structspec_find"(const unsigned char* start, size_t n, const unsigned char* needle,
                                                 size_t m) noexcept nogil


cdef enum:
    _MAX_SCANNED = 64  # occurrences of a suffix looked at, latest first
    _WINDOW = 2048  # occurrences' starts searched at a time, from the end (see _scan)

MAX_SCANNED = _MAX_SCANNED


cdef inline bint _is_space(unsigned char byte) noexcept nogil:
    return byte == 32 or 9 <= byte <= 13  # bytes.isspace: ASCII whitespace


cdef inline bint _is_alnum(unsigned char byte) noexcept nogil:
    return 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122  # bytes.isalnum: ASCII


cdef inline bint _ends_word(const unsigned char* at, Py_ssize_t size) noexcept nogil:
    if size < 1:
        return False
    if _is_space(at[0]):
        return True
    if at[0] not in b".,;:!?)":
        return False
    return size < 2 or _is_space(at[1])


def ends_word(bytes following) -> bool:
    """Whether a word ends before ``following``: it starts with whitespace, or with
    punctuation followed by whitespace or nothing more."""
    return _ends_word(<const unsigned char*>PyBytes_AS_STRING(following), PyBytes_GET_SIZE(following))


def value_length(bytes data, Py_ssize_t limit) -> int:
    """How many trailing bytes of ``data`` follow its last JSON delimiter (the value being
    written); all of the last ``limit`` bytes when none of them is one."""
    cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t first = size - limit if 0 < limit < size else 0
    cdef Py_ssize_t at = size - 1
    while at >= first and text[at] not in b'":,[{':
        at -= 1
    return size - 1 - at


cdef Py_ssize_t _longest_repeated_suffix(const unsigned char* text, Py_ssize_t size, Py_ssize_t shortest,
                                         Py_ssize_t longest) noexcept nogil:
    """The greatest length in [shortest, longest] whose suffix of the text also occurs earlier
    in it, ending before its last byte (0 when none does). A suffix found earlier implies each
    shorter one is, so the lengths are tried growing by doubling steps, then halved between the
    last found and the first not found: a few searches rather than one per byte of the match."""
    cdef Py_ssize_t found = shortest - 1, missing, step = 1, probe
    if longest > size - 1:
        longest = size - 1
    if shortest < 1 or shortest > longest:
        return 0
    missing = longest + 1
    while found + step < missing:  # gallop: shortest, then 1, 2, 4 ... bytes longer
        probe = found + step
        if _find(text, size - 1, text + size - probe, probe) == NULL:
            missing = probe
            break
        found = probe
        step = step * 2 if probe > shortest else 1
    while missing - found > 1:  # bisect
        probe = (found + missing) // 2
        if _find(text, size - 1, text + size - probe, probe) != NULL:
            found = probe
        else:
            missing = probe
    return found if found >= shortest else 0


def longest_repeated_suffix(bytes data, Py_ssize_t shortest, Py_ssize_t longest) -> int:
    """The greatest length in ``[shortest, longest]`` whose suffix of ``data`` also ends earlier
    in ``data``; 0 when none does."""
    cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data), found
    with nogil:
        found = _longest_repeated_suffix(text, size, shortest, longest)
    return found


cdef Py_ssize_t _scan(const unsigned char* text, Py_ssize_t size, Py_ssize_t length, Py_ssize_t most,
                      bint word_start, Py_ssize_t* hits) noexcept nogil:
    """Fill ``hits`` as :func:`_occurrences` says; returns how many. The text is searched a
    window of ``_WINDOW`` starts at a time from its end, each window forwards (``_find``), its
    occurrences then taken latest first: the usual lookup stops in the last window."""
    cdef const unsigned char* suffix = text + size - length
    cdef const unsigned char* hit
    cdef Py_ssize_t found[_WINDOW + 1]
    cdef Py_ssize_t high = size - 1, low, at, index, seen, scanned = 0, count = 0
    while scanned < _MAX_SCANNED and count < most:
        # occurrences starting in [low, high - length]: at most _WINDOW + 1 of them
        low = high - _WINDOW - length if high > _WINDOW + length else 0
        seen, at = 0, low
        while high - at >= length:
            hit = _find(text + at, high - at, suffix, length)
            if hit == NULL:
                break
            found[seen] = hit - text
            seen += 1
            at = hit - text + 1
        index = seen - 1
        while index >= 0 and scanned < _MAX_SCANNED and count < most:
            at = found[index]
            scanned += 1
            if not word_start or at == 0 or not _is_alnum(text[at - 1]):
                hits[count] = at + length
                count += 1
            index -= 1
        if low == 0:
            break
        high = low + length - 1  # the next window: occurrences starting before this one's
    return count


cdef list _occurrences(bytes data, Py_ssize_t length, Py_ssize_t most, bint word_start):
    """Offsets just after the earlier occurrences (ending before the last byte, overlaps
    allowed) of the ``length``-byte suffix of ``data``, latest first: among the latest
    ``MAX_SCANNED`` occurrences, at most ``most``; with ``word_start`` only those that start
    the text or follow a byte that is not a letter or digit."""
    cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t hits[_MAX_SCANNED]
    cdef Py_ssize_t count = 0
    if 1 <= length <= size:
        with nogil:
            count = _scan(text, size, length, min(most, _MAX_SCANNED), word_start, hits)
    return [hits[index] for index in range(count)]


def lookup(bytes data, Py_ssize_t written, Py_ssize_t min_bytes, Py_ssize_t max_bytes) -> list:
    """Offsets just after the earlier occurrences of the longest suffix of ``data`` (at most
    ``max_bytes`` long) found earlier in it (the latest ``MAX_SCANNED``, latest first); a
    suffix shorter than ``min_bytes`` counts only as the whole value being written
    (``written`` bytes, see :func:`value_length`), found where it starts a word."""
    cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t top = min(max_bytes, size - 1)
    cdef Py_ssize_t length = min(min_bytes, written) if written else min_bytes
    cdef Py_ssize_t longest = 0, found
    while length < min_bytes:  # the value being written: a word start, one length after another
        if length > top or not _occurrences(data, length, 1, True):
            return _occurrences(data, longest, MAX_SCANNED, longest < min_bytes) if longest else []
        longest, length = length, length + 1
    with nogil:
        found = _longest_repeated_suffix(text, size, length, top)
    if found:
        longest = found
    return _occurrences(data, longest, MAX_SCANNED, longest < min_bytes) if longest else []


def agreed_continuation(bytes data, list starts, Py_ssize_t span_bytes) -> bytes:
    """The longest prefix shared by the ``span_bytes`` after each offset of ``starts``."""
    cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t first, other, shared, k
    if not starts:
        return b""
    first = min(max(<Py_ssize_t>starts[0], 0), size)
    shared = min(span_bytes, size - first)
    for index in range(1, len(starts)):
        other = min(max(<Py_ssize_t>starts[index], 0), size)
        if size - other < shared:
            shared = size - other
        k = 0
        while k < shared and text[first + k] == text[other + k]:
            k += 1
        shared = k
    return PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + first, max(shared, 0))


def first_word_end(bytes data, list starts) -> bytes:
    """The two bytes at the first offset of ``starts`` where a word ends (:func:`ends_word`);
    empty when a word ends at none."""
    cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data), at, width
    for start in starts:
        at = min(max(<Py_ssize_t>start, 0), size)
        width = min(2, size - at)
        if _ends_word(text + at, width):
            return PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + at, width)
    return b""


cdef class ContextText:
    """The bytes of a token sequence, kept across calls: :meth:`sync` drops the bytes of the
    tokens that changed since the last call (a rejected draft) and appends the new ones."""

    cdef list _ids
    cdef Py_ssize_t* _ends  # where each token's bytes end in the text
    cdef Py_ssize_t _capacity
    cdef bytes _data

    def __cinit__(self):
        self._ids = []
        self._ends = NULL
        self._capacity = 0
        self._data = b""

    def __dealloc__(self):
        free(self._ends)

    def sync(self, list context, token_bytes) -> bytes:
        """The text of ``context`` (``token_bytes[id]``: a token's bytes, ``None`` for none)."""
        cdef list ids = self._ids
        cdef Py_ssize_t have = len(ids), want = len(context), keep = 0, end, index
        cdef Py_ssize_t* grown
        while keep < have and keep < want and (ids[keep] is context[keep] or ids[keep] == context[keep]):
            keep += 1
        if keep < have:  # tokens dropped: their bytes go too
            del ids[keep:]
            self._data = self._data[: self._ends[keep - 1] if keep else 0]
        if keep == want:
            return self._data
        if want > self._capacity:
            grown = <Py_ssize_t*>realloc(self._ends, max(want, 2 * self._capacity) * sizeof(Py_ssize_t))
            if grown == NULL:
                raise MemoryError()
            self._ends = grown
            self._capacity = max(want, 2 * self._capacity)
        pieces = []
        end = PyBytes_GET_SIZE(self._data)
        for index in range(keep, want):
            token = context[index]
            piece = token_bytes[token] or b""
            pieces.append(piece)
            end += len(piece)
            self._ends[index] = end
            ids.append(token)
        self._data = self._data + b"".join(pieces)
        return self._data
