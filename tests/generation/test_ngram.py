"""The n-gram draft source's lookup: which continuation of the text it proposes, and when none."""

from __future__ import annotations

import functools
import os

from hypothesis import given, settings
from hypothesis import strategies as st
from structspec.generation._ngram import (
    MAX_SCANNED,
    ContextText,
    agreed_continuation,
    ends_word,
    first_word_end,
    line_end,
    longest_repeated_suffix,
    lookup,
    value_length,
    word_cut,
)

from structspec import Grammar, Vocabulary
from structspec import compile as compile_grammar
from structspec.generation.cache import common_prefix
from structspec.generation.drafters import ForcedDrafter, NgramDrafter, span_tokens
from structspec.generation.stats import Stats

SOURCE = b"Name: Lily Stone\nPhone: +44 20 7946 0958\nCity: Leeds\n"


def proposal(text: bytes) -> bytes:
    return agreed_continuation(text, lookup(text, value_length(text, 32), 3, 32), 64)


def test_the_value_being_written_is_found_where_it_starts_a_word() -> None:
    """``+`` alone is shorter than the shortest suffix looked up, but as the whole value so far
    it finds the phone number; a letter inside a word of the source does not count."""
    assert proposal(SOURCE + b'{"phone":"+').startswith(b"44 20 7946 0958")
    assert proposal(SOURCE + b'{"city":"Lee').startswith(b"ds\n")
    assert proposal(SOURCE + b'{"x":"ee') == b""  # "ee" only inside "Leeds"


def test_occurrences_that_disagree_propose_nothing() -> None:
    assert proposal(SOURCE + b'{"name":"L') == b""  # Lily or Leeds
    schema = b'{"type":"string","x":{"type":"string"},"y":{"type":"object"}}'
    assert proposal(schema + b'{"name":"') == b""  # after e":" came string and object


def test_a_longer_match_settles_what_a_shorter_one_cannot() -> None:
    assert proposal(SOURCE + b'{"name":"Lily').startswith(b" Stone\n")
    schema = b'{"type":"string","x":{"type":"string"},"y":{"type":"object"}}'
    assert proposal(schema + b'{"y":{"type":"').startswith(b'object"}}')
    repeated = b'[{"d":"chair","q":2},{"d":"chair","q":2},{"d":"'
    assert proposal(repeated).startswith(b'chair","q":2}')


@given(st.lists(st.binary(max_size=12), min_size=1, max_size=6))
def test_agreed_continuation_is_the_common_prefix(spans: list[bytes]) -> None:
    data = b"".join(spans)
    starts, at = [], 0
    for span in spans:
        starts.append(at)
        at += len(span)
    windows = [data[s : s + 5] for s in starts]
    assert agreed_continuation(data, starts, 5) == os.path.commonprefix(windows)  # noqa: RUF071 (bytes, not paths)


@given(st.binary(max_size=30), st.lists(st.integers(0, 35), max_size=8), st.integers(0, 12))
def test_agreed_continuation_is_the_common_prefix_of_any_windows(data: bytes, starts: list[int], width: int) -> None:
    """Windows anywhere in the text, cut short by its end or lying past it (then empty)."""
    windows = [data[s : s + width] for s in starts]
    expected = os.path.commonprefix(windows) if windows else b""  # noqa: RUF071 (bytes, not paths)
    assert agreed_continuation(data, starts, width) == expected


@given(st.binary(max_size=40), st.integers(1, 50))
def test_value_length_counts_back_to_the_last_delimiter(data: bytes, limit: int) -> None:
    n = value_length(data, limit)
    tail = data[-limit:]
    assert 0 <= n <= len(tail)
    assert not any(b in b'":,[{' for b in tail[len(tail) - n :])
    assert n == len(tail) or tail[len(tail) - n - 1] in b'":,[{'


TEXT = st.lists(st.sampled_from([b"a", b"b", b"ab", b" L", b'":', b"ab ab"]), max_size=24).map(b"".join)


@settings(max_examples=400)
@given(TEXT, st.integers(1, 6), st.integers(0, 12))
def test_longest_repeated_suffix_is_the_brute_force_one(data: bytes, shortest: int, extra: int) -> None:
    longest = min(shortest + extra, len(data) - 1)
    brute = [n for n in range(shortest, longest + 1) if data[-n:] in data[:-1]]
    assert longest_repeated_suffix(data, shortest, longest) == max(brute, default=0)


def _lookup_byte_by_byte(data: bytes, written: int, min_bytes: int, max_bytes: int) -> list[int]:
    """The lookup grown one byte at a time, each length searched in full with ``rfind``: the oracle."""

    def occurrences(length: int, most: int) -> list[int]:
        hits, at = [], data.rfind(data[len(data) - length :], 0, len(data) - 1)
        for _ in range(MAX_SCANNED):
            if at < 0 or len(hits) == most:
                break
            if length >= min_bytes or at == 0 or not data[at - 1 : at].isalnum():
                hits.append(at + length)
            at = data.rfind(data[len(data) - length :], 0, at + length - 1)
        return hits

    length = min(min_bytes, written) if written else min_bytes
    longest = 0
    while length <= min(max_bytes, len(data) - 1) and occurrences(length, 1):
        longest, length = length, length + 1
    return occurrences(longest, MAX_SCANNED) if longest else []


@settings(max_examples=400)
@given(TEXT, st.integers(1, 4), st.integers(0, 10), st.none() | st.integers(0, 8))
def test_lookup_is_the_suffix_grown_byte_by_byte(data: bytes, min_bytes: int, extra: int, written: int | None) -> None:
    max_bytes = min_bytes + extra
    written = value_length(data, max_bytes) if written is None else written
    assert lookup(data, written, min_bytes, max_bytes) == _lookup_byte_by_byte(data, written, min_bytes, max_bytes)


@given(st.lists(st.integers(0, 2), max_size=80), st.lists(st.integers(0, 2), max_size=80), st.integers(0, 90))
def test_common_prefix_is_the_brute_force_one(a: list[int], b: list[int], limit: int) -> None:
    n = 0
    while n < min(len(a), len(b), limit) and a[n] == b[n]:
        n += 1
    assert common_prefix(a, b, limit) == n
    assert common_prefix(a, a + b, limit) == min(len(a), limit)


@given(st.binary(max_size=20).map(lambda b: b.replace(b"\x00", b"\n").replace(b"\x01", b"\r")))
def test_line_end_is_the_first_line_break(span: bytes) -> None:
    assert line_end(span) == min((at for at in (span.find(b"\n"), span.find(b"\r")) if at >= 0), default=-1)


@given(st.binary(max_size=30).map(lambda b: b.replace(b"\x00", b" ").replace(b"\x01", b".")), st.data())
def test_first_word_end_is_that_of_the_first_start_a_word_ends_at(data: bytes, draw: st.DataObject) -> None:
    starts = draw.draw(st.lists(st.integers(0, len(data)), max_size=12))
    expected = next((data[at : at + 2] for at in starts if ends_word(data[at : at + 2])), b"")
    assert first_word_end(data, starts) == expected


@given(st.lists(st.lists(st.sampled_from([0, 1, 2, 3]), max_size=40), min_size=1, max_size=6))
def test_the_text_kept_across_calls_is_that_of_the_context(contexts: list[list[int]]) -> None:
    """The drafter extends the text of its last context where the new one shares its tokens."""
    token_bytes = [b"ab", None, b"", b"c\n"]
    text = ContextText()
    for context in contexts:
        for shared in (context, context[: len(context) // 2], context, [*context[:1], 3, 0]):
            assert text.sync(shared, token_bytes) == b"".join(token_bytes[t] or b"" for t in shared)


def test_proposals_are_cut_where_the_grammar_forbids() -> None:
    """Digits and plus signs only: the phone number is copied up to its first space."""
    pieces = [bytes([b]) for b in range(256)]
    vocab = Vocabulary.from_token_bytes([*pieces, b"44", b" 20", b" 7946", b" 0958", None], eos_ids=[260])
    grammar = Grammar.from_gbnf(r'root ::= "{\"phone\":\"" [0-9+]* "\"}"')
    matcher = compile_grammar(grammar, vocab).matcher()
    prefix = '{"phone":"+'
    assert matcher.accept_tokens([b for b in prefix.encode()]) == len(prefix)
    context = [*SOURCE, *prefix.encode()]
    drafted = NgramDrafter(32, 3).propose(context, matcher, 16, Stats())
    assert b"".join(vocab.token_bytes[t] for t in drafted.tokens) == b"44"
    assert drafted.qs == [None] * len(drafted.tokens)


def test_a_value_copied_to_the_end_of_its_line_is_closed_with_what_the_grammar_forces() -> None:
    """``Lily Stone`` ends its line in the text, and a JSON string cannot hold the line break:
    the draft closes the value there and goes on with the forced ``","phone":"``."""
    pieces = [bytes([b]) for b in range(256)]
    vocab = Vocabulary.from_token_bytes([*pieces, b" Stone", b'","', b"phone", b'":"', None], eos_ids=[260])
    grammar = Grammar.from_gbnf(r'root ::= "{\"name\":\"" [^"\n]* "\",\"phone\":\"" [^"\n]* "\"}"')
    matcher = compile_grammar(grammar, vocab).matcher()
    prefix = b'{"name":"Lily'
    assert matcher.accept_tokens(list(prefix)) == len(prefix)
    tokens = NgramDrafter(32, 3).propose([*SOURCE, *prefix], matcher, 16, Stats()).tokens
    assert b"".join(vocab.token_bytes[t] for t in tokens) == b' Stone","phone":"'
    assert matcher.state.forced_bytes() == b""  # the draft left the matcher inside the phone value


def test_a_line_break_the_value_may_not_end_at_is_not_closed() -> None:
    """Where the grammar does not let the value end (a minimum length), nothing is closed."""
    pieces = [bytes([b]) for b in range(256)]
    vocab = Vocabulary.from_token_bytes([*pieces, None], eos_ids=[256])
    grammar = Grammar.from_gbnf(r'root ::= "{\"name\":\"" [^"\n]{12,40} "\"}"')
    matcher = compile_grammar(grammar, vocab).matcher()
    prefix = b'{"name":"Lily'
    assert matcher.accept_tokens(list(prefix)) == len(prefix)
    tokens = NgramDrafter(32, 3).propose([*SOURCE, *prefix], matcher, 16, Stats()).tokens
    assert b"".join(vocab.token_bytes[t] for t in tokens) == b" Stone"  # cut at the line break


EVENT = b"Spring Fair on 2024-05-12 at the Town Hall park. Entry is free.\n"
EVENT_GRAMMAR = r'root ::= "{\"title\":\"" [^"\n]* "\",\"date\":\"" [^"\n]* "\"}"'


def branches_after(
    prefix: bytes, text: bytes = EVENT, limit: int = 6, kind: str = "end"
) -> tuple[bytes, list[tuple[int, bytes]]]:
    """The main run and each branch of ``kind`` (fork, bytes) the n-gram source drafts after ``prefix``."""
    pieces = [bytes([b]) for b in range(256)]
    vocab = Vocabulary.from_token_bytes([*pieces, b" Hall", b" park", b'","', b"date", b'":"', None], eos_ids=[261])
    matcher = compile_grammar(Grammar.from_gbnf(EVENT_GRAMMAR), vocab).matcher()
    assert matcher.accept_tokens(list(prefix)) == len(prefix)
    drafted = NgramDrafter(32, 3).propose([*text, *prefix], matcher, limit, Stats())
    spell = vocab.token_bytes
    run = b"".join(spell[t] for t in drafted.tokens)
    spelled = [(b.fork, b"".join(spell[t] for t in b.tokens)) for b in drafted.branches if b.kind == kind]
    return run, spelled


def test_a_copied_value_may_end_at_each_word_end_of_the_text() -> None:
    """After ``Town`` the text goes on `` Hall park. Entry``: the value may end before each
    word that follows, closed with the forced ``","date":"`` as the model would write it."""
    run, branches = branches_after(b'{"title":"Town')
    assert run == b" Hall park. En"  # six tokens
    assert branches == [(0, b'","date":"'), (1, b'","date":"'), (2, b'","date":"')]


def test_punctuation_inside_a_word_is_no_word_end() -> None:
    """``ben@park.org``: the dot is followed by a letter, so the value may end after ``org``
    (then a space) and after ``now`` (then a line break, where the run closes it too)."""
    run, branches = branches_after(b'{"title":"ben', b"mail ben@park.org now\n", limit=16)
    assert run == b'@park.org now","date":"'
    assert [fork for fork, _ in branches] == [len(b"@park.org"), len(b"@park.org now")]  # byte tokens



def test_continuations_the_text_disagrees_on_are_drafted_side_by_side() -> None:
    """``L`` starts both ``Lily Stone`` and ``Leeds``: nothing is agreed, so the draft line is
    empty and each continuation is a branch, up to where the grammar's string ends it."""
    text = b"Name: Lily Stone\nCity: Leeds\n"
    run, branches = branches_after(b'{"title":"L', text, limit=16, kind="alternative")
    assert run == b""
    assert branches == [(0, b'eeds","date":"'), (0, b'ily Stone","date":"')]  # latest first


def test_many_different_continuations_are_not_drafted() -> None:
    text = b"Tea: green\nTime: now\nTown: Leeds\nTub: blue\n"  # four ways on after T
    assert branches_after(b'{"title":"T', text, limit=16, kind="alternative") == (b"", [])


def test_a_span_looked_up_again_is_tokenized_once_per_spans_cache(encoded_spans: list[bytes]) -> None:
    """A round that finds the same continuation as an earlier one (here: the same context
    twice) proposes the same tokens without tokenizing the span again, and so does another
    drafter (a later sequence) sharing the spans cache; a drafter with a cache of its own
    tokenizes it afresh, to the same tokens."""
    pieces = [bytes([b]) for b in range(256)]
    vocab = Vocabulary.from_token_bytes([*pieces, b" Hall", b" park", None], eos_ids=[258])
    compiled = compile_grammar(Grammar.from_gbnf(EVENT_GRAMMAR), vocab)
    from structspec.generation import drafters

    encoded = encoded_spans
    prefix = b'{"title":"Town'
    context = [*b"Spring Fair on 2024-05-12 at the Town Hall park. Entry is free, and so is the parking.", *prefix]

    def propose(drafter: NgramDrafter) -> list[int]:
        matcher = compiled.matcher()
        assert matcher.accept_tokens(list(prefix)) == len(prefix)
        return drafter.propose(context, matcher, 4, Stats()).tokens

    spans = drafters.span_tokens()
    runs = [propose(drafter) for drafter in (NgramDrafter(32, 3, spans=spans),) * 2]
    runs.append(propose(NgramDrafter(32, 3, spans=spans)))
    assert runs[0] == runs[1] == runs[2] and b"".join(vocab.token_bytes[t] for t in runs[0]) == b" Hall park. "
    assert len(encoded) == len(set(encoded)) > 0
    assert propose(NgramDrafter(32, 3)) == runs[0]
    assert len(encoded) == 2 * len(set(encoded))


@given(st.binary(max_size=40).map(lambda b: b.replace(b"\x00", b" ")), st.integers(0, 45))
def test_word_cut_is_the_first_space_after_a_word(span: bytes, start: int) -> None:
    cuts = [at for at in range(max(start, 1), len(span)) if span[at] == 32 and not span[at - 1 : at].isspace()]
    assert word_cut(span, start) == (cuts[0] if cuts else -1)


@functools.cache
def span_vocabularies() -> list[Vocabulary]:
    """The bundled models' tokenizer's vocabulary, GPT-2's and Llama 3's (shared assets)."""
    from tiny_models import tokenizer

    from structspec.models import load

    shared = [Vocabulary.from_tokenizer(tokenizer(name)) for name in ("gpt2", "llama3")]
    return [Vocabulary.from_tokenizer(load("demo")[1]), *shared]


SPAN_TEXT = st.text(alphabet="abcdefghij KLMN 0123456789 .,-@'\"\u00e9\t\U0001f600  ", max_size=64)


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(SPAN_TEXT, min_size=1, max_size=4), limits=st.lists(st.integers(0, 9), min_size=1, max_size=4))
def test_a_span_tokenized_up_to_a_word_cut_gives_the_whole_span_tokens(texts: list[str], limits: list[int]) -> None:
    """Differential: the tokens a draft takes from a span (``limit`` of them) are those of the
    whole span less its last token, whether the span was tokenized only up to a word's end or
    whole, asked again with a larger limit or not, for the bundled models' tokenizer, GPT-2's and
    Llama 3's; a span tokenized up to a cut gives the first tokens of the whole span's."""
    for vocabulary in span_vocabularies():
        matcher = compile_grammar(Grammar.from_gbnf(r'root ::= [^\n]*'), vocabulary).matcher()
        drafter = NgramDrafter(32, 3)
        for text in texts:
            span = text.encode()
            whole = drafter._encode_span(vocabulary, span)
            whole = whole[:-1] if len(whole) > 1 else whole
            for limit in limits:
                tokens = drafter._tokens(span, 0, matcher, limit)
                assert tokens[:limit] == whole[:limit]
                assert tokens == whole[: len(tokens)]  # a cut's tokens are the whole span's first ones



@functools.cache
def line_matchers() -> list:
    """A compiled ``[^\\n]*`` per vocabulary of :func:`span_vocabularies`."""
    return [compile_grammar(Grammar.from_gbnf(r"root ::= [^\n]*"), vocabulary) for vocabulary in span_vocabularies()]


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(SPAN_TEXT, min_size=1, max_size=3), cuts=st.lists(st.integers(0, 64), min_size=1, max_size=3),
       rooms=st.permutations([1, 3, 9]))
def test_sequences_sharing_a_spans_cache_draft_what_fresh_ones_draft(
    texts: list[str], cuts: list[int], rooms: list[int]
) -> None:
    """Differential, on the bundled models', GPT-2's and Llama 3's tokenizers: n-gram drafters
    of successive sequences sharing one spans cache (as a generator's do), each asked with
    each room in turn (growing and shrinking), propose the tokens and branches a drafter with an empty cache of its own
    proposes for the same context, grammar state and room. Each sequence's output so far
    copies the start of its prompt's text, so that the text repeats."""
    for compiled in line_matchers():
        vocabulary = compiled.vocabulary
        spans = span_tokens()
        for text, cut in zip(texts, cuts * len(texts), strict=False):
            source = text.encode()
            prompt, written = vocabulary.encode_bytes(source), vocabulary.encode_bytes(source[:cut])
            matcher = compiled.matcher()
            if matcher.accept_tokens(written) < len(written):
                continue
            drafter = NgramDrafter(32, 3, spans=spans)
            for room in rooms:
                shared = drafter.propose([*prompt, *written], matcher.copy(), room, Stats())
                fresh = NgramDrafter(32, 3).propose([*prompt, *written], matcher.copy(), room, Stats())
                assert (shared.tokens, shared.branches) == (fresh.tokens, fresh.branches)


@settings(max_examples=150, deadline=None)
@given(prefix=st.sampled_from([b'{"title":"', b'{"title":"T', b'{"title":"Town', b'{"title":"L', b'{"title":"x',
                               b'{"title":"Spring Fair on 2024-05-12",', b'{"title":"a","date":"2024-']),
       text=st.sampled_from([EVENT, b"Name: Lily Stone\nCity: Leeds\n", b"Tea: green\nTime: now\nTown: Leeds\n"]),
       rooms=st.lists(st.integers(1, 9), min_size=2, max_size=2))
def test_a_free_source_that_proposes_nothing_proposes_nothing_with_any_room(
    prefix: bytes, text: bytes, rooms: list[int]
) -> None:
    """What lets the chain skip a free source that proposed nothing until the main line grows:
    on the same text and grammar state, a proposal with no token and no branch stays empty
    whatever the room (and the same drafter, asked again, gives what a fresh one gives)."""
    pieces = [bytes([b]) for b in range(256)]
    vocab = Vocabulary.from_token_bytes([*pieces, b" Hall", b" park", b'","', b"date", b'":"', None], eos_ids=[261])
    compiled = compile_grammar(Grammar.from_gbnf(EVENT_GRAMMAR), vocab)
    matcher = compiled.matcher()
    if matcher.accept_tokens(list(prefix)) < len(prefix):
        return
    context = [*text, *prefix]
    drafter = NgramDrafter(32, 3)
    first = drafter.propose(context, matcher.copy(), rooms[0], Stats())
    again = drafter.propose(context, matcher.copy(), rooms[1], Stats())
    fresh = NgramDrafter(32, 3).propose(context, matcher.copy(), rooms[1], Stats())
    assert (again.tokens, again.branches) == (fresh.tokens, fresh.branches)
    if not first.tokens and not first.branches:
        assert not again.tokens and not again.branches
    forced = ForcedDrafter()
    if not forced.propose(context, matcher.copy(), rooms[0], Stats()).tokens:
        assert not forced.propose(context, matcher.copy(), rooms[1], Stats()).tokens
