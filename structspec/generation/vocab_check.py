"""Making sure a draft model speaks the target's vocabulary."""

from __future__ import annotations

from typing import Any

from structspec.tokens.vocabulary import Vocabulary


def draft_vocabulary(target: Vocabulary, draft_tokenizer: Any, draft_width: int) -> None:
    """Raise ``ValueError`` unless every id means the same bytes to the draft and the target.

    ``draft_width`` is the draft model's logits width; ids only one side has must be control
    or padding ids (no bytes) on that side.
    """
    try:
        draft = Vocabulary.from_tokenizer(draft_tokenizer, vocab_size=draft_width)
    except ValueError as exc:
        raise ValueError(f"the draft model's logits width {draft_width} does not fit its tokenizer: {exc}") from None
    for token_id in range(max(target.size, draft.size)):
        ours = target.token_bytes[token_id] if token_id < target.size else None
        theirs = draft.token_bytes[token_id] if token_id < draft.size else None
        if ours != theirs:
            raise ValueError(
                "the draft model does not share the target's vocabulary: token id "
                f"{token_id} is {theirs!r} for the draft but {ours!r} for the target "
                f"(vocabulary sizes {draft.size} and {target.size})"
            )
