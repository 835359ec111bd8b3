"""One bounded, thread-safe least-recently-used cache for every layer (see docs/caching.md).

A :class:`BoundedCache` holds at most ``max_entries`` entries and at most ``max_bytes`` of
their estimated size; past either bound it drops the least recently used entries. Each
entry's size comes from the ``weigh(key, value)`` function given at construction (an estimate in bytes:
numpy buffers plus a fixed overhead per object is what the callers count). Values whose size
grows after they were stored (a compiled grammar fills its mask caches as it is used) are
re-measured by :meth:`BoundedCache.reweigh`.

Recency is kept in steps, so that a hit costs one dict read: every insert and every refresh
takes the next tick of a counter, and a hit refreshes its entry (moves it to the most recent
end, under the lock) only when more than half of the cache's capacity -- the entries it can
hold: ``max_entries``, or as many as ``max_bytes`` holds at the entries' mean size, whichever is
fewer -- was inserted or refreshed since its own tick. An entry just hit therefore always sits
among the newest half-capacity entries of the order, which is the newer half once the cache is
full (counting the middle entry), and eviction -- which happens only then -- takes entries from
the older end in the order of their last refresh; what it gives up against an exact LRU is the
order among those newest entries. A cache far from full is read without refreshes at all.

It imports nothing from the project, so every package may use it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

ENTRY_OVERHEAD = 64  # bytes charged per entry for the key, the links and the bookkeeping
MISSING: Any = object()
"""What :meth:`BoundedCache.get` returns for a key it does not hold, when no default is given
(so that ``None`` can be a cached value)."""


def _entry_overhead(_key: Any, _value: Any) -> int:
    return ENTRY_OVERHEAD


class BoundedCache(Generic[K, V]):
    """A thread-safe LRU bounded by entry count and by estimated bytes.

    ``max_entries`` / ``max_bytes`` of ``None`` leave that bound off (at least one must be
    set). An entry bigger than ``max_bytes`` alone is still kept while it is the only one, so
    that the value just computed is not thrown away before its caller uses it again.

    Every change of the entries is made under one lock; a hit reads the dict without it (a
    key's value never changes while it is held, so a read sees the value or nothing) and
    takes it only to refresh the entry. ``hits`` and ``misses`` are counted without the lock:
    exact from one thread, possibly short by a few under contention.
    """

    def __init__(
        self,
        *,
        max_entries: int | None = None,
        max_bytes: int | None = None,
        weigh: Callable[[K, V], int] = _entry_overhead,
    ) -> None:
        if max_entries is None and max_bytes is None:
            raise ValueError("a BoundedCache needs max_entries or max_bytes")
        for name, bound in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if bound is not None and bound < 1:
                raise ValueError(f"{name} must be at least 1, got {bound}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._weigh = weigh
        # key -> (value, size, tick of its last refresh): a tuple, replaced on refresh, so that an entry whose
        # value the cyclic collector does not track (a numpy mask, None) adds no object for it to walk
        self._items: OrderedDict[K, tuple[V, int, int]] = OrderedDict()
        self._tick = 0  # taken by every insert and refresh
        self._stale = 0  # ticks after which a hit refreshes its entry: half the capacity (see _measure)
        self._lock = threading.Lock()
        self.nbytes = 0
        """Estimated bytes of the entries held."""
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: K) -> bool:
        return key in self._items

    def get(self, key: K, default: Any = MISSING) -> V | Any:
        """The value held for ``key`` (now among the newer half of the entries), else ``default``."""
        found = self._items.get(key)
        if found is None:
            self.misses += 1
            return default
        self.hits += 1
        if self._tick - found[2] > self._stale:
            with self._lock:
                self._refresh(key)
        return found[0]

    def put(self, key: K, value: V) -> V:
        """Hold ``value`` for ``key`` and return the value now held: the one already there if
        another thread stored it first (both computed the same thing; the first one wins, so
        every caller shares one object)."""
        size = self._weigh(key, value)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._refresh(key)
                return found[0]
            self._tick += 1
            self._items[key] = (value, size, self._tick)
            self.nbytes += size
            self._evict()
            return value

    def pop(self, key: K) -> V | None:
        """Drop ``key``; returns its value, or None when it was not held."""
        with self._lock:
            found = self._items.pop(key, None)
            if found is None:
                return None
            self.nbytes -= found[1]
            self._measure()
            return found[0]

    def reweigh(self) -> None:
        """Measure every entry again (values that grew in use) and drop the least recently used
        until the bounds hold."""
        with self._lock:
            values = [(key, entry[0]) for key, entry in self._items.items()]
        sizes = {key: self._weigh(key, value) for key, value in values}  # outside the lock: weigh may be slow
        with self._lock:
            for key, size in sizes.items():
                found = self._items.get(key)
                if found is not None:
                    self.nbytes += size - found[1]
                    self._items[key] = (found[0], size, found[2])  # in place: the order stays
            self._evict()

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._items.clear()
            self.nbytes = 0
            self._measure()

    def keys(self) -> list[K]:
        """The keys held, oldest refresh first (a snapshot; the order eviction takes)."""
        with self._lock:
            return list(self._items)

    def values(self) -> list[V]:
        """The values held, oldest refresh first (a snapshot)."""
        with self._lock:
            return [entry[0] for entry in self._items.values()]

    def stats(self) -> dict[str, int]:
        """Entries, estimated bytes, hits, misses and evictions so far."""
        return {"size": len(self._items), "bytes": self.nbytes, "hits": self.hits, "misses": self.misses,
                "evictions": self.evictions}

    def _refresh(self, key: K) -> None:
        """Make ``key`` the most recently used, if it is still held (called under the lock)."""
        found = self._items.get(key)
        if found is not None:
            self._tick += 1
            self._items[key] = (found[0], found[1], self._tick)
            self._items.move_to_end(key)

    def _evict(self) -> None:
        items = self._items
        while len(items) > 1 and (
            (self.max_entries is not None and len(items) > self.max_entries)
            or (self.max_bytes is not None and self.nbytes > self.max_bytes)
        ):
            self.nbytes -= items.popitem(last=False)[1][1]
            self.evictions += 1
        self._measure()

    def _measure(self) -> None:
        """Set the ticks after which a hit refreshes its entry to half the capacity: ``max_entries``,
        or the entries ``max_bytes`` holds at their mean size if fewer, and never below the entries
        held (called under the lock whenever the entries or their sizes change)."""
        held = len(self._items)
        capacity = held if self.max_entries is None else self.max_entries
        if self.max_bytes is not None and self.nbytes > 0:
            by_bytes = held * self.max_bytes // self.nbytes
            capacity = by_bytes if self.max_entries is None else min(capacity, by_bytes)
        self._stale = max(capacity, held) >> 1
