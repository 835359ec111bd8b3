"""A literal prints as the per-character escapes spell it, whichever shortcut the printer takes
(plain printable ASCII; printable ASCII with quotes and backslashes, as JSON keys are)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from structspec.ir.expr import Lit
from structspec.ir.printer import _escape, format_expr

_PIECES = st.sampled_from(['"', "\\", "a", " ", "~", "\x7f", "\n", "\x01", "é", "\u2028"])


@settings(max_examples=500, deadline=None)
@given(st.text(_PIECES, min_size=1, max_size=8), st.booleans())
def test_literal_spelling(text: str, ascii_only: bool) -> None:
    expected = '"' + "".join(_escape(c, '"', ascii_only) for c in text) + '"'
    assert format_expr(Lit(text), ascii_only=ascii_only) == expected
