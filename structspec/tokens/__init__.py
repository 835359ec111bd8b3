"""Vocabularies: what each token of a tokenizer spells, and the trie the masks sweep.

Its one job is tokens as byte strings: reading a tokenizer's files (``reader``), the immutable
:class:`~structspec.tokens.vocabulary.Vocabulary` with its flat arrays (``arrays``) and text
encoder (``encoder``), and the sorted token trie of a vocabulary (``trie``).

May import: ``structspec.errors`` only. It knows nothing of grammars.
"""
