"""Settings of speculative decoding."""

from __future__ import annotations

from dataclasses import dataclass

SOURCES = ("forced", "ngram", "draft")


@dataclass(frozen=True)
class SpecConfig:
    """How drafts are made each round.

    Attributes:
        sources: drafters to chain, in order: ``"forced"`` (grammar-forced tokens), ``"ngram"``
            (continuations found in the prompt and output), ``"draft"`` (the draft model).
            ``None`` means every source available (``"draft"`` only with a draft model).
        max_draft: most draft tokens in a row verified by one target forward (branches beside
            that row are limited to the same depth, and priced by the forward's measured cost).
        max_per_source: most tokens the n-gram or the draft-model source adds per round (each
            also stops where one more token would lower the round's expected tokens per cost).
        ngram_max, ngram_min: longest and shortest suffix of the context's text looked up, in bytes.
        draft_cost: what one draft-model token costs, in target forwards. ``None`` measures it
            as generation runs (the parameter-count ratio of the two models until then); a
            fixed value such as 0 (a draft that runs alongside the target) makes the draft
            model draft as far as its acceptance alone warrants.
    """

    sources: tuple[str, ...] | None = None
    max_draft: int = 16
    max_per_source: int = 8
    ngram_max: int = 32
    ngram_min: int = 3
    draft_cost: float | None = None

    def __post_init__(self) -> None:
        if self.sources is not None:
            unknown = [s for s in self.sources if s not in SOURCES]
            if unknown or not self.sources:
                raise ValueError(f"SpecConfig.sources must be a non-empty subset of {SOURCES}, got {self.sources!r}")
        for name in ("max_draft", "max_per_source", "ngram_max", "ngram_min"):
            if getattr(self, name) < 1:
                raise ValueError(f"SpecConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.draft_cost is not None and not self.draft_cost >= 0.0:
            raise ValueError(f"SpecConfig.draft_cost must be None or at least 0, got {self.draft_cost}")
        if self.ngram_min > self.ngram_max:
            raise ValueError(f"SpecConfig.ngram_min ({self.ngram_min}) exceeds ngram_max ({self.ngram_max})")

    def resolved_sources(self, has_draft_model: bool) -> tuple[str, ...]:
        """The sources to use; raises when ``"draft"`` is asked for without a draft model."""
        if self.sources is None:
            return SOURCES if has_draft_model else SOURCES[:2]
        if "draft" in self.sources and not has_draft_model:
            raise ValueError("SpecConfig.sources includes 'draft' but the Generator has no draft_model")
        return self.sources
