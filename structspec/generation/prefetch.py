"""Token masks computed in a worker thread while the model runs.

A mask depends only on the tokens so far, so the masks a round will read -- at the committed
text and after each token of the draft's main line -- can be computed during the target's
forward. The native mask core releases the GIL while it sweeps, and compiled grammars cache
masks per parse state (shared and thread-safe), so the round's own reads then find them ready.

The parse states along the draft's main line are the ones the chain that drafted it went
through (its matcher's history), so nothing is stepped again here. Only masks not computed yet
go to the worker: the check along the line is one native call over the states' numbers in the
compiled grammar's state table, which marks each state whose mask a matcher, the worker or
greedy verification computed (a hint: a mask the mask cache dropped since is computed again
where it is read), and when every mask is there -- greedy decoding along a path already
taken, forced tokens seen before -- no work is handed over at all. A
hand-over costs thread wake-ups and a share of the GIL while the forward's own Python code runs:
on a CPU with a small model that was 15% of the time per token for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from structspec.errors import GrammarError
from structspec.grammar.parse_state import ParseState
from structspec.masks.compiled import CompiledGrammar
from structspec.masks.matcher import Matcher


class MaskPrefetch:
    """One worker thread that fills the mask caches along token sequences. Use it as a context
    manager, or leave it to the garbage collector: its idle worker then exits."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="structspec-masks")
        self._pending: Future | None = None

    def __enter__(self) -> MaskPrefetch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.wait()
        self._pool.shutdown()

    def start(self, walks: Iterable[tuple[Matcher, int]]) -> None:
        """For each ``(matcher, n)``, compute the masks of the states the matcher went through
        over its last ``n`` tokens and of its current state (the matcher is only read: a
        draft's main line, walked by the chain that drafted it, is not stepped again)."""
        self.wait()
        left = [walk for walk in (_uncached(matcher, n) for matcher, n in walks) if walk is not None]
        if left:
            self._pending = self._pool.submit(_masks_along, left)

    def wait(self) -> None:
        """Block until the last prefetch is done (its masks are then cached)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()


def _uncached(matcher: Matcher, n: int) -> tuple[CompiledGrammar, list[ParseState], list[int], int] | None:
    """The states along ``matcher``'s last ``n`` tokens and after them, from the first whose
    mask was not computed yet, with their numbers in the state table and its epoch (read in one
    native call: :meth:`Matcher.states_to_mask`); None when every mask there was, or the walk
    reaches a finished text first (nothing may follow it: no mask to come)."""
    found = matcher.states_to_mask(n)
    return None if found is None else (matcher.compiled, *found)


def _masks_along(walks: list[tuple[CompiledGrammar, list[ParseState], list[int], int]]) -> None:
    """Fill the caches and mark the masks computed in the state table; a grammar error is left
    for the round's own read to raise."""
    for compiled, states, numbers, epoch in walks:
        try:
            for state, number in zip(states, numbers, strict=True):
                if state.is_dead_end():
                    break
                compiled.mask_words(state)
                compiled.table.mark_masked(number, epoch)
        except GrammarError:
            continue
