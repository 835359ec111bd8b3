"""The numbered parse states and their flat step table (the round core's first layer): every
step it gives is the compiled grammar's, through epochs that start when it is full and steps
computed while another thread starts one."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from conftest import run_interleaved
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from structspec.masks._states import FORBIDDEN, STALE, StateTable
from test_masks import _byte_vocabularies, _grammars

import structspec
from structspec import Grammar, GrammarError, Vocabulary

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.filter_too_much])


def _walk(compiled, table: StateTable, seed: int, steps: int) -> None:
    """Random tokens from the initial state: each step the table gives is the compiled grammar's
    (a forbidden token stays put), through whatever epochs the table's bounds start."""
    rng = random.Random(seed)
    state = compiled.grammar.initial_state()
    number, epoch = table.number(state), table.epoch
    for _ in range(steps):
        token = rng.randrange(compiled.vocabulary.size)
        if token in compiled.vocabulary.eos_ids:
            continue
        expected = compiled.advance_token(state, token)
        found, now = table.step(number, token, epoch, compiled._advance_token)
        if found == STALE:  # an epoch began since the state was numbered: number it again
            number = table.number(state)
            found, now = table.step(number, token, table.epoch, compiled._advance_token)
        assert found != STALE
        if expected is None:
            assert found == FORBIDDEN
            number, epoch = table.number(state), table.epoch  # still there, in whichever epoch
            continue
        assert now == table.epoch and found >= 0 and table.state(found) == expected
        state, number, epoch = expected, found, now


def _compiled(gbnf: str, vocab: Vocabulary):
    try:
        return structspec.compile(Grammar.from_gbnf(gbnf), vocab)
    except GrammarError:
        assume(False)
        raise


@SETTINGS
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16),
       bounds=st.sampled_from([(65536, 262144), (1, 1), (2, 3), (4, 1), (1, 8)]))
def test_steps_are_the_compiled_grammars_through_epochs(gbnf: str, vocab: Vocabulary, seed: int,
                                                        bounds: tuple[int, int]) -> None:
    compiled = _compiled(gbnf, vocab)
    table = StateTable(*bounds)
    _walk(compiled, table, seed, 40)
    assert table.size <= bounds[0] and table.steps <= bounds[1]


def test_a_known_step_is_read_without_asking_again() -> None:
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"ab", None], eos_ids=[3])
    compiled = structspec.compile(Grammar.from_gbnf('root ::= ("a" | "b")*'), vocab)
    asked = []

    def advance(state, token):
        asked.append(token)
        return compiled._advance_token(state, token)

    table = StateTable()
    start = table.number(compiled.grammar.initial_state())
    first = table.step(start, 2, table.epoch, advance)
    assert table.step(start, 2, table.epoch, advance) == first and asked == [2]
    assert table.step(start, 2, table.epoch - 1, advance)[0] == STALE  # a number of another epoch
    assert table.step(10**6, 2, table.epoch, advance)[0] == STALE  # no such number
    with pytest.raises(ValueError, match="out of range"):
        table.step(start, -1, table.epoch, advance)
    with pytest.raises(ValueError):
        StateTable(0)


def test_a_step_computed_while_another_thread_starts_an_epoch_is_not_filed() -> None:
    """The step's own computation runs Python; a new epoch begun meanwhile voids the caller's
    number: the answer comes in the new epoch, and the step is not filed under a number that
    now means another state."""
    vocab = Vocabulary.from_token_bytes([b"a", b"b", None], eos_ids=[2])
    compiled = structspec.compile(Grammar.from_gbnf('root ::= "a" "b"'), vocab)
    table: StateTable

    def advance(state, token):
        thread = threading.Thread(target=lambda: [table.number(compiled.grammar.initial_state().advance(b"a"))
                                                  for _ in range(3)])
        thread.start()
        thread.join()
        return compiled._advance_token(state, token)

    table = StateTable(max_states=1)
    start = table.number(compiled.grammar.initial_state())
    after, epoch = table.step(start, 0, table.epoch, advance)  # the other thread's numbering filled epoch 0
    assert epoch == table.epoch >= 1 and table.state(after) == compiled.grammar.initial_state().advance(b"a")
    assert table.steps == 0  # not filed under a number of the old epoch


def test_threads_sharing_a_small_table_step_as_the_grammar_does() -> None:
    """Four threads walk random tokens and greedy draft trees through one compiled grammar whose
    table is small enough to start a new epoch every few steps (the steps' own Python lets the
    threads interleave): every state each reaches is the one the grammar's uncached steps give."""
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"c", b'"', b"ab", b" ", b"bc", None], eos_ids=[7])
    compiled = structspec.compile(Grammar.from_gbnf(r'root ::= "\"" ([a-c ] | "ab"){0,40} "\""'), vocab)
    compiled.table = StateTable(3, 5)
    failures: list[str] = []

    def walk(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(30):
            matcher, state = compiled.matcher(), compiled.grammar.initial_state()
            for _ in range(30):
                if rng.random() < 0.3:  # a greedy walk over random rows
                    n = rng.randint(0, 4)
                    tokens = [rng.randrange(7) for _ in range(n)]
                    parents = [i - 1 for i in range(n)]
                    rows = np.array([[rng.uniform(-1, 1) for _ in range(8)] for _ in range(n + 1)], np.float32)
                    before = matcher.num_tokens
                    path, token = matcher.greedy_path(rows, tokens, parents, list(range(n)), None)
                    taken = [tokens[i] for i in path] + ([token] if token is not None and token >= 0 else [])
                    for step in taken:
                        state = compiled._advance_token(state, step)
                    if matcher.num_tokens != before + len(taken) or matcher.state != state:
                        failures.append(f"greedy walk {tokens} {path} {token}")
                        return
                else:
                    token = rng.randrange(7)
                    expected = compiled._advance_token(state, token)
                    if matcher.accept_token(token) != (expected is not None):
                        failures.append(f"step {token}")
                        return
                    state = state if expected is None else expected
                if state is None or matcher.is_finished() or matcher.state != state:
                    if matcher.state != state:
                        failures.append("state")
                    break

    run_interleaved(walk, range(4))
    assert not failures and compiled.table.epoch > 10


@SETTINGS
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16), states=st.integers(1, 40),
       back=st.integers(0, 12))
def test_the_states_left_to_mask_are_those_from_the_first_not_marked(gbnf: str, vocab: Vocabulary, seed: int,
                                                                     states: int, back: int) -> None:
    """``Matcher.states_to_mask`` (``StateTable.unmasked_along``): along a random walk with
    some states' masks marked computed, the states of the last ``back`` steps from the first one
    not marked, with their numbers; None when all are marked, when a complete text nothing may
    follow comes first, or when numbering them began an epoch (which forgets the marks) -- also
    with tables small enough to begin epochs during the walk."""
    compiled = _compiled(gbnf, vocab)
    compiled.table = table = StateTable(states, 64)
    rng = random.Random(seed)
    matcher = compiled.matcher()
    marked: set[tuple[int, int]] = set()  # (number, epoch) marked computed
    for _ in range(rng.randint(0, 12)):
        allowed = [t for t in range(vocab.size) if t not in vocab.eos_ids and matcher.copy().accept_token(t)]
        if not allowed:
            break
        matcher.accept_token(rng.choice(allowed))
        if rng.random() < 0.6:
            number, epoch = table.number(matcher.state), table.epoch
            table.mark_masked(number, epoch)
            marked.add((number, epoch))
    back = min(back, matcher.num_tokens)
    walked = matcher.recent_states(back)
    epoch = table.epoch
    found = matcher.states_to_mask(back)
    if table.epoch != epoch:  # numbering a state forgotten by an earlier epoch began another
        assert found is None
        return
    numbers = [table.number(state) for state in walked]
    expected = None
    for at, state in enumerate(walked):
        if state.accepting and not state.heads:
            break
        if (numbers[at], epoch) not in marked:
            expected = (walked[at:], numbers[at:], epoch)
            break
    assert found == expected


def test_a_complete_text_nothing_may_follow_leaves_no_mask_to_compute() -> None:
    vocab = Vocabulary.from_token_bytes([b"a", b"b", None], eos_ids=[2])
    compiled = structspec.compile(Grammar.from_gbnf('root ::= "ab"'), vocab)
    matcher = compiled.matcher()
    table = compiled.table
    assert matcher.states_to_mask(0) == ([matcher.state], [table.number(matcher.state)], table.epoch)
    for token in (0, 1):
        table.mark_masked(table.number(matcher.state), table.epoch)
        matcher.accept_token(token)
    assert matcher.is_finished() and matcher.states_to_mask(2) is None


def test_a_history_of_millions_of_tokens_is_freed_without_recursing() -> None:
    """Freeing a history frees a chain of nodes, each holding the last reference to the one
    before it: without the trashcan this recursed once per node and overflowed the C stack
    (a crash at 3 million nodes with an 8 MB stack)."""
    from structspec.masks._states import History

    node = None
    for index in range(3_000_000):
        node = History(index, node)
    assert node.length == 2_999_999 and node.previous.state == 2_999_998
    del node
