"""The native mask core: its shortcuts forced everywhere against brute force, counted
repetition, and bad input to its entry points (a ValueError or a GrammarError with its code,
never a crash, a hang or a wrong mask).

Loop probes, counted chains and pruning from precomputed subtree masks normally start only
where many trie nodes share a run state or below large subtrees; the fixture lowers every
threshold so that small random vocabularies exercise them on every node.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_masks import _byte_vocabularies, _grammars, _random_walk, _sub_vocab, _tokenizer

import structspec
from structspec import Grammar, GrammarError, Vocabulary
from structspec.grammar import compiler, ruleset
from structspec.grammar.parse_state import Frame
from structspec.grammar.ruleset import no_move
from structspec.masks import runner as mask_runner
from structspec.tokens import trie as token_tries

# The same 60 examples each run, so a run is reproducible; tools/fuzz_masks.py explores further.
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])


@pytest.fixture
def shortcuts_everywhere(monkeypatch: pytest.MonkeyPatch):
    """Probe every run state, try counted chains from the first expansion on any subtree
    height, and keep mask words for every subtree (so pruning starts at every node)."""
    monkeypatch.setattr(mask_runner, "PROBE_AT", 1)
    monkeypatch.setattr(mask_runner, "CHAINS_AFTER", 0)
    monkeypatch.setattr(mask_runner, "CHAIN_HEIGHT", 1 << 20)
    monkeypatch.setattr(token_tries, "BIG_SUBTREE", 1)
    token_tries._TRIES.clear()
    yield
    token_tries._TRIES.clear()


COUNTED = st.tuples(
    st.sampled_from(["[a-c]", "[^\"\\\\]", "[a-zé]", "[^\\x00-\\x7F]", "(\"ab\" | [c-e])", "([a-b] | \"\\\\\" [nt])"]),
    st.integers(0, 5), st.integers(0, 6),
).map(lambda t: f"{t[0]}{{{t[1]},{t[1] + t[2]}}}")


def _parsed(gbnf: str) -> Grammar:
    """The grammar of ``gbnf``; an example the generator got wrong (a GrammarError) is skipped."""
    try:
        return Grammar.from_gbnf(gbnf)
    except GrammarError:
        assume(False)
        raise


@st.composite
def _counted_grammars(draw: st.DrawFn) -> str:
    """Strings of counted repetitions, nested in blocks as maxLength strings compile."""
    inner = draw(COUNTED)
    blocks = draw(st.integers(0, 3))
    body = f"block{{0,{blocks}}} {inner}" if blocks else inner
    tail = draw(st.sampled_from(['","', '"," root', '"' ]))
    block = f"block ::= {draw(COUNTED)}\n" if blocks else ""
    return f'root ::= "\\"" {body} "\\"" ({tail})?\n{block}'


@SETTINGS
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16))
def test_random_grammars_with_every_shortcut_are_exact(shortcuts_everywhere: None, gbnf: str, vocab: Vocabulary,
                                                        seed: int) -> None:
    _random_walk(structspec.compile(_parsed(gbnf), vocab), seed, 8)


@SETTINGS
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16))
def test_tables_reset_before_every_mask_stay_exact(monkeypatch: pytest.MonkeyPatch, gbnf: str, vocab: Vocabulary,
                                                    seed: int) -> None:
    """A table budget of one byte: the core frees and regrows its tables before every mask."""
    monkeypatch.setattr(mask_runner, "TABLE_BYTES", 1)
    _random_walk(structspec.compile(_parsed(gbnf), vocab), seed, 8)


@SETTINGS
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16))
def test_tables_released_after_every_mask_stay_exact(monkeypatch: pytest.MonkeyPatch, gbnf: str, vocab: Vocabulary,
                                                     seed: int) -> None:
    """Every runner counts as idle after each of its masks: its tables (and per automaton
    state caches) are freed, and the next mask builds them from nothing."""
    monkeypatch.setattr(mask_runner, "IDLE_MASKS", 0)
    monkeypatch.setattr(mask_runner, "IDLE_CHECK", 1)
    _random_walk(structspec.compile(_parsed(gbnf), vocab), seed, 8)


def test_idle_runners_give_their_tables_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables are made by the first mask; a runner that computed none of the process's last
    IDLE_MASKS masks is freed, the one in use keeps its tables, and a busy one is skipped."""
    monkeypatch.setattr(mask_runner, "IDLE_MASKS", 4)
    monkeypatch.setattr(mask_runner, "IDLE_CHECK", 1)
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"c", b"ab", b"ba", None], eos_ids=[5])
    idle, used = (structspec.compile(Grammar.from_gbnf(gbnf), vocab)
                  for gbnf in ('root ::= "a"+ "b"', 'root ::= [a-c]*'))
    start = idle.grammar.initial_state()
    assert idle._runner.nbytes == 0
    first = idle._runner.mask(start)
    held = idle._runner.nbytes
    assert held > 0
    for _ in range(5):
        used._runner.mask(used.grammar.initial_state())
        assert idle._runner.nbytes in (held, 0) and used._runner.nbytes > 0
    assert idle._runner.nbytes == 0
    with used._runner._lock:
        assert not used._runner.release()
    assert used._runner.nbytes > 0 and used._runner.release() and used._runner.nbytes == 0
    assert np.array_equal(idle._runner.mask(start), first)


def test_runners_released_from_other_threads_stay_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads masking different grammars, each mask releasing every other idle runner (a busy
    one is skipped): every mask equals the one computed alone."""
    monkeypatch.setattr(mask_runner, "IDLE_MASKS", 1)
    monkeypatch.setattr(mask_runner, "IDLE_CHECK", 1)
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"c", b"ab", b"bc", b'"', b'a"', b"1", b"12", None], eos_ids=[9])
    sources = ('root ::= "\\"" [a-c]{0,30} "\\""', 'root ::= ("a" | "bc")+ [12]*', 'root ::= [a-c12"]{3,40}')

    def walk(compiled: structspec.CompiledGrammar, seed: int) -> list[bytes]:
        rng, state, seen = np.random.default_rng(seed), compiled.grammar.initial_state(), []
        for _ in range(40):
            words = compiled._runner.mask(state)
            seen.append(words.tobytes())
            allowed = [t for t in range(9) if (int(words[t >> 5]) >> (t & 31)) & 1]
            if not allowed:
                break
            state = compiled.advance_token(state, int(rng.choice(allowed)))
        return seen

    alone = [walk(structspec.compile(Grammar.from_gbnf(g), vocab), i) for i, g in enumerate(sources)]
    shared = [structspec.compile(Grammar.from_gbnf(g), vocab) for g in sources]
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda i: walk(shared[i % 3], i % 3), range(24)))
    assert all(seen == alone[i % 3] for i, seen in enumerate(together))


@SETTINGS
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16))
def test_wide_move_rows_stay_exact(monkeypatch: pytest.MonkeyPatch, gbnf: str, vocab: Vocabulary, seed: int) -> None:
    """Move rows kept as int32 (as grammars with far moves have them), read by the core and the
    byte-by-byte advance alike."""
    monkeypatch.setattr(ruleset, "NARROW_REACH", -1)
    compiled = structspec.compile(_parsed(gbnf), vocab)
    rows = compiled.rules.move_rows
    assert rows.dtype == np.int32 or (rows == no_move(rows)).all()
    _random_walk(compiled, seed, 8)


@SETTINGS
@given(gbnf=_counted_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16),
       shortcuts=st.booleans())
def test_counted_repetitions_are_exact(monkeypatch: pytest.MonkeyPatch, gbnf: str, vocab: Vocabulary, seed: int,
                                       shortcuts: bool) -> None:
    if shortcuts:
        monkeypatch.setattr(mask_runner, "CHAINS_AFTER", 0)
    _random_walk(structspec.compile(_parsed(gbnf), vocab), seed, 12)


@pytest.mark.parametrize("max_length", [3, 40, 300])
def test_max_length_strings_are_exact_on_real_tokens(shortcuts_everywhere: None, max_length: int) -> None:
    vocab, _ = _sub_vocab("llama3")
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": max_length},
                                                "t": {"type": "array", "items": {"type": "string"}}}}
    compiled = structspec.compile(Grammar.from_json_schema(schema), vocab)
    for seed in range(3):
        _random_walk(compiled, seed, 30)


def _exhaustive(compiled: structspec.CompiledGrammar, depth: int) -> int:
    """Compare the mask with brute force at every state reached by ``depth`` tokens."""
    frontier, seen = [compiled.matcher()], 0
    for _ in range(depth):
        following = []
        for matcher in frontier:
            words = matcher.mask_words()
            for token in range(compiled.vocabulary.size):
                step = matcher.copy()
                allowed = step.accept_token(token)
                assert bool(words[token >> 5] >> (token & 31) & 1) == allowed, (matcher.state, token)
                if allowed and not step.is_finished():
                    following.append(step)
            seen += 1
        frontier = following[:40]
    return seen


@pytest.mark.parametrize(("low", "high"), [(0, 0), (0, 3), (2, 2), (1, 4), (3, 6), (0, 40)])
def test_counted_strings_are_exact_on_every_token_of_a_dense_vocabulary(monkeypatch: pytest.MonkeyPatch,
                                                                          low: int, high: int) -> None:
    """Every string of 1-6 characters over ``a`` and ``b`` is a token (and the quote, ``é``
    whole and cut after its first byte, a few tokens with a quote), so each position of a
    counted string has whole subtrees of tokens exactly one character too long."""
    import itertools

    monkeypatch.setattr(mask_runner, "CHAINS_AFTER", 0)
    tokens = [b"".join(p) for n in range(1, 7) for p in itertools.product([b"a", b"b"], repeat=n)]
    tokens += [b'"', "é".encode(), b"\xc3", "aé".encode(), b'a"', b'ab"', b'"a']
    vocab = Vocabulary.from_token_bytes([*tokens, None], eos_ids=[len(tokens)])
    gbnf = f'root ::= "\\"" [abé]{{{low},{high}}} "\\""'
    assert _exhaustive(structspec.compile(Grammar.from_gbnf(gbnf), vocab), 3) >= 2


# -- sweeps through a loop split -----------------------------------------------------------------


@pytest.fixture(params=[1, 3])
def split_everywhere(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Sweep every state with a uniform step through a loop split (however narrow the step,
    however few tokens it spares), reading ``request.param`` units before a rest, and keep
    mask words for every subtree (so the split is asked for at every root)."""
    monkeypatch.setattr(mask_runner, "SPLIT_BITS", 0)
    monkeypatch.setattr(mask_runner, "SPLIT_STEPS", request.param)
    monkeypatch.setattr(token_tries, "SPLIT_SHARE", 0)
    monkeypatch.setattr(token_tries, "BIG_SUBTREE", 1)
    token_tries._TRIES.clear()
    token_tries._SPLITS.clear()
    yield
    token_tries._TRIES.clear()
    token_tries._SPLITS.clear()


@SETTINGS
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16))
def test_random_grammars_through_loop_splits_are_exact(split_everywhere: None, gbnf: str, vocab: Vocabulary,
                                                        seed: int) -> None:
    _random_walk(structspec.compile(_parsed(gbnf), vocab), seed, 8)


@SETTINGS
@given(gbnf=_counted_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16), chains=st.booleans())
def test_counted_repetitions_through_loop_splits_are_exact(split_everywhere: None, monkeypatch: pytest.MonkeyPatch,
                                                           gbnf: str, vocab: Vocabulary, seed: int,
                                                           chains: bool) -> None:
    if chains:
        monkeypatch.setattr(mask_runner, "CHAINS_AFTER", 0)
    compiled = structspec.compile(_parsed(gbnf), vocab)
    _random_walk(compiled, seed, 12)


@pytest.mark.parametrize(("low", "high"), [(0, 3), (2, 2), (1, 4), (3, 6), (0, 40)])
def test_counted_strings_through_loop_splits_are_exact_on_every_token(split_everywhere: None, low: int,
                                                                      high: int) -> None:
    """The dense vocabulary above: every position of a counted string, each token checked,
    and the split taken wherever the count leaves room for its steps."""
    import itertools

    tokens = [b"".join(p) for n in range(1, 7) for p in itertools.product([b"a", b"b"], repeat=n)]
    tokens += [b'"', "é".encode(), b"\xc3", "aé".encode(), b'a"', b'ab"', b'"a', "éé\"".encode(), b"\x00a"]
    vocab = Vocabulary.from_token_bytes([*tokens, None], eos_ids=[len(tokens)])
    compiled = structspec.compile(Grammar.from_gbnf(f'root ::= "\\"" [abé]{{{low},{high}}} "\\"" "a"?'), vocab)
    assert _exhaustive(compiled, 4) >= 2
    assert compiled._runner._native.split_sweeps > 0 or high < mask_runner.SPLIT_STEPS  # too short a chain


@pytest.mark.parametrize("max_length", [3, 40, 300])
def test_strings_through_loop_splits_are_exact_on_real_tokens(split_everywhere: None, max_length: int) -> None:
    vocab, _ = _sub_vocab("llama3")
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": max_length},
                                                "t": {"type": "array", "items": {"type": "string"}}}}
    compiled = structspec.compile(Grammar.from_json_schema(schema), vocab)
    for seed in range(3):
        _random_walk(compiled, seed, 30)
    assert compiled._runner._native.split_sweeps > 0


def test_json_strings_take_the_split_at_its_default_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama-3's tokens inside an unbounded and a counted JSON string: the sweep goes through
    the split, and the masks equal those swept without it (and brute force at the first)."""
    _, vocab = _tokenizer("llama3")
    schema = {"type": "object", "properties": {"s": {"type": "string"}, "t": {"type": "string", "maxLength": 60}},
              "required": ["s", "t"]}
    grammar = Grammar.from_json_schema(schema)
    split = structspec.compile(grammar, vocab)
    monkeypatch.setattr(mask_runner, "SPLIT_BITS", 129)  # no step is that wide: never split
    whole = mask_runner.StackRunner(split.rules, vocab, token_tries.token_trie(vocab), split.n_words)
    matcher = split.matcher()
    text = '{"s":"tell me, \\"why\\"?\\n","t":"caf\u00e9 au lait, \\u00e9t\u00e9 "}'.encode()
    for k, token in enumerate(vocab.encode_bytes(text)[:-1]):
        words = split._runner.mask(matcher.state)
        assert np.array_equal(words, whole.mask(matcher.state)), matcher.state
        if k == 3:
            allowed = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[: vocab.size])
            assert allowed.tolist() == [t for t in range(vocab.size) if matcher.copy().accept_token(t)]
        assert matcher.accept_token(token)
    assert split._runner._native.split_sweeps >= 2 and whole._native.split_sweeps == 0


def test_counted_strings_near_their_end_take_the_split(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama-3's tokens at every position of a ``maxLength`` string, the last 16 included (the
    chain ends there, and every unit dies at its end): each mask goes through the split and
    equals the sweep without it (and brute force 3 characters before the end)."""
    _, vocab = _tokenizer("llama3")
    grammar = Grammar.from_json_schema({"type": "object", "properties": {"t": {"type": "string", "maxLength": 20}},
                                        "required": ["t"]})
    split = structspec.compile(grammar, vocab)
    monkeypatch.setattr(mask_runner, "SPLIT_BITS", 129)  # no step is that wide: never split
    whole = mask_runner.StackRunner(split.rules, vocab, token_tries.token_trie(vocab), split.n_words)
    native = split._runner._native
    prefix = b'{"t":"'
    for typed in range(20):
        state = split.grammar.initial_state().advance(prefix + "é0123456789abcdefghi".encode()[:typed + (typed > 0)])
        before = native.split_sweeps
        words = split._runner.mask(state)
        assert np.array_equal(words, whole.mask(state)), typed
        assert native.split_sweeps == before + 1, typed
        if typed == 17:
            allowed = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[: vocab.size])
            assert allowed.tolist() == [t for t, data in enumerate(vocab.token_bytes)
                                        if data and state.advance(data) is not None]


@st.composite
def _reentered_loops(draw: st.DrawFn) -> str:
    """A rule ``k ::= x* more?`` whose ``more ::= y k`` re-enters it at its start, as a JSON
    key's characters outside ASCII and its escapes do (the start state of ``x*`` moves, calls
    and ends as its loop state does), called from several places with other continuations."""
    loop = draw(st.sampled_from(["[a-c]", "[^\"\\\\]", "[a-z\u00e9]"]))
    more = draw(st.sampled_from(['"\u00e9"', "[^\\x00-\\x7F]", '"\\\\" [nt]', '"b" "c"']))
    calls = draw(st.lists(st.sampled_from(['"\\"" k "\\""', '"\\"" k "\\":"', 'k "b"', '"a" k']), min_size=1,
                          max_size=3, unique=True))
    return f'root ::= ({" | ".join(calls)}) ("," root)?\nk ::= {loop}* more?\nmore ::= ({more}) k\n'


@SETTINGS
@given(gbnf=_reentered_loops(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16), split=st.booleans())
def test_rules_reentered_at_their_start_are_exact(monkeypatch: pytest.MonkeyPatch, gbnf: str, vocab: Vocabulary,
                                                  seed: int, split: bool) -> None:
    """Frames of a rule's start state stand on its loop state where the two behave alike (so a
    re-entered string comes back to its run state): masks against brute force, swept whole or
    through loop splits however narrow."""
    with monkeypatch.context() as patch:
        if split:
            patch.setattr(mask_runner, "SPLIT_BITS", 0)
            patch.setattr(mask_runner, "SPLIT_STEPS", 3)
            patch.setattr(token_tries, "SPLIT_SHARE", 0)
            patch.setattr(token_tries, "BIG_SUBTREE", 1)
        token_tries._TRIES.clear()
        token_tries._SPLITS.clear()
        try:
            _random_walk(structspec.compile(_parsed(gbnf), vocab), seed, 12)
        finally:
            token_tries._TRIES.clear()
            token_tries._SPLITS.clear()


KEY_PROPERTIES = {"alpha": {"type": "string"}, "beta": {"type": "integer"}, "gamma": {"type": "boolean"}}


@pytest.mark.parametrize(("typed_texts", "counter"), [
    # free keys of several stacks, characters outside ASCII re-entering the key rule at its start
    (('{"alpha":"x","Zq', '{"alpha":"x","Zq\u00e9', '{"beta":1,"q\u00e9\\n'), "split_sweeps"),
    # key starts: first bytes outside the declared names' read through the split one byte in
    (('{"', '{"alpha":"x","', '{"beta":1,"g":"t","'), "key_sweeps"),
])
def test_llama3_keys_beside_declared_properties_take_the_split(
    monkeypatch: pytest.MonkeyPatch, typed_texts: tuple[str, ...], counter: str
) -> None:
    """Llama-3's tokens in a key beside declared properties: each mask takes the free key's
    split (the runner's ``counter`` grows by one) and equals the one swept without splits, and
    brute force at the last."""
    _, vocab = _tokenizer("llama3")
    schema = {"type": "object", "properties": KEY_PROPERTIES, "additionalProperties": {"type": "string"}}
    grammar = Grammar.from_json_schema(schema)
    split = structspec.compile(grammar, vocab)
    monkeypatch.setattr(mask_runner, "SPLIT_BITS", 129)  # no step is that wide: never split
    whole = mask_runner.StackRunner(split.rules, vocab, token_tries.token_trie(vocab), split.n_words)
    native = split._runner._native
    for typed in typed_texts:
        state = grammar.initial_state().advance(typed.encode())
        assert len(state.heads) > 1  # several stacks
        before = getattr(native, counter)
        words = split._runner.mask(state)
        assert np.array_equal(words, whole.mask(state)), typed
        assert getattr(native, counter) == before + 1, typed
    allowed = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[: vocab.size])
    assert allowed.tolist() == [t for t, data in enumerate(vocab.token_bytes)
                                if data and state.advance(data) is not None]


@st.composite
def _key_grammars(draw: st.DrawFn) -> str:
    """Keys as JSON objects compile them: a free key whose first byte leaves out the declared
    names' (``k``), beside those names as literals, from one or several places."""
    names = draw(st.lists(st.sampled_from(["ab", "b", "ba", "cab", "a\u00e9"]), min_size=1, max_size=3, unique=True))
    loop = draw(st.sampled_from(["[a-c]", "[a-c\u00e9]", "[^\"\\\\]"]))
    first = draw(st.sampled_from(["[c]", "[b-c]", "[^ab\"\\\\]"]))
    literals = " | ".join(f'"{name}\\":" "1"' for name in names)
    places = draw(st.integers(1, 3))
    members = " | ".join(['k "\\":" "0"', literals] + [f'k "\\":" "{i}"' for i in range(2, places + 1)])
    return (f'root ::= "\\"" ({members}) ("," root)?\nk ::= {first} {loop}* more?\n'
            f'more ::= ("\\\\" [nt] | "\u00e9") {loop}* more?\n')


KEY_CHARS = ('"', ":", ",", "0", "1", "2", "a", "b", "c", "\\", "n", "\u00e9")


@st.composite
def _key_vocabularies(draw: st.DrawFn) -> Vocabulary:
    """Every byte of the key grammars' characters, and random runs of them (some cut inside
    a character), with an end-of-sequence token."""
    pieces = sorted({bytes([b]) for c in KEY_CHARS for b in c.encode()})
    for _ in range(draw(st.integers(8, 40))):
        text = "".join(draw(st.lists(st.sampled_from(KEY_CHARS), min_size=1, max_size=5))).encode()
        start = draw(st.integers(0, len(text) - 1))
        pieces.append(text[start : start + draw(st.integers(1, 6))])
    tokens: list[bytes | None] = [*dict.fromkeys(pieces), None]
    return Vocabulary.from_token_bytes(tokens, [len(tokens) - 1])


@SETTINGS
@given(gbnf=_key_grammars(), vocab=_key_vocabularies(), seed=st.integers(0, 2**16))
def test_key_starts_through_the_split_one_byte_in_are_exact(split_everywhere: None, gbnf: str, vocab: Vocabulary,
                                                            seed: int) -> None:
    """A state whose step leads into a loop with a split (a key's start): the tokens of that
    step's first bytes read through the split, the others walked; masks against brute force."""
    _random_walk(structspec.compile(_parsed(gbnf), vocab), seed, 10)


# -- masks from the top frames of the stacks ------------------------------------------------------


def _walk_states(compiled: structspec.CompiledGrammar, seed: int, steps: int) -> list:
    """The parse states of a seeded walk of allowed tokens (as the mask allows them)."""
    rng = np.random.default_rng(seed)
    matcher, states = compiled.matcher(), []
    for _ in range(steps):
        states.append(matcher.state)
        allowed = np.flatnonzero(np.unpackbits(matcher.mask_words().view(np.uint8), bitorder="little"))
        allowed = [i for i in allowed.tolist() if i < compiled.vocabulary.size and i not in compiled.vocabulary.eos_ids]
        if not allowed or not matcher.accept_token(int(rng.choice(allowed))):
            break
    return states


@SETTINGS
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16), shortcuts=st.booleans())
def test_cut_stacks_give_the_whole_mask_or_escape(monkeypatch: pytest.MonkeyPatch, gbnf: str, vocab: Vocabulary,
                                                  seed: int, shortcuts: bool) -> None:
    """A sweep from each stack's top frames alone either stops (a token pops into what was cut
    off) or gives exactly the mask of the whole stacks."""
    if shortcuts:
        monkeypatch.setattr(mask_runner, "PROBE_AT", 1)
        monkeypatch.setattr(mask_runner, "CHAINS_AFTER", 0)
    compiled = structspec.compile(_parsed(gbnf), vocab)
    try:
        states = _walk_states(compiled, seed, 10)
        for state in states:
            whole = compiled._runner.mask(state)
            for frames in (1, 2, 3):
                cut = compiled._runner.mask(state, frames)
                assert cut is None or np.array_equal(cut, whole), (state, frames)
    except GrammarError as exc:
        assume(exc.code not in ("E108", "E110"))
        raise


NESTED = """root ::= obj
obj ::= "{" ("\\"" key "\\":" val ("," "\\"" key "\\":" val)*)? "}"
key ::= "ab" | "abc" | "b" [a-c]*
val ::= obj | "[" (val ("," val)*)? "]" | [0-9]+ | "\\"" [a-c]* "\\""
"""


@pytest.mark.parametrize("seed", range(4))
def test_nested_states_sharing_their_tops_are_exact(seed: int) -> None:
    """Objects nested at many depths: states whose stacks agree on their top frames take their
    masks from the top cache, and every mask still equals brute force."""
    pieces = [b"{", b"}", b'"', b'":', b",", b"[", b"]", b"a", b"b", b"c", b"ab", b"abc", b'ab":', b'b":{',
              b'}}', b'"}', b'"},', b"1", b"12", b"1,", b"1}", b'{"', b'":"', b'","', b'],"', b'":[', None]
    vocab = Vocabulary.from_token_bytes(pieces, eos_ids=[len(pieces) - 1])
    compiled = structspec.compile(Grammar.from_gbnf(NESTED), vocab)
    checked = sum(_random_walk(compiled, seed * 100 + k, 40) for k in range(40))
    assert checked > 200
    assert compiled._tops.hits > 0


# -- bad input ----------------------------------------------------------------------------------


def _native(gbnf: str = 'root ::= "a"+ "b"'):
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"ab", None], eos_ids=[3])
    compiled = structspec.compile(Grammar.from_gbnf(gbnf), vocab)
    return compiled, compiled._runner._native


_STATE = st.one_of(st.integers(-3, 8), st.integers(-2**70, 2**70), st.none(), st.text(max_size=1))


@settings(max_examples=200, deadline=None)
@given(stacks=st.lists(st.one_of(st.lists(_STATE, max_size=4), st.integers()), max_size=5),
       n_words=st.integers(0, 3), frames=st.integers(-1, 3))
def test_native_mask_rejects_malformed_stacks(stacks: list, n_words: int, frames: int) -> None:
    """Arbitrary stacks (any states, empty stacks, heads that are not frames) and word buffers:
    a ValueError naming the problem, or a mask computed."""
    compiled, native = _native()
    heads = []
    for stack in stacks:
        head = stack  # an int: not a frame
        if isinstance(stack, list):
            head = None
            for state in reversed(stack):
                head = Frame(state, head)
        heads.append(head)
    words = np.zeros(n_words, np.uint32)
    try:
        code = native.mask(tuple(heads), False, words, 1 << 20, frames)
    except ValueError:
        return
    assert code in (0, mask_runner.ERR_STACKS, mask_runner.ESCAPE)
    assert n_words >= compiled.n_words
    read = [stack[:frames] if frames > 0 and isinstance(stack, list) else stack for stack in stacks]  # below: cut
    assert all(isinstance(stack, list) and stack and all(isinstance(q, int) and 0 <= q < compiled.rules.n_states
                                                            for q in stack) for stack in read)


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(st.integers(-5, 10), max_size=12))
def test_matcher_takes_any_token_id(tokens: list[int]) -> None:
    """Out-of-range and forbidden ids are refused without a change; the mask stays exact."""
    compiled, _ = _native()
    matcher = compiled.matcher()
    for token in tokens:
        before = matcher.mask_words().copy()
        allowed = 0 <= token < compiled.vocabulary.size and bool(before[token >> 5] >> (token & 31) & 1)
        assert matcher.accept_token(token) == allowed
        if not allowed:
            assert np.array_equal(matcher.mask_words(), before)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=40))
def test_parse_states_take_any_bytes(data: bytes) -> None:
    compiled, _ = _native('root ::= "{" ([a-c] | [^\\x00-\\x7F])* "}"')
    state = compiled.grammar.initial_state().advance(data)
    if state is not None:
        words = compiled.mask_words(state)
        assert words.dtype == np.uint32 and len(words) == compiled.n_words


def test_too_ambiguous_grammar_is_e110(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mask_runner, "MAX_STACKS", 2)
    compiled, _ = _native('root ::= x\nx ::= "a" x "b" | "a" x x | ""')  # 3 stacks, then 5, 7 ...
    with pytest.raises(GrammarError) as caught:
        compiled.matcher().mask_words()
    assert caught.value.code == "E110"


def test_tables_past_their_limit_are_e108(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mask_runner, "MAX_RUN_STATES", 2)
    compiled, _ = _native('root ::= "a" "b" "a" "b" "a"')
    with pytest.raises(GrammarError) as caught:
        compiled.matcher().mask_words()
    assert caught.value.code == "E108"
    monkeypatch.setattr(mask_runner, "MAX_RUN_STATES", 1 << 19)
    fresh = structspec.compile(Grammar.from_gbnf('root ::= "a" "b"'), compiled.vocabulary)
    assert fresh.matcher().allows(0)


@pytest.mark.parametrize("shift", [-1, 1])
@pytest.mark.parametrize("dtype", [np.int16, np.int32])
def test_move_rows_naming_missing_states_are_e108(shift: int, dtype: type) -> None:
    compiled, _ = _native()
    rules = compiled.rules
    moved = rules.move_rows != no_move(rules.move_rows)
    bad = np.where(moved, rules.move_rows + shift * (rules.n_states + 1), np.iinfo(dtype).min).astype(dtype)
    with pytest.raises(GrammarError) as caught:
        mask_runner.StackRunner(replace(rules, move_rows=bad), compiled.vocabulary, compiled._trie, compiled.n_words)
    assert caught.value.code == "E108"


@pytest.mark.parametrize("calls", [((-1, 1),), ((1 << 40, 1),), ((0, 1 << 20),), ((0, -1 << 20),), ((0,),),
                                   (None,), ((0, "1"),)])
def test_rule_calls_naming_missing_states_are_e108(calls: tuple) -> None:
    """A rule call is read into the core's arrays only when it names existing states: its start,
    and its return state (relative to the caller)."""
    compiled, _ = _native('root ::= x x\nx ::= "a" | "b" x')
    rules = compiled.rules
    assert any(rules.refs)
    refs = (calls, *rules.refs[1:])
    with pytest.raises(GrammarError) as caught:
        mask_runner.StackRunner(replace(rules, refs=refs), compiled.vocabulary, compiled._trie, compiled.n_words)
    assert caught.value.code == "E108"
    with pytest.raises(GrammarError):
        mask_runner.StackRunner(replace(rules, refs=rules.refs[:-1]), compiled.vocabulary, compiled._trie,
                                compiled.n_words)


@pytest.mark.parametrize("seed", range(3))
def test_rule_calls_read_as_pairs(seed: int) -> None:
    """The core's call arrays hold each state's calls in order, with absolute return states."""
    rng = np.random.default_rng(seed)
    n = 50
    refs = tuple(tuple((int(rng.integers(n)), int(rng.integers(n)) - q) for _ in range(rng.integers(4)))
                 for q in range(n))
    off, start, ret = mask_runner.call_arrays(refs)
    assert off.tolist() == np.cumsum([0, *map(len, refs)]).tolist()
    assert [(int(a), int(b)) for a, b in zip(start, ret, strict=True)] == [
        (s, q + step) for q, calls in enumerate(refs) for s, step in calls]


@pytest.mark.parametrize("field, value", [("child_hi", 1 << 20), ("child_lo", 0), ("row_hi", 1 << 20),
                                          ("row_lo", -1), ("end_hi", 1 << 20), ("below_index", 1 << 20)])
def test_trie_nodes_out_of_range_are_e108(field: str, value: int) -> None:
    """The vocabulary trie's node records are checked as a loop split's are: a child before its
    parent or past the nodes, rows past the rows, subtree words past the table."""
    compiled, _ = _native()
    trie = compiled._trie
    nodes = trie.nodes.copy()
    nodes[field][0] = value
    nodes.flags.writeable = False  # read-only arrays are checked once (after the vocabulary's own, above)
    with pytest.raises(GrammarError) as caught:
        mask_runner.StackRunner(compiled.rules, compiled.vocabulary, replace(trie, nodes=nodes), compiled.n_words)
    assert caught.value.code == "E108"
    for bad in (replace(trie, nodes=trie.nodes.view(np.int64)), replace(trie, byte=trie.byte[:-1])):
        with pytest.raises(GrammarError) as caught:
            mask_runner.StackRunner(compiled.rules, compiled.vocabulary, bad, compiled.n_words)
        assert caught.value.code == "E108"


def test_masks_inside_a_blocked_repetition_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted repetitions compiled over block rules (forced on from a count of 4): the count
    lives on the stack, in and out of the block rule's frames."""
    monkeypatch.setattr(compiler, "BLOCK_AT", 3)
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"c", b"ab", b"bc", b"abc", b"cab", b"aaaa", b".", b"a.", None],
                                        eos_ids=[10])
    for gbnf in ('root ::= [a-c]{5,11} "."', 'root ::= ("a" | "bc"){4,} "."', 'root ::= "ab"{9} "."'):
        compiled = structspec.compile(Grammar.from_gbnf(gbnf), vocab)
        assert any("~" in name for name in compiled.rules.rule_names)
        for seed in range(6):
            _random_walk(compiled, seed, 14)


# -- equal masks share one array ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.integers(0, 2**32 - 1), max_size=40), flip=st.integers(0, 40 * 32))
def test_mask_digest_and_comparison(words: list[int], flip: int) -> None:
    a = np.array(words, np.uint32)
    assert mask_runner.words_digest(a) == mask_runner.words_digest(a.copy())
    assert mask_runner.same_words(a, a.copy())
    if words:
        b = a.copy()
        b[flip // 32 % len(b)] ^= np.uint32(1 << (flip % 32))
        assert not mask_runner.same_words(a, b)
        assert mask_runner.words_digest(a) != mask_runner.words_digest(b)  # each step is a bijection of its lane
    assert not mask_runner.same_words(a, np.append(a, np.uint32(0)))


def test_equal_masks_share_one_array_and_stay_exact() -> None:
    """Two grammars with the same strings: their masks inside a string are one array, equal to
    the mask computed afresh; a mask that differs is its own array."""
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b'"', b'a"', b"ab", b"}", None], eos_ids=[6])
    one = structspec.compile(Grammar.from_gbnf('root ::= "\\"" [ab]* "\\""'), vocab)
    two = structspec.compile(Grammar.from_gbnf('root ::= "\\"" [ab]{0,5} "\\""'), vocab)
    inside_one = one.grammar.initial_state().advance(b'"a')
    inside_two = two.grammar.initial_state().advance(b'"a')
    shared = one.mask_words(inside_one)
    assert two.mask_words(inside_two) is shared
    assert np.array_equal(shared, one._compute(inside_one))
    start = one.mask_words(one.grammar.initial_state())
    assert start is not shared and not np.array_equal(start, shared)
