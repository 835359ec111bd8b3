"""Grammar constraints for people who call transformers' ``model.generate`` themselves.

``GrammarLogitsProcessor`` holds no per-step state that a call advances: each call reads the
grammar state of every row from that row's tokens after the prompt, looked up in a cache of
matchers keyed by the generated prefix. So it stays right when transformers' assisted
generation calls it for the assistant's drafts and then for every target position -- with
prefixes that grow, shrink after a rejection, or branch.

Each call masks the whole batch with one bitmask moved to the logits' device and applied in
one operation. It then guesses each row's next token (the masked argmax: exact under greedy
decoding) and computes the masks after it in a worker thread while the model runs the next
forward; the next call waits for that work, so a wrong guess costs nothing but the guess.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from structspec.errors import GrammarError
from structspec.masks.compiled import CompiledGrammar
from structspec.masks.matcher import Matcher


class GrammarLogitsProcessor:
    """A transformers logits processor that masks every token the grammar forbids.

    ``compiled`` must be compiled for the model's vocabulary (``structspec.compile(grammar,
    Vocabulary.from_tokenizer(tokenizer, vocab_size=<logits width>))``). ``prompt_length`` is
    the (padded) prompt width; by default it is taken from the first call, and a later call
    whose rows do not start with that prompt starts over (a new ``generate`` call). Rows whose
    tokens leave the grammar or already ended it (a finished row's padding, or a rejected
    prompt-lookup candidate whose logits are discarded anyway) are passed through unchanged.

    Example::

        processor = GrammarLogitsProcessor(structspec.compile(grammar, vocabulary))
        model.generate(**inputs, logits_processor=LogitsProcessorList([processor]))
    """

    def __init__(self, compiled: CompiledGrammar, prompt_length: int | None = None) -> None:
        if not isinstance(compiled, CompiledGrammar):
            raise TypeError(f"GrammarLogitsProcessor takes a CompiledGrammar (structspec.compile), got {compiled!r}")
        self.compiled = compiled
        self._fixed_length = prompt_length
        self._prompt: torch.Tensor | None = None
        self._matchers: dict[tuple[int, ...], Matcher | None] = {}
        self._pending: Future | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Mask ``scores`` (``[batch, vocab]``) for the rows of ``input_ids`` (``[batch, length]``)."""
        if self._pending is not None:
            self._pending.result()  # the masks guessed last time are cached now
            self._pending = None
        start = self._prompt_length(input_ids)
        suffixes = [tuple(ids) for ids in input_ids[:, start:].tolist()]
        matchers = [self._matcher(suffix) for suffix in suffixes]
        width = scores.shape[-1]
        n_words = self.compiled.n_words
        bitmask = np.full((len(matchers), max(n_words, -(-width // 32))), -1, dtype=np.int32)  # -1: untouched row
        constrained = []
        for row, matcher in enumerate(matchers):
            if matcher is None:
                continue
            words = matcher.mask_words()
            if words.any():  # nothing allowed: ended with end-of-sequence, the row is left alone
                bitmask[row, :n_words] = words.view(np.int32)
                bitmask[row, n_words:] = 0  # padded logits past the vocabulary
                constrained.append(row)
        if constrained:
            apply_bitmask(scores, torch.from_numpy(bitmask))
            self._guess_next(scores, constrained, suffixes, matchers)
        return scores

    def _guess_next(self, scores: torch.Tensor, rows: list[int], suffixes: list[tuple[int, ...]],
                    matchers: list[Matcher | None]) -> None:
        """Advance each constrained row by its masked argmax and compute the masks there in the
        background (the matchers are cached in this thread; only masks not cached yet are
        computed there: handing over cache hits only costs thread wake-ups)."""
        guesses = scores[rows].argmax(dim=-1).tolist()
        states = []
        for row, token in zip(rows, guesses, strict=True):
            key = (*suffixes[row], token)
            if key not in self._matchers:
                following = matchers[row].copy()
                self._matchers[key] = following if following.accept_token(token) else None
            guessed = self._matchers[key]
            if guessed is not None and not guessed.is_finished() and (
                    guessed.compiled.known_mask_words(guessed.state) is None):  # only work not done yet leaves
                states.append(guessed)
        if states:
            self._pending = _worker().submit(_fill_masks, states)

    def _prompt_length(self, input_ids: torch.Tensor) -> int:
        if self._fixed_length is not None:
            if input_ids.shape[1] < self._fixed_length:
                raise ValueError(f"input_ids hold {input_ids.shape[1]} tokens, fewer than prompt_length "
                                 f"{self._fixed_length}")
            return self._fixed_length
        if not self._continues(input_ids):
            self._prompt = input_ids.detach().cpu().clone()
            self._matchers = {(): self.compiled.matcher()}
        return self._prompt.shape[1]

    def _continues(self, input_ids: torch.Tensor) -> bool:
        """Whether every row starts with the remembered prompt (same generation)."""
        prompt = self._prompt
        if prompt is None or input_ids.shape[0] != prompt.shape[0] or input_ids.shape[1] < prompt.shape[1]:
            return False
        return torch.equal(input_ids[:, : prompt.shape[1]].cpu(), prompt)

    def _matcher(self, suffix: tuple[int, ...]) -> Matcher | None:
        """The matcher after ``suffix`` (``None`` when the grammar rejects it), cached per prefix."""
        cache = self._matchers
        if not cache:
            cache[()] = self.compiled.matcher()
        known = len(suffix)
        while suffix[:known] not in cache:
            known -= 1
        matcher = cache[suffix[:known]]
        for end in range(known + 1, len(suffix) + 1):
            if matcher is not None:
                matcher = matcher.copy()
                if not matcher.accept_token(suffix[end - 1]):
                    matcher = None
            cache[suffix[:end]] = matcher
        return matcher


def apply_bitmask(scores: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set ``scores[i, j]`` to -inf where bit ``j % 32`` of ``bitmask[i, j // 32]`` is clear:
    the packed rows (int32 ``[batch, >= ceil(width / 32)]``, on any device) go to the
    logits' device in one copy and mask every row at once."""
    bits = bitmask.to(scores.device, non_blocking=True)
    shifts = torch.arange(32, device=scores.device, dtype=torch.int32)
    allowed = ((bits.unsqueeze(-1) >> shifts) & 1).view(bits.shape[0], -1)[:, : scores.shape[-1]]
    scores.masked_fill_(allowed == 0, float("-inf"))


_WORKER: list[ThreadPoolExecutor] = []  # one thread shared by every processor, started on first use
_WORKER_LOCK = threading.Lock()


def _worker() -> ThreadPoolExecutor:
    with _WORKER_LOCK:
        if not _WORKER:
            _WORKER.append(ThreadPoolExecutor(1, thread_name_prefix="structspec-masks"))
        return _WORKER[0]


def _fill_masks(matchers: list[Matcher]) -> None:
    """Compute (and so cache) each matcher's mask; errors are left for the next call to raise."""
    for matcher in matchers:
        try:
            matcher.mask_words()
        except GrammarError:
            continue
