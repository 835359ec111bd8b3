"""Large ``maxProperties`` beside declared, dependent or counted properties: convert and compile
time, and the parse stacks a parser holds.

    python tools/bench_member_counts.py [--runs 3] [--members 2000]

For each schema (the shapes tools/fuzz.py found, whose member graphs once had a state per
count): the median over ``--runs`` of the conversion (``schema_to_gbnf``) and of the compile
(``Grammar.from_gbnf``), the number of rules, and the most parse stacks while matching an
object of ``--members`` members with the declared ones in the middle of undeclared ones (the
compact form of a count guesses where a shape changes; ``structspec.grammar.parse_state``).
A schema refused as too large shows its error code.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from structspec.errors import SchemaError
from structspec.grammar import Grammar, compiler
from structspec.jsonschema import schema_to_gbnf

SCHEMAS: list[tuple[dict[str, Any], dict[str, int]]] = [  # schema, declared members of the matched object
    ({"maxProperties": 48_175}, {}),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "maxProperties": 22_217}, {"a": 1}),
    ({"type": "object", "dependencies": {"a": ["b"]}, "maxProperties": 22_217}, {"a": 1, "b": 2}),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "minProperties": 2, "maxProperties": 22_217},
     {"a": 1, "b": 2}),
    ({"type": "object", "properties": {k: {} for k in "abc"}, "maxProperties": 600}, {"a": 1, "b": 2, "c": 3}),
    ({"type": "object", "properties": {k: {} for k in "abcd"}, "maxProperties": 22_217}, {}),
]


def _instance(count: int, declared: dict[str, int]) -> str:
    extra = [f'"k{i}":{i}' for i in range(count - len(declared))]
    middle = len(extra) // 2
    return "{" + ",".join(extra[:middle] + [f'"{k}":{v}' for k, v in declared.items()] + extra[middle:]) + "}"


def _most_stacks(grammar: Grammar, text: str) -> int:
    state, most = grammar.initial_state(), 0
    for char in text:
        state = state.advance(char)
        assert state is not None, "the object was refused"
        most = max(most, len(state))
    assert state.is_accepting(), "the object was refused"
    return most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--members", type=int, default=2_000)
    args = parser.parse_args()
    print(f"{'schema':<100} {'convert':>8} {'compile':>8} {'rules':>6} {'stacks':>6}")
    for schema, declared in SCHEMAS:
        label = str(schema)[:100]
        converts, compiles = [], []
        try:
            for _ in range(args.runs):
                start = time.perf_counter()
                text = schema_to_gbnf(schema)
                converts.append(time.perf_counter() - start)
                compiler._DFA_CACHE.clear()
                start = time.perf_counter()
                grammar = Grammar.from_gbnf(text)
                compiles.append(time.perf_counter() - start)
        except SchemaError as exc:
            print(f"{label:<100} refused: {exc.code}")
            continue
        count = min(args.members, schema["maxProperties"])
        stacks = _most_stacks(grammar, _instance(count, declared))
        print(f"{label:<100} {statistics.median(converts):>7.2f}s {statistics.median(compiles):>7.2f}s "
              f"{text.count('::='):>6} {stacks:>6}")


if __name__ == "__main__":
    main()
