"""A causal LM with its KV cache: feed only what the cache lacks, crop on divergence."""

from __future__ import annotations

import inspect

import torch


def logits_width(model: torch.nn.Module) -> int:
    """The number of logits a model emits per position."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(config.vocab_size)


class CachedModel:
    """One sequence's view of a model: the cache holds a token prefix; :meth:`logits` crops the
    cache back to where it agrees with the asked sequence and feeds the rest, so a prompt is
    encoded once and rejected draft tokens are dropped."""

    def __init__(self, model: torch.nn.Module, width: int) -> None:
        from transformers import DynamicCache

        self.model = model
        self.width = width
        self.cache = DynamicCache(config=model.config)
        self.tokens: list[int] = []
        self._device = next(model.parameters()).device
        self._keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters

    def logits(self, sequence: list[int], n_out: int) -> torch.Tensor:
        """Float32 CPU logits ``[n_out, width]`` predicting the token after each of the last
        ``n_out`` positions of ``sequence`` (padded with -inf or trimmed to ``width``). They come
        to the CPU because masks, sampling and the seeded generator live there."""
        if not 1 <= n_out <= len(sequence):
            raise ValueError(f"n_out must lie in [1, {len(sequence)}], got {n_out}")
        keep = common_prefix(self.tokens, sequence, len(sequence) - n_out)
        if keep < len(self.tokens):
            self.cache.crop(keep - len(self.tokens))
            del self.tokens[keep:]
        feed = sequence[keep:]
        kwargs = {"logits_to_keep": n_out} if self._keep_arg else {}
        with torch.no_grad():
            out = self.model(
                input_ids=torch.tensor([feed], device=self._device),
                past_key_values=self.cache,
                use_cache=True,
                **kwargs,
            )
        self.tokens.extend(feed)
        logits = out.logits[0, -n_out:].float().cpu()
        have = logits.shape[-1]
        if have > self.width:
            return logits[:, : self.width]
        if have < self.width:
            pad = logits.new_full((n_out, self.width - have), float("-inf"))
            return torch.cat([logits, pad], dim=-1)
        return logits


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """How many leading items ``a`` and ``b`` share, at most ``limit``."""
    n = min(len(a), len(b), limit)
    if a[:n] == b[:n]:  # the usual case, compared in C
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
