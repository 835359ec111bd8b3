"""Rewrites counted repetitions that transformers-cfg 0.2.7 expands wrongly.

Its parser reads `X{0,m}` as `X{1,m}`, `X{0,}` and `X{1,}` as a single `X`, and `X{n,}` for
n >= 2 as other wrong counts (`X{3,}` allows 1, 3, 5, ... copies). Bounded forms with n >= 1
are right.
Equivalent spellings it handles correctly are substituted before parsing:
`X{0,m}` -> `(X{1,m})?`, `X{,m}` -> `(X{1,m})?`, `X{0,}` -> `X*`, `X{n,}` -> `X{n} X*`.
`X{0}` (an empty repetition) has no such spelling and is refused.
"""

from __future__ import annotations

import re

_COUNT = re.compile(r"\{\s*(\d*)\s*(,?)\s*(\d*)\s*\}")
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class RepetitionError(ValueError):
    """A counted repetition with no spelling transformers-cfg parses correctly."""


def rewrite_counted_repeats(text: str) -> str:
    """GBNF `text` with every misparsed counted repetition spelled equivalently."""
    pieces: list[str] = []
    group_starts: list[int] = []
    atom: int | None = None  # index in `pieces` where the last complete atom starts
    i = 0
    while i < len(text):
        char = text[i]
        if char in '"[':
            end = _skip_delimited(text, i, '"' if char == '"' else "]")
            atom = len(pieces)
        elif char == "#":
            newline = text.find("\n", i)
            end = len(text) if newline < 0 else newline
        elif char == "(":
            group_starts.append(len(pieces))
            end, atom = i + 1, None
        elif char == ")" and group_starts:
            end, atom = i + 1, group_starts.pop()
        elif char == "{" and atom is not None and (match := _COUNT.match(text, i)):
            repeated = "".join(pieces[atom:])
            del pieces[atom:]
            pieces.append(_respell(repeated, match))
            i = match.end()
            continue
        elif name := _NAME.match(text, i):
            end, atom = name.end(), len(pieces)
        elif char == ".":
            end, atom = i + 1, len(pieces)
        else:
            end = i + 1
            if not char.isspace():
                atom = None
        pieces.append(text[i:end])
        i = end
    return "".join(pieces)


def _respell(atom: str, count: re.Match[str]) -> str:
    low_text, comma, high_text = count.groups()
    low = int(low_text or 0)
    high = int(high_text) if high_text else (None if comma else low)
    if high == 0:
        raise RepetitionError(f"empty repetition {count.group(0)} of {atom}")
    if high is None:
        return f"{atom}*" if low == 0 else f"{atom}{{{low}}} {atom}*"
    if low == 0:
        return f"({atom}{{1,{high}}})?"
    return f"{atom}{count.group(0)}"


def _skip_delimited(text: str, start: int, closing: str) -> int:
    """Index just past the literal or class opening at `start` (backslash escapes honoured)."""
    i = start + 1
    while i < len(text) and text[i] != closing:
        i += 2 if text[i] == "\\" else 1
    return min(i + 1, len(text))
