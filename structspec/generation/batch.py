"""Continuous batching: many sequences decoded together, one target forward a step.

A :class:`Batch` holds rows (:class:`~structspec.generation.sequence.Sequence`), each with its
own prompt, constraint, matcher, sampling, random generator, draft chain and stop. Rows join
at any step and leave when done. A step:

1. rows added since the last step join the
   :class:`~structspec.generation.batch_cache.BatchCache`, each holding the longest prefix of
   its prompt that a row holds already (shared, not encoded again);
2. every row drafts (grammar-forced tokens, n-grams, the draft model: the same chain as alone);
3. **one target forward** over every row's pending tokens (the last committed one; for a row
   just joined, the rest of its prompt) and draft tree, packed into one sequence, each row
   attending to its own cache row (see :mod:`~structspec.generation.batch_cache` for the layout);
4. every row verifies its own rows of logits and keeps the branch it accepted, so rows move on
   by different numbers of tokens;
5. finished rows leave, and their cache rows with them.

The masks step 4 reads (each row's, at its committed text and along its draft's main line) are
computed in a worker thread during step 3's forward (:mod:`structspec.generation.prefetch`).

Each row runs the same :class:`~structspec.generation.loop.Decoding` as a sequence decoded
alone, so a greedy row's tokens are the ones :meth:`Generator.generate` gives it. A model whose
attention cannot take the per-row masks (see
:func:`~structspec.generation.cache.tree_attention`) still runs in a batch, one forward per row.
"""

from __future__ import annotations

import time

from structspec.generation.adaptive import ForwardCost
from structspec.generation.batch_cache import BatchCache, Feed
from structspec.generation.cache import CachedModel, common_prefix
from structspec.generation.chain import Draft
from structspec.generation.logit_rows import LogitRows
from structspec.generation.prefetch import MaskPrefetch
from structspec.generation.sequence import Sequence
from structspec.tokens.vocabulary import Vocabulary

WAIT_FOR_PREFIX = 32
"""Prompt tokens shared with a row joining in the same step that make a row wait a step for them
(a step's forward costs a couple of milliseconds; feeding 32 tokens twice costs about as much)."""


class Batch:
    """Sequences decoded together; see the module docstring. Not thread-safe: one thread adds,
    cancels and steps."""

    def __init__(self, model, vocabulary: Vocabulary, trees: bool) -> None:
        self.model = model
        self.width = vocabulary.size
        self.cache = BatchCache(model, self.width) if trees else None
        # A step's forward per row (its share of the time against the tokens fed per row), shared
        # by the rows' draft chains: a draft token costs what it adds to the step.
        self.forward = ForwardCost()
        self.rows: list[Sequence] = []  # in the cache's row order
        self._joining: list[Sequence] = []
        self._alone: list[CachedModel] = []  # per row, without a batch cache
        self._prefetch = MaskPrefetch()

    def __len__(self) -> int:
        """Rows decoding or about to join."""
        return len(self.rows) + len(self._joining)

    def add(self, sequence: Sequence) -> None:
        """Queue ``sequence`` to join at the next step."""
        chain = sequence.decoding.chain
        if chain is not None:
            chain.forward = self.forward
        self._joining.append(sequence)

    def cancel(self, sequence: Sequence) -> None:
        """Stop decoding ``sequence`` now: it leaves the batch, its result holding what was
        decoded so far."""
        if sequence in self._joining:
            self._joining.remove(sequence)
        elif sequence in self.rows:
            index = self.rows.index(sequence)
            self._leave([index])
        else:
            return
        _finish(sequence)

    def step(self) -> list[tuple[Sequence, str]]:
        """One round for every row; returns the text pieces decoded, in row order. Rows that
        finished have their ``result`` (or ``error``) set, their last piece among the events,
        and have left the batch."""
        events: list[tuple[Sequence, str]] = []
        self._join(events)
        if not self.rows:
            return events
        drafts = [row.decoding.draft() for row in self.rows]
        feeds = [self._feed(index, draft) for index, draft in enumerate(drafts)]
        lengths = [len(row.decoding.sequence) for row in self.rows]
        self._prefetch.start((draft.end, len(draft.line)) for draft in drafts)
        start = time.perf_counter()
        logits = self._forward(feeds, drafts)
        seconds = time.perf_counter() - start
        self._prefetch.wait()
        waited = time.perf_counter() - start - seconds
        fed = sum(len(tokens) for tokens, _, _ in feeds)
        self.forward.add(fed / len(self.rows), seconds / len(self.rows))  # per row: one row's share
        done = []
        for index, (row, draft, feed, rows) in enumerate(zip(self.rows, drafts, feeds, logits, strict=True)):
            row.decoding.stats.seconds["target"] += seconds
            row.decoding.stats.seconds["mask"] += waited
            path, committed = row.decoding.commit(rows, draft)
            if self.cache is not None:
                pending = len(feed[0]) - len(draft.tokens)
                self.cache.keep(index, list(range(pending)) + [pending + node for node in path])
            else:
                self._alone[index].keep(lengths[index], path)
            piece = row.add(committed)
            if piece:
                events.append((row, piece))
            if row.decoding.done:
                done.append(index)
        finished = [self.rows[index] for index in done]
        self._leave(done)
        for row in finished:
            tail = _finish(row)
            if tail:
                events.append((row, tail))
        return events

    def _join(self, events: list[tuple[Sequence, str]]) -> None:
        """Let the joining rows in. With the batch cache a row starts out holding the longest
        prefix of its prompt that a row holds, and the rest of its prompt is fed with its first
        round; a row sharing at least :data:`WAIT_FOR_PREFIX` more of its prompt with a row
        joining now waits a step, to see those tokens once that row holds them rather than feed
        them twice."""
        joining, self._joining = self._joining, []
        ready: list[Sequence] = []
        for sequence in joining:
            if sequence.decoding.done:
                tail = _finish(sequence)  # nothing to generate (a grammar of the empty text)
                if tail:
                    events.append((sequence, tail))
            elif self.cache is not None and self._waits(sequence.decoding.sequence[:-1], ready):
                self._joining.append(sequence)
            else:
                ready.append(sequence)
        if self.cache is not None:
            self.cache.add([sequence.decoding.sequence[:-1] for sequence in ready])
        else:
            self._alone += [CachedModel(self.model, self.width) for _ in ready]
        self.rows += ready

    def _waits(self, prompt: list[int], ready: list[Sequence]) -> bool:
        """Whether ``prompt`` shares at least :data:`WAIT_FOR_PREFIX` more tokens with a row of
        ``ready`` than with the rows in the cache."""
        held, _ = self.cache.held(prompt)
        return any(common_prefix(row.decoding.sequence, prompt, len(prompt)) >= held + WAIT_FOR_PREFIX for row in ready)

    def _feed(self, index: int, draft: Draft) -> Feed:
        """Row ``index``'s tokens not yet cached (the last committed one), then its draft tree."""
        sequence = self.rows[index].decoding.sequence
        pending = sequence[len(self.cache.tokens[index]) :] if self.cache is not None else sequence[-1:]
        parents = list(range(-1, len(pending) - 1))
        parents += [len(pending) - 1 if parent < 0 else len(pending) + parent for parent in draft.parents]
        return pending + draft.tokens, parents, len(draft.tokens) + 1

    def _forward(self, feeds: list[Feed], drafts: list[Draft]) -> list[LogitRows]:
        """Every row's logits: one forward over the batch cache, or without one a forward per row."""
        if self.cache is not None:
            return self.cache.logits(feeds)
        return [
            target.tree_logits(row.decoding.sequence, draft.tokens, draft.parents)
            for target, row, draft in zip(self._alone, self.rows, drafts, strict=True)
        ]

    def _leave(self, indices: list[int]) -> None:
        """Drop rows (indices into :attr:`rows`) from the batch and its cache."""
        gone = set(indices)
        kept = [i for i in range(len(self.rows)) if i not in gone]
        self.rows = [self.rows[i] for i in kept]
        if self.cache is not None:
            self.cache.retain(kept)
        else:
            self._alone = [self._alone[i] for i in kept]


def _finish(sequence: Sequence) -> str:
    """Finish a row; an exception (a Pydantic output that does not validate) goes to its ``error``."""
    try:
        return sequence.finish()
    except Exception as exc:  # the row's own failure: the batch goes on
        sequence.error = exc
        return ""
