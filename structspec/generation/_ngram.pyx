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
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp

from structspec.generation.proposal import Branch, Proposal

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


cdef Py_ssize_t _occurrences(const unsigned char* text, Py_ssize_t size, Py_ssize_t length, Py_ssize_t most,
                             bint word_start, Py_ssize_t* hits) noexcept nogil:
    """Fill ``hits`` with the offsets just after the earlier occurrences (ending before the last
    byte, overlaps allowed) of the ``length``-byte suffix of the text, latest first: among the
    latest ``MAX_SCANNED`` occurrences, at most ``most``; with ``word_start`` only those that
    start the text or follow a byte that is not a letter or digit. Returns how many."""
    if not 1 <= length <= size:
        return 0
    return _scan(text, size, length, min(most, _MAX_SCANNED), word_start, hits)


cdef Py_ssize_t _lookup(bytes data, Py_ssize_t written, Py_ssize_t min_bytes, Py_ssize_t max_bytes,
                        Py_ssize_t* hits) noexcept:
    """:func:`lookup` into ``hits`` (room for ``MAX_SCANNED``); returns how many."""
    cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t top = min(max_bytes, size - 1)
    cdef Py_ssize_t length = min(min_bytes, written) if written else min_bytes
    cdef Py_ssize_t longest = 0, found
    cdef Py_ssize_t probe[1]
    with nogil:
        while length < min_bytes:  # the value being written: a word start, one length after another
            if length > top or not _occurrences(text, size, length, 1, True, probe):
                return _occurrences(text, size, longest, _MAX_SCANNED, longest < min_bytes, hits) if longest else 0
            longest, length = length, length + 1
        found = _longest_repeated_suffix(text, size, length, top)
        if found:
            longest = found
        return _occurrences(text, size, longest, _MAX_SCANNED, longest < min_bytes, hits) if longest else 0


def lookup(bytes data, Py_ssize_t written, Py_ssize_t min_bytes, Py_ssize_t max_bytes) -> list:
    """Offsets just after the earlier occurrences of the longest suffix of ``data`` (at most
    ``max_bytes`` long) found earlier in it (the latest ``MAX_SCANNED``, latest first); a
    suffix shorter than ``min_bytes`` counts only as the whole value being written
    (``written`` bytes, see :func:`value_length`), found where it starts a word."""
    cdef Py_ssize_t hits[_MAX_SCANNED]
    cdef Py_ssize_t count = _lookup(data, written, min_bytes, max_bytes, hits)
    return [hits[index] for index in range(count)]


cdef Py_ssize_t _agreed(const unsigned char* text, Py_ssize_t size, const Py_ssize_t* starts, Py_ssize_t count,
                        Py_ssize_t span_bytes, Py_ssize_t* first) noexcept nogil:
    """The length of the longest prefix shared by the ``span_bytes`` after each offset of
    ``starts`` (clamped to the text), which starts at ``first[0]``."""
    cdef Py_ssize_t other, shared, k, index
    first[0] = min(max(starts[0], 0), size)
    shared = min(span_bytes, size - first[0])
    for index in range(1, count):
        other = min(max(starts[index], 0), size)
        if size - other < shared:
            shared = size - other
        k = 0
        while k < shared and text[first[0] + k] == text[other + k]:
            k += 1
        shared = k
    return max(shared, 0)


cdef Py_ssize_t* _offsets(list starts) except NULL:
    """``starts`` as a C array (at least one slot; the caller frees it)."""
    cdef Py_ssize_t index, count = len(starts)
    cdef Py_ssize_t* offsets = <Py_ssize_t*>malloc(max(count, 1) * sizeof(Py_ssize_t))
    if offsets == NULL:
        raise MemoryError()
    for index in range(count):
        offsets[index] = starts[index]
    return offsets


def agreed_continuation(bytes data, list starts, Py_ssize_t span_bytes) -> bytes:
    """The longest prefix shared by the ``span_bytes`` after each offset of ``starts``."""
    cdef Py_ssize_t first, shared
    cdef Py_ssize_t* offsets
    if not starts:
        return b""
    offsets = _offsets(starts)
    shared = _agreed(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), offsets, len(starts),
                     span_bytes, &first)
    free(offsets)
    return PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + first, shared)


cdef Py_ssize_t _first_word_end(const unsigned char* text, Py_ssize_t size, const Py_ssize_t* starts,
                                Py_ssize_t count) noexcept nogil:
    """The first offset of ``starts`` (clamped to the text) where a word ends; -1 when none."""
    cdef Py_ssize_t index, at
    for index in range(count):
        at = min(max(starts[index], 0), size)
        if _ends_word(text + at, min(2, size - at)):
            return at
    return -1


def first_word_end(bytes data, list starts) -> bytes:
    """The two bytes at the first offset of ``starts`` where a word ends (:func:`ends_word`);
    empty when a word ends at none."""
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data), at
    cdef Py_ssize_t* offsets = _offsets(starts)
    at = _first_word_end(<const unsigned char*>PyBytes_AS_STRING(data), size, offsets, len(starts))
    free(offsets)
    return b"" if at < 0 else PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + at, min(2, size - at))


cdef Py_ssize_t _line_end(const unsigned char* text, Py_ssize_t size) noexcept nogil:
    cdef Py_ssize_t at
    for at in range(size):
        if text[at] == 10 or text[at] == 13:
            return at
    return -1


def line_end(bytes span) -> int:
    """The offset of the first line break (``\\n`` or ``\\r``) in ``span``; -1 when none."""
    return _line_end(<const unsigned char*>PyBytes_AS_STRING(span), PyBytes_GET_SIZE(span))


cdef Py_ssize_t _word_cut(const unsigned char* text, Py_ssize_t size, Py_ssize_t start) noexcept nogil:
    cdef Py_ssize_t at
    for at in range(max(start, 1), size):
        if text[at] == 32 and not _is_space(text[at - 1]):
            return at
    return -1


def word_cut(bytes span, Py_ssize_t start) -> int:
    """The first offset from ``start`` on where a space follows a byte that is not whitespace
    (-1: none). Tokenizers split text into words before they merge bytes into tokens, and a word
    does not run on into the space after it (byte-level BPE's words take the space before them,
    SentencePiece's pieces their ``▁``; the bundled models' tokenizer splits at every space), so
    the tokens of ``span[:cut]`` are the first tokens of ``span``'s. A tokenizer for which this
    does not hold gets other drafts, verified as exactly as any."""
    return _word_cut(<const unsigned char*>PyBytes_AS_STRING(span), PyBytes_GET_SIZE(span), start)


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

    cpdef bytes sync(self, list context, token_bytes):
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


cdef enum:
    _MAX_BRANCHES = 3  # value ends proposed per n-gram draft
    _MAX_ALTERNATIVES = 3  # continuations drafted side by side where the text's occurrences disagree
    _BYTES_PER_TOKEN = 3  # bytes of a span tokenized per token wanted, up to the next word's end

MAX_BRANCHES = _MAX_BRANCHES
MAX_ALTERNATIVES = _MAX_ALTERNATIVES
BYTES_PER_TOKEN = _BYTES_PER_TOKEN

cdef tuple _NOT_ENCODED = ([], False)


cdef class NgramSource:
    """The n-gram source's proposal in native code, as
    :class:`~structspec.generation.drafters.NgramDrafter` (its Python face) describes it: the
    byte work on C arrays, the grammar and the caches asked through their Python methods.

    Why native: the source's Python glue around the byte functions -- slicing the occurrences,
    grouping them, walking a copied run for its word ends -- was a third of a round's drafting,
    paid with the caches the target's forward had just evicted (docs/speculative.md, *eleventh
    pass*)."""

    cdef public Py_ssize_t max_bytes, min_bytes, span_bytes
    cdef ContextText _text  # the context's bytes, kept across rounds
    cdef object _encoded  # the spans cache (SpanTokens)

    def __init__(self, Py_ssize_t max_bytes, Py_ssize_t min_bytes, Py_ssize_t span_bytes, spans) -> None:
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self.span_bytes = span_bytes
        self._text = ContextText()
        self._encoded = spans

    def _encode_span(self, vocabulary, bytes data) -> list:
        """Tokens of ``data``; none where a byte of it is spelled by no token."""
        try:
            return vocabulary.encode_bytes(data)
        except ValueError:
            return []

    def propose(self, list context, matcher, Py_ssize_t limit, stats):
        """What the source adds after ``context`` (``matcher`` advanced along it): a
        :class:`~structspec.generation.proposal.Proposal` of at most ``limit`` tokens."""
        cdef Py_ssize_t hits[_MAX_SCANNED]
        cdef Py_ssize_t count, written, first, shared, at
        cdef bytes data, span
        cdef list run
        compiled = matcher.compiled
        vocabulary = compiled.vocabulary
        token_bytes = vocabulary.token_bytes
        with stats.timing("draft"):
            data = self._text.sync(context, token_bytes)
            written = value_length(data, self.max_bytes)
            count = _lookup(data, written, self.min_bytes, self.max_bytes, hits)
            if not count:  # the text holds no earlier occurrence: nothing to copy, no branch
                return Proposal()
            shared = _agreed(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), hits, count,
                             self.span_bytes, &first)
            span = PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + first, shared)
            run = self._tokens(span, written, matcher, limit)[:limit] if shared else []
        with stats.timing("mask"):
            run = run[: matcher.accept_tokens(run)]
            if not run:  # the value as written may end where one of its occurrences ends a word
                at = _first_word_end(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), hits,
                                     count)
                span = b"" if at < 0 else data[at : at + 2]
            branches = _value_ends(run, data[len(data) - written :] if written else b"", span,
                                   matcher.recent_states(len(run)), compiled, token_bytes)
            copied = b"".join([token_bytes[token] or b"" for token in run])
            if written + len(copied):  # inside a value: at its start a key's suffix finds the schema's texts
                for tokens in self._alternatives(data, hits, count, copied, written, matcher, compiled,
                                                 limit - len(run)):
                    branches.append(Branch(len(run), tokens, "alternative"))
        return Proposal(run, [None] * len(run), branches)

    cdef list _alternatives(self, bytes data, const Py_ssize_t* starts, Py_ssize_t count, bytes copied,
                            Py_ssize_t written, matcher, compiled, Py_ssize_t limit):
        """Where the occurrences disagree after the bytes ``copied`` (drafted already) and
        fall into at most ``MAX_ALTERNATIVES`` groups by the byte that comes next, each
        group's agreed continuation from there, tokenized as the draft line would be and cut
        where the grammar (``matcher``, after ``copied``) forbids."""
        cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(data)
        cdef const unsigned char* drafted = <const unsigned char*>PyBytes_AS_STRING(copied)
        cdef Py_ssize_t size = PyBytes_GET_SIZE(data), length = PyBytes_GET_SIZE(copied)
        cdef Py_ssize_t groups = 0, index, group, members, first, shared, at
        cdef unsigned char following[_MAX_ALTERNATIVES]
        cdef Py_ssize_t group_of[_MAX_SCANNED]
        cdef Py_ssize_t chosen[_MAX_SCANNED]
        for index in range(count):
            at = starts[index]
            group_of[index] = -1
            if not 0 <= at <= size - length - 1 or memcmp(text + at, drafted, length) != 0:
                continue
            for group in range(groups):
                if following[group] == text[at + length]:
                    break
            else:
                if groups == _MAX_ALTERNATIVES:
                    return []  # more ways on than are worth drafting side by side
                following[groups] = text[at + length]
                group = groups
                groups += 1
            group_of[index] = group
        if groups < 2:
            return []
        alternatives = []
        for group in range(groups):  # in the order of their latest occurrence
            members = 0
            for index in range(count):
                if group_of[index] == group:
                    chosen[members] = starts[index]
                    members += 1
            shared = _agreed(text, size, chosen, members, self.span_bytes, &first)
            continuation = PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + first + min(length, shared),
                                                     max(shared - length, 0))
            tokens = self._tokens(continuation, written + length, matcher, limit)[:limit]
            tokens = tokens[: matcher.copy().accept_tokens(tokens)]
            if tokens:
                alternatives.append(tokens)
        return alternatives

    cpdef list _tokens(self, bytes span, Py_ssize_t written, matcher, Py_ssize_t limit):
        """The tokens of ``span``, of which the caller takes ``limit``: up to its first line break
        as a closed string value (when the grammar allows the value to end there) with the forced
        bytes after it, else all but the last token, which the span's end may have cut short.
        The tokenizer costs about a microsecond a byte and a draft takes a few tokens of a 64-byte
        span, so only the span's words up to a cut past ``limit`` tokens' worth of bytes
        (:func:`word_cut`) are tokenized when that gives ``limit`` tokens; and a span is
        tokenized once per vocabulary (the spans cache is shared by a generator's sequences):
        rounds often look up the same continuation again (a draft the grammar or the round's
        budget cut short, a value's alternatives), and prompts share text (a document or schema
        asked about again). Do not modify the list: it is shared."""
        cdef const unsigned char* text = <const unsigned char*>PyBytes_AS_STRING(span)
        cdef Py_ssize_t size = PyBytes_GET_SIZE(span), end = _line_end(text, size), cut
        cdef list tokens, cached
        compiled = matcher.compiled
        if end > 0 or (end == 0 and written):
            closed = compiled.forced_after(matcher.state, span[:end] + b'"')
            if closed is not None:
                return closed
        cached, whole = self._encoded.get(span, _NOT_ENCODED)
        if whole or len(cached) >= limit:
            return cached
        vocabulary = compiled.vocabulary
        cut = -1 if cached else _word_cut(text, size, _BYTES_PER_TOKEN * limit)
        if cut > 0:
            tokens = self._encode_span(vocabulary, span[:cut])  # all of them: the cut ends a word
            if len(tokens) >= limit:
                self._encoded.put(span, (tokens, False))
                return tokens
        tokens = self._encode_span(vocabulary, span)
        tokens = tokens[: len(tokens) - 1] if len(tokens) > 1 else tokens
        if cached:  # a cut too short for this limit: the whole span's tokens replace it
            self._encoded.pop(span)
        self._encoded.put(span, (tokens, True))
        return tokens


cdef list _value_ends(list run, bytes value, bytes text, list states, compiled, token_bytes):
    """Where a copied value may end instead of going on: the first ``MAX_BRANCHES`` word ends
    (:func:`ends_word`) of ``text`` (the source text following the value's start ``value``)
    along ``run`` where the grammar lets the string close, each as the branch closing it after
    ``run[:fork]`` with the bytes the grammar forces after it (``","date":"``, see
    :meth:`~structspec.masks.compiled.CompiledGrammar.forced_after`). ``states[f]`` is the parse
    state after ``run[:f]``."""
    cdef const unsigned char* source = <const unsigned char*>PyBytes_AS_STRING(text)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(text), n = len(run), fork, at = 0, length
    cdef bint has_last = PyBytes_GET_SIZE(value) > 0, following = True
    cdef unsigned char last = (<const unsigned char*>PyBytes_AS_STRING(value))[PyBytes_GET_SIZE(value) - 1] if has_last else 0
    cdef bytes piece
    branches = []
    for fork in range(n + 1):
        if not following:
            break  # past the text: a value the run closed itself
        if has_last and _is_alnum(last) and _ends_word(source + at, size - at):
            tokens = compiled.forced_after(states[fork], b'"')
            if tokens:
                branches.append(Branch(fork, tokens, "end"))
                if len(branches) == _MAX_BRANCHES:
                    break
        if fork < n:
            piece = token_bytes[run[fork]] or b""
            length = PyBytes_GET_SIZE(piece)
            if length > size - at or memcmp(source + at, PyBytes_AS_STRING(piece), length) != 0:
                following = False
            elif length:
                at += length
                last = (<const unsigned char*>PyBytes_AS_STRING(piece))[length - 1]
                has_last = True
    return branches
