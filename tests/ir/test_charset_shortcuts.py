"""Character sets built on the shortcuts (one character; the classes of Python's ``re``) are
the ones the general construction gives."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.ir.charset import SURROGATES, CharSet, python_class


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", "\U0010ffff"])))
def test_one_character_set(c: str) -> None:
    assert CharSet.chars(c) == CharSet.of([(ord(c), ord(c))])


def test_python_classes_match_re_on_every_scalar() -> None:
    """The classes of ``\\d \\w \\s`` as Python's ``re`` reads them, against the string of every
    scalar value built one character at a time."""
    scalars = "".join(map(chr, range(SURROGATES[0]))) + "".join(map(chr, range(SURROGATES[1] + 1, 0x110000)))
    for escape in "dws":
        found = CharSet.of((ord(m.group()[0]), ord(m.group()[-1])) for m in re.finditer(f"\\{escape}+", scalars))
        assert python_class(escape) == found
