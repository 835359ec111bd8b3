"""A forward's rows of logits as verification reads them.

Why rows stay on an accelerator: verification reads few of the rows a forward computes -- a
greedy walk over a draft stops at the first token the target disagrees with, and a token the
grammar allows at the target's unmasked argmax needs nothing but that argmax. Copying every row
to the CPU, as float32, cost ``rows x vocabulary x 4`` bytes a step (0.5 MB a row at Llama-3's
128k tokens): a batched server step of 32 rows with their draft trees moved hundreds of
megabytes, and that copy, not the forward, set the step's time on a GPU. So on an accelerator
the argmax of every row comes over in one small transfer (which also waits for the forward,
so the time of the forward measured around it is the device's), and a row comes over only
when something reads it: a forbidden argmax, sampling, the budget guard.
"""

from __future__ import annotations

import numpy as np
import torch

from structspec.masks.matcher import Matcher, numpy_view


class LogitRows:
    """Logits ``[n, width]`` predicting the token after each of ``n`` positions, padded with
    -inf or trimmed to ``width`` (the vocabulary's size). A row reads as a float32 CPU tensor,
    the same tensor on every read (so masking it in place sticks). Float32 CPU rows are read as
    they are; others (an accelerator's, or bfloat16) stay as computed until read, see the
    module docstring."""

    def __init__(self, logits: torch.Tensor, width: int) -> None:
        block = _fit(logits, width)
        if logits.device.type == "cpu" and logits.dtype == torch.float32:  # rows as they are
            self._hold(block, numpy_view(block), None)  # greedy rows read through numpy
        else:  # an accelerator's (or bfloat16) rows: their argmax in one op, a row when read
            self._hold(block, None, block.argmax(-1).cpu().numpy())

    def _hold(self, block: torch.Tensor, view: np.ndarray | None, best: np.ndarray | None) -> None:
        self._block, self._view, self._best = block, view, best
        self._read: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return self._block.shape[0]

    def __getitem__(self, index: int) -> torch.Tensor:
        """Row ``index`` as a float32 CPU tensor ``[width]``."""
        if self._best is None:
            return self._block[index]
        row = self._read.get(index)
        if row is None:
            row = self._read[index] = self._block[index].float().cpu()
        return row

    def argmax(self, index: int) -> int:
        """Row ``index``'s highest-scored token, the mask aside (the lowest id among ties, NaN
        first), without reading the row off an accelerator."""
        if self._best is not None:
            return int(self._best[index])
        return int(self._view[index].argmax()) if self._view is not None else int(self._block[index].argmax())

    def masked_argmax(self, index: int, matcher: Matcher, allowed: int | None = None) -> int:
        """The highest-scored token of row ``index`` that ``matcher`` allows (see
        :meth:`Matcher.masked_argmax`), without reading the row when its argmax is allowed;
        ``allowed``: a token known to be allowed (its mask is then not read for it). The row's
        argmax is taken once."""
        best = self.argmax(index)
        if best == allowed or matcher.allows(best):
            return best
        return matcher.masked_argmax(self._view[index] if self._view is not None else self[index], best)

    def greedy_path(self, matcher: Matcher, tokens: list[int], parents: list[int], line: list[int],
                    left: int | None) -> tuple[list[int], int | None] | None:
        """:meth:`Matcher.greedy_path` over these rows (a draft tree's verification in one
        native call), when they are float32 CPU rows; ``None`` (and nothing done) otherwise."""
        if self._view is None:
            return None
        return matcher.greedy_path(self._view, tokens, parents, line, left)

    def split(self, sizes: list[int]) -> list[LogitRows]:
        """Consecutive runs of ``sizes`` rows, each its own :class:`LogitRows` (a batch's rows,
        one run per sequence)."""
        parts, at = [], 0
        for size in sizes:
            part = object.__new__(LogitRows)
            end = at + size
            part._hold(self._block[at:end], None if self._view is None else self._view[at:end],
                       None if self._best is None else self._best[at:end])
            parts.append(part)
            at = end
        return parts

    def cpu(self) -> torch.Tensor:
        """Every row, float32 on the CPU ``[n, width]``."""
        return torch.stack([self[index] for index in range(len(self))]) if self._best is not None else self._block


def _fit(logits: torch.Tensor, width: int) -> torch.Tensor:
    """``logits`` ``[n, any]`` trimmed or padded with -inf to ``[n, width]``."""
    have, n = logits.shape[-1], logits.shape[0]
    if have > width:
        return logits[:, :width]
    if have < width:
        return torch.cat([logits, logits.new_full((n, width - have), float("-inf"))], dim=-1)
    return logits

