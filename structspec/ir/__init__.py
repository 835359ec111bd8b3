"""The shared intermediate form of every converter: character sets, expressions and DFAs.

Its one job is the algebra the JSON Schema and regex converters build grammars with: sets of
code points (``charset``), expressions over them with their GBNF printer (``expr``), and
deterministic automata with intersection, complement and minimization, emitted back as
expressions (``automaton``). For grounded strings: the suffix automaton of a source text
(``suffix``, built in C by ``_suffix.pyx``), its spans narrowed and spelled in bytes
(``spans``), and byte automata given to the grammar compiler as move lists (``byte_automaton``).

May import: ``structspec.errors`` only.
"""
