"""The bounded cache every layer uses: least recently used first out, within entries and bytes."""

from __future__ import annotations

import threading
from collections import OrderedDict

import pytest
from conftest import run_interleaved
from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.lru import MISSING, BoundedCache

operations = st.lists(
    st.tuples(st.sampled_from(["get", "put", "pop", "grow", "reweigh"]), st.integers(0, 9), st.integers(1, 40)),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(ops=operations, max_entries=st.none() | st.integers(1, 6), max_bytes=st.none() | st.integers(1, 120))
def test_behaves_like_a_reference_lru(ops, max_entries, max_bytes) -> None:
    """Against a plain OrderedDict model of the stepped recency (a hit moves its entry to the
    end only once more than half of the capacity -- max_entries, or what max_bytes holds at the
    mean size if fewer, never below the entries held -- was inserted or moved since it was):
    same contents in the same order, bytes summed right, both bounds hold whenever more than one
    entry is left, and an entry just hit is among the newest half-capacity entries (the newer
    half, the middle one counted, once the cache is full)."""
    if max_entries is None and max_bytes is None:
        max_entries = 3
    sizes: dict[int, int] = {}  # what weigh says now, per value (values are their keys)
    cache: BoundedCache[int, int] = BoundedCache(max_entries=max_entries, max_bytes=max_bytes,
                                                 weigh=lambda _key, value: sizes[value])
    model: OrderedDict[int, list[int]] = OrderedDict()  # key -> [size recorded, tick of its last move]
    tick = 0

    def stale() -> int:
        held, total = len(model), sum(size for size, _ in model.values())
        capacity = held if max_entries is None else max_entries
        if max_bytes is not None and total > 0:
            by_bytes = held * max_bytes // total
            capacity = by_bytes if max_entries is None else min(capacity, by_bytes)
        return max(capacity, held) // 2

    def move(key: int) -> None:
        nonlocal tick
        tick += 1
        model[key][1] = tick
        model.move_to_end(key)

    def evict() -> None:
        while len(model) > 1 and ((max_entries is not None and len(model) > max_entries)
                                  or (max_bytes is not None and sum(size for size, _ in model.values()) > max_bytes)):
            model.popitem(last=False)

    for op, key, size in ops:
        if op == "get":
            assert cache.get(key) == (key if key in model else MISSING)
            if key in model:
                step = stale()
                if tick - model[key][1] > step:
                    move(key)
                assert key in cache.keys()[-(step + 1):]
                if max_entries is not None and len(model) == max_entries:
                    assert key in cache.keys()[(len(model) - 1) // 2:]
        elif op == "put":
            sizes.setdefault(key, size)
            assert cache.put(key, key) == key
            if key in model:
                move(key)
            else:
                model[key] = [sizes[key], 0]
                move(key)
                evict()
        elif op == "pop":
            assert cache.pop(key) == (key if key in model else None)
            model.pop(key, None)
        elif op == "grow":
            sizes[key] = size  # the value grew (or shrank) in use; seen at the next reweigh
        else:
            cache.reweigh()
            for k, entry in model.items():
                entry[0] = sizes[k]
            evict()
        assert cache.values() == list(model)
        assert cache.nbytes == sum(size for size, _ in model.values())
        assert len(cache) == len(model)


def test_hits_in_a_cache_far_from_full_move_nothing() -> None:
    """Below half its capacity a cache evicts nothing soon, so hits keep the insertion order
    (no lock, no move); once the inserts since an entry pass half the capacity, a hit moves it."""
    cache: BoundedCache[int, int] = BoundedCache(max_entries=100)
    for key in range(10):
        cache.put(key, key)
    for _ in range(3):
        for key in reversed(range(10)):
            assert cache.get(key) == key
    assert cache.keys() == list(range(10))
    for key in range(10, 60):
        cache.put(key, key)
    assert cache.get(0) == 0 and cache.keys()[-1] == 0  # 59 inserts since: past half of 100
    assert cache.get(1) == 1 and cache.keys()[-1] == 1


def test_put_keeps_the_first_value_stored_for_a_key() -> None:
    cache: BoundedCache[str, list[int]] = BoundedCache(max_entries=4)
    first, second = [1], [1]
    assert cache.put("k", first) is first
    assert cache.put("k", second) is first
    assert cache.get("k") is first


def test_none_is_a_value_and_missing_is_not() -> None:
    cache: BoundedCache[str, None] = BoundedCache(max_entries=2)
    cache.put("k", None)
    assert cache.get("k") is None
    assert cache.get("other") is MISSING
    assert cache.get("other", 7) == 7
    assert cache.stats() == {"size": 1, "bytes": 64, "hits": 1, "misses": 2, "evictions": 0}


def test_entries_of_untracked_values_add_nothing_for_the_collector_to_walk() -> None:
    """Masks (numpy rows) cached by the thousand must not each add a container the cyclic
    collector walks: its full collections grow with every tracked object of the process."""
    import gc

    import numpy as np

    cache: BoundedCache[int, np.ndarray] = BoundedCache(max_entries=10_000)
    rows = [np.zeros(4, np.uint32) for _ in range(2_000)]
    gc.collect()
    before = len(gc.get_objects())
    for key, row in enumerate(rows):
        cache.put(key, row)
    for key in range(0, 2_000, 3):  # hits that refresh their entries
        cache.get(key)
    cache.reweigh()
    gc.collect()
    assert len(gc.get_objects()) - before < 50
    assert all(cache.get(key) is row for key, row in enumerate(rows))


def test_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="max_entries or max_bytes"):
        BoundedCache()
    with pytest.raises(ValueError, match="max_bytes must be at least 1"):
        BoundedCache(max_bytes=0)


def test_threads_keep_the_byte_count_exact() -> None:
    cache: BoundedCache[int, int] = BoundedCache(max_entries=50, max_bytes=2_000, weigh=lambda _k, v: v % 97 + 1)

    def hammer(seed: int) -> None:
        for i in range(3_000):
            key = (i * 7919 + seed) % 211
            if cache.get(key) is MISSING:
                cache.put(key, key)
            if i % 500 == 0:
                cache.reweigh()

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.nbytes == sum(v % 97 + 1 for v in cache.values())
    assert len(cache) <= 50 and cache.nbytes <= 2_000


@settings(max_examples=20, deadline=None)
@given(seeds=st.lists(st.integers(0, 2**16), min_size=2, max_size=4),
       max_entries=st.integers(1, 12), max_bytes=st.integers(1, 400))
def test_threads_never_see_a_wrong_value_and_keep_the_bounds(seeds, max_entries, max_bytes) -> None:
    """Hits, puts, pops, reweighs and the evictions they cause from several threads at once:
    every get returns the value stored for its key or nothing, every put the value held, and
    afterwards the bytes add up and both bounds hold (past one entry)."""
    cache: BoundedCache[int, tuple[int, int]] = BoundedCache(max_entries=max_entries, max_bytes=max_bytes,
                                                             weigh=lambda _k, v: v[0] % 53 + 1)
    wrong: list[object] = []

    def hammer(seed: int) -> None:
        for i in range(2_000):
            key = (i * 7919 + seed * 31) % 37
            found = cache.get(key)
            if found is not MISSING and found[0] != key:
                wrong.append((key, found))
            if found is MISSING:
                held = cache.put(key, (key, seed))
                if held[0] != key:
                    wrong.append((key, held))
            if i % 97 == seed % 97:
                cache.pop(key)
            if i % 400 == 0:
                cache.reweigh()

    run_interleaved(hammer, seeds)
    assert not wrong
    assert cache.nbytes == sum(v[0] % 53 + 1 for v in cache.values())
    assert len(cache) == 1 or (len(cache) <= max_entries and cache.nbytes <= max_bytes)
    assert all(value[0] == key for key, value in zip(cache.keys(), cache.values(), strict=True))
