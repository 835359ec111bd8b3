"""What a draft source proposes each time the draft chain asks it."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

BRANCH_KINDS = ("end", "alternative")


@dataclass(frozen=True)
class Branch:
    """Deterministic draft tokens to try instead of a proposal's ``tokens[fork:]``: the end of
    a copied value (``kind`` ``"end"``) or another continuation the text has (``"alternative"``)."""

    fork: int
    tokens: list[int]
    kind: str


@dataclass
class Proposal:
    """What a source adds to the draft: ``tokens`` in a row (the matcher advanced along them),
    each drafted from ``qs[i]`` (``None``: deterministically), and ``branches`` beside them."""

    tokens: list[int] = field(default_factory=list)
    qs: list[torch.Tensor | None] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)
