"""The GBNF front end: text to a rule table, its analysis and diagnostics.

Its one job is the language of the grammar files: the parser with line:column diagnostics
(``parser``, ``diagnostics``) and the checks every grammar must pass (``analysis``). Rules are
written in the shared expression tree of :mod:`structspec.ir.expr` and printed back by
:mod:`structspec.ir.printer`.

May import: ``structspec.ir`` and ``structspec.errors``; the rest of ``structspec.grammar``
builds on it.
"""
