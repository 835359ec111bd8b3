"""The shared intermediate form of every converter: character sets, expressions and DFAs.

Its one job is the algebra the JSON Schema and regex converters build grammars with: sets of
code points (``charset``), expressions over them with their GBNF printer (``expr``), and
deterministic automata with intersection, complement and minimization, emitted back as
expressions (``automaton``).

May import: ``structspec.errors`` only.
"""
