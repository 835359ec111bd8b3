"""The transformers logits processor under its short, documented name.

Kept so ``structspec.hf.GrammarLogitsProcessor`` keeps working; the code lives in
:mod:`structspec.integrations.transformers`.
"""

from structspec.integrations.transformers import GrammarLogitsProcessor

__all__ = ["GrammarLogitsProcessor"]
