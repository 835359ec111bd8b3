"""A transformers logits processor driven by any peer matcher, for peers whose own
transformers integration does not run here (lm-format-enforcer 0.11 and transformers-cfg 0.2
do not import or fail under transformers 5; outlines-core ships none).

Each `model.generate` step: the tokens generated since the last call are accepted into the
peer's matcher, its mask is computed as the peer computes it, and the forbidden logits are set
to -inf. Batch size 1, greedy or sampled; one processor per generation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .base import PeerGrammar


class PeerLogitsProcessor:
    """Masks ``model.generate``'s scores with a fresh matcher of ``grammar``."""

    def __init__(self, grammar: PeerGrammar) -> None:
        self._matcher = grammar.matcher()
        self._prompt_length: int | None = None
        self._consumed = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != 1:
            raise ValueError("PeerLogitsProcessor handles one sequence at a time")
        if self._prompt_length is None:
            self._prompt_length = input_ids.shape[1]
        for token in input_ids[0, self._prompt_length + self._consumed :].tolist():
            if not self._matcher.accept_token(token):
                raise RuntimeError(f"the peer rejected token {token} its own mask allowed")
            self._consumed += 1
        self._matcher.compute_mask()
        allowed = torch.from_numpy(np.asarray(self._matcher.allowed_token_ids(), dtype=np.int64))
        allowed = allowed[allowed < scores.shape[-1]]
        masked = torch.full_like(scores, float("-inf"))
        masked[:, allowed] = scores[:, allowed]
        return masked


def peer_processor_factory(peer: Any) -> Any:
    """``make_processor(schema)`` for ``peer``: compiles the schema (cached per schema text, as
    a server would) and returns a fresh processor."""
    import json

    cache: dict[str, PeerGrammar] = {}

    def make(schema: dict) -> PeerLogitsProcessor:
        key = json.dumps(schema, sort_keys=True)
        if key not in cache:
            cache[key] = peer.compile_json_schema(schema)
        return PeerLogitsProcessor(cache[key])

    return make
