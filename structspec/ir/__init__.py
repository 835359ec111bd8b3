"""The shared form of every front end: character sets, the one expression tree and DFAs.

Its one job is the representation every grammar passes through and the algebra on it: sets of
code points (``charset``); the expression tree that the GBNF parser yields and the JSON Schema
and regex converters build (``expr``), with its one GBNF printer (``printer``); the NFA
and subset construction over code points (``nfa``); the grammar compiler's byte automata, built
and determinized in C (``_byte_automata.pyx``); and deterministic automata
over code points with intersection, complement and minimization, emitted back as expressions
(``automaton``). For grounded strings: the suffix automaton of a source text (``suffix``, built
in C by ``_suffix.pyx``), its spans narrowed and spelled in bytes (``spans``), and byte automata
given to the grammar compiler as move lists (``byte_automaton``).

May import: ``structspec.errors`` only.
"""
