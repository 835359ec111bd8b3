"""Constraints plugged into other engines' decoding loops.

Its one job is adapting a compiled grammar to someone else's loop: today transformers'
``model.generate`` (``transformers``: a logits processor that also serves assisted generation).

May import: ``structspec.masks`` and everything below it; never ``structspec.generation``,
the server or the CLI.
"""
