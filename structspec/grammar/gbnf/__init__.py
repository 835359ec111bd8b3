"""The GBNF front end: text to a rule table, its analysis, diagnostics and printing.

Its one job is the language of the grammar files: the syntax tree (``ast``), the parser with
line:column diagnostics (``parser``, ``diagnostics``), the checks every grammar must pass
(``analysis``) and the canonical printer (``printer``).

May import: ``structspec.errors`` only; the rest of ``structspec.grammar`` builds on it.
"""
