"""Regular expressions (the ECMAScript subset JSON Schema uses) to the shared form and to GBNF.

Its one job is the regex language: parsing a pattern (``parse``) and turning it into a whole
grammar or into the language of a JSON Schema ``pattern`` (``convert``).

May import: ``structspec.ir`` and ``structspec.errors``.
"""

from structspec.regex.convert import RegexError, regex_to_gbnf

__all__ = ["RegexError", "regex_to_gbnf"]
