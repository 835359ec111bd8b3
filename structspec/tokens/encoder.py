"""A tokenizer's own encoding of text, taken as a continuation of what came before.

The encoder is a private view of the user's tokenizer: the same model (shared, not
copied, so building it is instant), the same normalizer and pre-tokenizer but with
prefix-space insertion turned off (mid-generation, SentencePiece's ``▁`` in front of
``Hello`` is not there), the same added tokens with special ones read as plain text, and
no padding, truncation or post-processing.
"""

from __future__ import annotations

import json
from itertools import groupby
from typing import Any


class TextEncoder:
    """Encodes text with a tokenizer's own model; callers check the result spells it."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._tokenizer = _continuation_view(backend)

    def encode(self, text: str) -> list[int]:
        """Token ids the tokenizer gives ``text`` when it continues earlier text."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def __getstate__(self) -> dict[str, Any]:
        return {"backend": self._backend}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["backend"])  # type: ignore[misc]


def _continuation_view(backend: Any) -> Any:
    view = _bare_view(backend)
    added = sorted(backend.get_added_tokens_decoder().items())
    # Added in id order, in runs of equal kind, so that they get their original ids.
    for special, run in groupby((token for _, token in added), key=lambda t: t.special):
        (view.add_special_tokens if special else view.add_tokens)(list(run))
    if any(view.token_to_id(token.content) != token_id for token_id, token in added):
        view = _bare_view(backend)  # ids came out differently: the model's pieces only
    view.encode_special_tokens = True
    return view


def _bare_view(backend: Any) -> Any:
    from tokenizers import Tokenizer, normalizers, pre_tokenizers

    view = Tokenizer(backend.model)
    view.normalizer = _rebuilt(backend.normalizer, normalizers.Sequence([]))
    view.pre_tokenizer = _rebuilt(backend.pre_tokenizer, pre_tokenizers.Sequence([]))
    return view


def _rebuilt(component: Any, blank: Any) -> Any:
    """``component`` with prefix-space insertion removed (``blank`` receives the change)."""
    if component is None:
        return None
    config = json.loads(component.__getstate__())
    changed = _without_prefix(config)
    if changed == config:
        return component
    if changed is None:
        return None
    blank.__setstate__(json.dumps(changed).encode("utf-8"))
    return blank


def _without_prefix(config: Any) -> Any:
    """A normalizer or pre-tokenizer configuration with prefix-space insertion removed."""
    if not isinstance(config, dict):
        return config
    kind = config.get("type")
    if kind == "Prepend":
        return None
    if kind == "Sequence":
        key = "normalizers" if "normalizers" in config else "pretokenizers"
        parts = (_without_prefix(part) for part in config.get(key, []))
        return {**config, key: [part for part in parts if part is not None]}
    if kind == "Metaspace":
        changed = {**config, "prepend_scheme": "never"}
        if "add_prefix_space" in config:
            changed["add_prefix_space"] = False
        return changed
    if kind == "ByteLevel" and config.get("add_prefix_space"):
        return {**config, "add_prefix_space": False}
    return config
