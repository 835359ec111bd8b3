"""The rule set keeps its moves as rows relative to the state, shared between states: expanding
them must give back the dense class table exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structspec import Grammar
from structspec.grammar.ruleset import NARROW_REACH, no_move, shared_move_rows

GRAMMARS = sorted((Path(__file__).resolve().parents[2] / "grammars").glob("*.gbnf"))


@st.composite
def class_tables(draw: st.DrawFn) -> np.ndarray:
    """Dense tables whose rows often repeat up to their offset, as inlined rule copies do."""
    n_classes = draw(st.integers(0, 6))
    pattern = draw(st.lists(st.lists(st.integers(-3, 3), min_size=n_classes, max_size=n_classes), min_size=1,
                            max_size=4))
    copies = draw(st.integers(1, 5))
    n_states = len(pattern) * copies + draw(st.integers(0, 3))
    table = np.full((n_states, n_classes), -1, dtype=np.int32)
    for copy in range(copies):
        for i, row in enumerate(pattern):
            q = copy * len(pattern) + i
            table[q] = [q + d if 0 <= q + d < n_states else -1 for d in row]
    for q in range(len(pattern) * copies, n_states):
        table[q] = draw(st.lists(st.integers(-1, n_states - 1), min_size=n_classes, max_size=n_classes))
    return table


def dense_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The shared rows of a dense class table: one rule whose columns are its classes."""
    return shared_move_rows([table], np.arange(table.shape[1])[None])


def expand(move_rows: np.ndarray, move_row: np.ndarray) -> np.ndarray:
    relative = move_rows[move_row].astype(np.int64)
    states = np.arange(len(move_row))[:, None]
    return np.where(relative != no_move(move_rows), relative + states, -1)


@settings(max_examples=300, deadline=None)
@given(class_tables())
def test_shared_rows_round_trip(table: np.ndarray) -> None:
    move_rows, move_row = dense_rows(table)
    assert move_rows.dtype == np.int16 and move_row.dtype == np.int32
    assert move_row.shape == (len(table),) and move_rows.shape[1] == table.shape[1]
    assert np.array_equal(expand(move_rows, move_row), table)
    assert len({row.tobytes() for row in move_rows}) == len(move_rows)  # each distinct row once


def test_grammars_round_trip_and_share_rows() -> None:
    for path in GRAMMARS:
        rules = Grammar.from_gbnf(path.read_text(encoding="utf-8")).ruleset
        table = rules.class_table()
        assert table.shape == (rules.n_states, rules.n_classes)
        assert np.array_equal(expand(rules.move_rows, rules.move_row), table)
        assert np.array_equal(dense_rows(table)[0], rules.move_rows)
        some = np.array([0, rules.n_classes - 1]) if rules.n_classes else np.array([], dtype=np.int64)
        assert np.array_equal(rules.class_table(some), table[:, some])


def sorted_distinct_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: the relative rows, deduplicated by sorting them whole (in the order of their bytes)."""
    relative = np.where(table >= 0, table - np.arange(len(table))[:, None], np.iinfo(np.int32).min).astype(np.int32)
    if not relative.size:
        return relative[:1], np.zeros(len(table), dtype=np.int32)
    whole = np.ascontiguousarray(relative).view(np.dtype((np.void, 4 * relative.shape[1]))).ravel()
    _, first, row = np.unique(whole, return_index=True, return_inverse=True)
    return relative[first], row.reshape(-1)


@settings(max_examples=300, deadline=None)
@given(class_tables(), st.data())
def test_shared_rows_in_sorted_order(table: np.ndarray, data: st.DataObject) -> None:
    """The rows found by hashing are numbered as sorting them whole numbers them, state for state."""
    if len(table) and table.shape[1]:  # near-duplicates: rows that differ in one class only
        column = data.draw(st.integers(0, table.shape[1] - 1))
        table = np.repeat(table, 3, axis=0)
        table[::3, column] = -1
    move_rows, move_row = dense_rows(table)
    rows, row = sorted_distinct_rows(table)
    assert np.array_equal(move_row, row)
    assert np.array_equal(move_rows.astype(np.int64)[move_rows != no_move(move_rows)],
                          rows.astype(np.int64)[rows != np.iinfo(np.int32).min])
    assert move_rows.shape == rows.shape


@settings(max_examples=100, deadline=None)
@given(class_tables(), st.integers(0, 2))
def test_far_moves_keep_wide_rows(table: np.ndarray, reach: int) -> None:
    """Rows stay int32 when some move goes further than int16 holds, and round-trip the same."""
    far = np.full((NARROW_REACH + reach, table.shape[1]), -1, dtype=np.int32)
    far[: len(table)] = table
    if table.shape[1]:
        far[0, 0] = len(far) - 1  # a move of len(far) - 1 states
    move_rows, move_row = dense_rows(far)
    wide = table.shape[1] > 0 and len(far) - 1 > NARROW_REACH
    assert move_rows.dtype == (np.int32 if wide else np.int16)
    assert np.array_equal(expand(move_rows, move_row), far)


@st.composite
def rule_tables(draw: st.DrawFn) -> tuple[list[np.ndarray], np.ndarray]:
    """Rules' local move tables (int8, int16 or int32, local targets) and, per grammar class, each
    rule's local class, as the compiler lays a grammar out from its rules."""
    n_classes = draw(st.integers(0, 5))
    tables, columns = [], []
    for _ in range(draw(st.integers(1, 4))):
        n, width = draw(st.integers(0, 6)), draw(st.integers(1, 4))
        cells = draw(st.lists(st.integers(-1, max(n - 1, -1)), min_size=n * width, max_size=n * width))
        dtype = draw(st.sampled_from([np.int8, np.int16, np.int32]))
        tables.append(np.array(cells, dtype=dtype).reshape(n, width))
        columns.append(draw(st.lists(st.integers(0, width - 1), min_size=n_classes, max_size=n_classes)))
    return tables, np.array(columns, dtype=np.int32).reshape(len(tables), n_classes)


@settings(max_examples=300, deadline=None)
@given(rule_tables())
def test_rule_tables_give_the_rows_of_their_dense_table(rules: tuple[list[np.ndarray], np.ndarray]) -> None:
    """Reading each rule's own distinct rows through its columns gives the rows and numbering of
    the grammar's dense class table (each rule's targets made global), without writing it."""
    tables, columns = rules
    dense = []
    offset = 0
    for table, cols in zip(tables, columns, strict=True):
        local = table.astype(np.int64)[:, cols]
        dense.append(np.where(local >= 0, local + offset, -1))
        offset += len(table)
    table = np.concatenate(dense).astype(np.int32).reshape(offset, columns.shape[1])
    move_rows, move_row = shared_move_rows(tables, columns)
    if table.size:
        rows, row = sorted_distinct_rows(table)
        assert np.array_equal(move_row, row)
        assert move_rows.dtype == np.int16 and move_rows.shape == rows.shape
        assert np.array_equal(move_rows.astype(np.int64)[move_rows != no_move(move_rows)],
                              rows.astype(np.int64)[rows != np.iinfo(np.int32).min])
        assert np.array_equal(expand(move_rows, move_row), table)
    else:
        assert move_row.shape == (offset,)


def test_rule_tables_out_of_their_classes_are_refused() -> None:
    table = np.array([[1, -1], [-1, -1]], dtype=np.int8)
    with pytest.raises(ValueError):
        shared_move_rows([table], np.array([[0, 2]]))
    with pytest.raises(ValueError):
        shared_move_rows([table], np.array([[0, -1]]))
    with pytest.raises(ValueError):
        shared_move_rows([table.astype(np.int64)], np.array([[0, 1]]))
    with pytest.raises(ValueError):
        shared_move_rows([table], np.zeros((2, 2)))
