"""The compile pool: children reused across jobs, and replaced once they hold too much memory."""

from __future__ import annotations

import os

from structspec.server.compile_pool import CompilePool, resident_bytes


def _hold(megabytes: int) -> int:
    """Keep ``megabytes`` alive in the child (as a cache would) and return its pid."""
    global _kept
    _kept = bytearray(megabytes << 20)
    _kept[::4096] = b"x" * len(_kept[::4096])  # touch every page so it is resident
    return os.getpid()


_kept = bytearray()


def test_a_child_under_its_memory_bound_serves_the_next_job() -> None:
    pool = CompilePool(processes=1, timeout=60.0, memory=1 << 40)
    try:
        assert pool.run(_hold, 1) == pool.run(_hold, 1)
        assert pool.retired == 0
    finally:
        pool.close()


def test_a_child_past_its_memory_bound_is_replaced_after_its_job() -> None:
    pool = CompilePool(processes=1, timeout=60.0)
    try:
        small = pool.run(_hold, 1)
        pool.memory = pool.run(resident_bytes) + (32 << 20)  # the child as it is, plus room for 32 MiB
        assert pool.run(_hold, 8) == small  # within the bound: kept
        big = pool.run(_hold, 128)  # the job still completes in the child that grew ...
        assert big == small and pool.retired == 1
        assert pool.run(_hold, 1) != big  # ... which then made way for a fresh one
    finally:
        pool.close()
