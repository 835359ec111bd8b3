"""Token masks: a grammar compiled against a vocabulary, and matchers that walk it.

Its one job is which tokens may come next: the compiled grammar with its shared caches
(``compiled``), the native sweep of parse states over the token trie (``_sweep``, Cython, built
by ``pip install``; ``runner`` lays the grammar out for it) and the per-sequence
:class:`~structspec.masks.matcher.Matcher` (``matcher``, the only module that needs torch).

May import: ``structspec.grammar``, ``structspec.tokens``, ``structspec.ir`` (token references
are nodes of its expression tree) and ``structspec.errors``.
"""
