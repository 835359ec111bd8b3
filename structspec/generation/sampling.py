"""How to sample: the one options object of a generation, its checks, and temperature, top-k and
top-p over masked logits.

:class:`Sampling` is what ``structspec generate`` / ``extract`` build from their flags, what the
server builds from a request, and what the decoding loop reads; :func:`check` holds the only
range checks, so every front end refuses a bad value with the same message. Importing this
module does not import torch (only the methods that make tensors do).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from structspec.errors import StructspecError

if TYPE_CHECKING:  # names for annotations only: torch is imported where a tensor is made
    import torch

MAX_TEMPERATURE = 2.0
"""Highest temperature accepted (OpenAI's bound; sampling is near uniform over the allowed tokens by then)."""

_FLOAT32_TINY = 2.0**-126
"""float32's smallest normal number: a smaller temperature would round to 0 against float32 logits."""

MAX_SEED = 2**64 - 1
"""Highest seed: torch's generators take 64 bits, so every seed in ``0..MAX_SEED`` gives its own stream."""


class OptionError(StructspecError, ValueError):
    """A sampling option (or a server limit, :class:`structspec.server.limits.Limits`) out of range.

    Attributes:
        field: the option's name in :class:`Sampling` or ``Limits`` (front ends report it under
            their own name: ``--max-tokens``, ``max_tokens``, ...).
        problem: what is wrong, without the name (``must be at least 1, got 0``).
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class Sampling:
    """The options of one generation, checked when made (:class:`OptionError` names the option).

    Attributes:
        temperature: in ``[0, 2]``; 0 is greedy (the argmax of the masked logits).
        top_k: keep the ``top_k`` best-scored tokens; 0 keeps all.
        top_p: keep the fewest best tokens whose probability reaches ``top_p``, in ``(0, 1]``.
        seed: in ``0..2**64-1`` for a reproducible sample; ``None`` draws a fresh one.
        max_new_tokens: most tokens to generate, at least 1.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    max_new_tokens: int = 256

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            check(name, value)

    @property
    def greedy(self) -> bool:
        """Whether decoding picks the argmax."""
        return self.temperature == 0.0

    def probs(self, masked_logits: torch.Tensor) -> torch.Tensor:
        """Float32 probabilities from masked logits ``[..., vocab]``: temperature, then top-k,
        then top-p, then softmax. Greedy gives a one-hot at the argmax.

        The best logit is subtracted before dividing, and the divisor is at least float32's
        smallest normal number, so that a tiny temperature tends to greedy (uniform over the
        best tokens) instead of overflowing, or dividing by a zero, into NaN."""
        import torch

        logits = masked_logits.float()
        if self.greedy:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
        logits = (logits - logits.amax(-1, keepdim=True)) / max(self.temperature, _FLOAT32_TINY)
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
        import torch

        if self.greedy:
            return int(masked_logits.argmax())
        return int(torch.multinomial(self.probs(masked_logits), 1, generator=rng))

    def rng(self) -> torch.Generator:
        """A random generator seeded with :attr:`seed` (a fresh seed when ``None``), apart from
        torch's global one."""
        import torch

        rng = torch.Generator()
        if self.seed is None:
            rng.seed()
        else:
            rng.manual_seed(self.seed)
        return rng


def check(name: str, value: Any) -> None:
    """Raise :class:`OptionError` unless ``value`` is a valid value of option ``name``."""
    if name == "temperature":
        _number(name, value, f"a finite number in [0, {MAX_TEMPERATURE:g}]", lambda v: 0.0 <= v <= MAX_TEMPERATURE)
    elif name == "top_p":
        _number(name, value, "a finite number in (0, 1]", lambda v: 0.0 < v <= 1.0)
    elif name == "top_k":
        _integer(name, value, "at least 0 (0 keeps every token)", lambda v: v >= 0)
    elif name == "seed":
        if value is not None:
            _integer(name, value, f"in 0..{MAX_SEED} (64 bits)", lambda v: 0 <= v <= MAX_SEED)
    elif name == "max_new_tokens":
        _integer(name, value, "at least 1", lambda v: v >= 1)
    else:
        raise OptionError(name, "is not a sampling option")


def _number(name: str, value: Any, wanted: str, in_range: Callable[[float], bool]) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionError(name, f"must be a number, got {value!r}")
    if not math.isfinite(value) or not in_range(value):
        raise OptionError(name, f"must be {wanted}, got {value!r}")


def _integer(name: str, value: Any, wanted: str, in_range: Callable[[int], bool]) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(name, f"must be an integer, got {value!r}")
    if not in_range(value):
        raise OptionError(name, f"must be {wanted}, got {value}")
