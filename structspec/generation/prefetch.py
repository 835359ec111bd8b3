"""Token masks computed in a worker thread while the model runs.

A mask depends only on the tokens so far, so the masks a round will read -- at the committed
text and after each token of the draft's main line -- can be computed during the target's
forward. The native mask core releases the GIL while it sweeps, and compiled grammars cache
masks per parse state (shared and thread-safe), so the round's own reads then find them ready.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

from structspec.errors import GrammarError
from structspec.masks.matcher import Matcher


class MaskPrefetch:
    """One worker thread that fills the mask cache along token sequences."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._pending: Future | None = None

    def start(self, matcher: Matcher, tokens: Sequence[int] = ()) -> None:
        """Compute the mask of ``matcher``'s state and of the states after each of ``tokens``
        (on a copy: ``matcher`` is not moved)."""
        self.wait()
        self._pending = self._pool.submit(_masks_along, matcher.copy(), list(tokens))

    def wait(self) -> None:
        """Block until the last prefetch is done (its masks are then cached)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()


@contextmanager
def mask_prefetch() -> Iterator[MaskPrefetch]:
    """A :class:`MaskPrefetch` whose worker lives for the ``with`` block."""
    with ThreadPoolExecutor(1, thread_name_prefix="structspec-masks") as pool:
        prefetch = MaskPrefetch(pool)
        try:
            yield prefetch
        finally:
            prefetch.wait()


def _masks_along(matcher: Matcher, tokens: list[int]) -> None:
    """Fill the cache; a grammar error is left for the round's own read to raise."""
    try:
        matcher.mask_words()
        for token in tokens:
            if not matcher.accept_token(token) or matcher.is_finished():
                return
            matcher.mask_words()
    except GrammarError:
        return
