"""Temperature, top-k and top-p over masked logits -- one definition for every decoding path."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters; ``temperature == 0`` is greedy (argmax of the masked logits)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        """Whether decoding picks the argmax."""
        return self.temperature == 0.0

    def probs(self, masked_logits: torch.Tensor) -> torch.Tensor:
        """Float32 probabilities from masked logits ``[..., vocab]``: temperature, then top-k,
        then top-p, then softmax. Greedy gives a one-hot at the argmax."""
        logits = masked_logits.float()
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        logits = logits / self.temperature
        if self.top_k and self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            ordered, order = torch.sort(logits, dim=-1, descending=True)
            p = ordered.softmax(-1)
            before = p.cumsum(-1) - p  # mass strictly ahead of each token
            drop = before >= self.top_p
            logits = logits.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf"))
        return logits.softmax(-1)

    def pick(self, masked_logits: torch.Tensor, rng: torch.Generator) -> int:
        """One token from a masked logits row."""
        if self.greedy:
            return int(masked_logits.argmax())
        return int(torch.multinomial(self.probs(masked_logits), 1, generator=rng))
