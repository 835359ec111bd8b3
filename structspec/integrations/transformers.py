"""Grammar constraints for people who call transformers' ``model.generate`` themselves.

``GrammarLogitsProcessor`` holds no per-step state that a call advances: each call reads the
grammar state of every row from that row's tokens after the prompt, looked up in a cache of
matchers keyed by the generated prefix. So it stays right when transformers' assisted
generation calls it for the assistant's drafts and then for every target position -- with
prefixes that grow, shrink after a rejection, or branch.
"""

from __future__ import annotations

import torch

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

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Mask ``scores`` (``[batch, vocab]``) for the rows of ``input_ids`` (``[batch, length]``)."""
        start = self._prompt_length(input_ids)
        for row, ids in enumerate(input_ids[:, start:].tolist()):
            matcher = self._matcher(tuple(ids))
            if matcher is not None and matcher.mask_words().any():  # nothing allowed: ended with EOS
                matcher.apply_mask(scores[row])
        return scores

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
