"""Parse states: persistence, byte-level UTF-8, forced bytes, pathological grammars."""

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structspec import Grammar, StackLimitError
from structspec.grammar.parse_state import Frame

NESTED = 'root ::= v\nv ::= "[" (v ("," v)*)? "]" | [0-9]+'


def test_old_states_never_change():
    grammar = Grammar.from_gbnf(NESTED)
    states = [grammar.initial_state()]
    for ch in "[[1,[2]],[]]":
        states.append(states[-1].advance(ch))
    snapshot = [(s.allowed_bytes(), s.is_accepting(), len(s)) for s in states]
    # Advance every kept state again in other directions; none of them may change.
    for s in states:
        for b in b"[]0,":
            s.advance(bytes([b]))
    assert [(s.allowed_bytes(), s.is_accepting(), len(s)) for s in states] == snapshot
    assert states[-1].is_accepting()


def test_advancing_shares_stack_tails():
    grammar = Grammar.from_gbnf(NESTED)
    state = grammar.initial_state().advance("[" * 200)
    after = state.advance("[")
    # The new state's stacks reuse the old frames below their new tops: no stack is copied.
    old_frames = {id(f) for h in state.heads for f in _frames(h)}
    for head in after.heads:
        assert head.depth > 150
        assert id(head.parent) in old_frames or id(head.parent.parent) in old_frames


def _frames(frame: Frame):
    while frame is not None:
        yield frame
        frame = frame.parent


@given(st.lists(st.sampled_from(["[", "]", ",", "1", "2"]), max_size=30), st.integers(0, 30))
@settings(max_examples=200, deadline=None)
def test_advance_is_compositional(chars, cut):
    grammar = Grammar.from_gbnf(NESTED)
    text = "".join(chars).encode()
    cut = min(cut, len(text))
    whole = grammar.initial_state().advance(text)
    first = grammar.initial_state().advance(text[:cut])
    split = first.advance(text[cut:]) if first is not None else None
    assert (whole is None) == (split is None)
    if whole is not None:
        assert whole == split
        assert whole.allowed_bytes() == split.allowed_bytes()


@pytest.mark.parametrize("text", ["é", "日本語", "😀x", "aé😀日"])
def test_utf8_split_at_every_offset(text):
    grammar = Grammar.from_gbnf("root ::= [^\\x00-\\x1F]*")
    data = text.encode()
    for cut in range(len(data) + 1):
        state = grammar.initial_state().advance(data[:cut])
        assert state is not None
        assert state.is_accepting() == _is_char_boundary(data, cut)
        assert state.advance(data[cut:]).is_accepting()


def _is_char_boundary(data: bytes, cut: int) -> bool:
    try:
        data[:cut].decode()
        return True
    except UnicodeDecodeError:
        return False


@pytest.mark.parametrize(
    "data",
    [b"\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff", b"\xc3", b"a\xc3a"],
)
def test_invalid_utf8_rejected(data):
    grammar = Grammar.from_gbnf("root ::= .*")
    assert not grammar.matches(data)


def test_any_char_accepts_every_scalar_value_sample():
    grammar = Grammar.from_gbnf("root ::= .")
    for cp in [0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF]:
        assert grammar.matches(chr(cp))


def test_allowed_bytes_of_class():
    state = Grammar.from_gbnf("root ::= [a-c] | [é]").initial_state()
    assert state.allowed_bytes() == frozenset(b"abc\xc3")
    assert state.advance(b"\xc3").allowed_bytes() == frozenset({0xA9})


def test_forced_bytes():
    grammar = Grammar.from_gbnf('root ::= "{\\"name\\": " ("\\"x\\"" | "1") "}"')
    state = grammar.initial_state()
    assert state.forced_bytes() == b'{"name": '
    assert state.advance('{"name": "').forced_bytes() == b'x"}'
    assert state.advance('{"name": 1}').forced_bytes() == b""  # accepting: stopping is allowed


@given(st.text(alphabet="ab{}\":, 1", max_size=12))
@settings(max_examples=150, deadline=None)
def test_forced_bytes_prefix_every_accepted_continuation(prefix):
    grammar = Grammar.from_gbnf('root ::= "{" ("\\"a\\":" v)? "}"\nv ::= "1" | "{" ("\\"b\\":" v)? "}"')
    state = grammar.initial_state().advance(prefix)
    if state is None:
        return
    forced = state.forced_bytes()
    for rest in ['}', '"a":1}', '"a":{}}', '"a":{"b":1}}', ':1}', "1}", "}}", '"b":1}}', '{}}', '{"b":{}}}']:
        if grammar.matches(prefix + rest):
            assert rest.encode().startswith(forced)


@pytest.mark.parametrize(
    ("src", "text", "max_stacks"),
    [
        ('root ::= "x"{0,2000}', "x" * 2000, 1),
        ('root ::= ("a"? "a"? "a"? "a"? "a"?)*', "a" * 300, 1),
        ('root ::= x\nx ::= "[" x? "]"', "[" * 3000 + "]" * 3000, 2),
        ('root ::= a | b | c\na ::= [a-z]+ "1"\nb ::= [a-z]+ "2"\nc ::= ([a-z] | "q")+', "q" * 500, 1),
        ('root ::= (x | y)*\nx ::= "ab" | "a"\ny ::= "ba" | "b" | x x', "ab" * 300, 1),
    ],
)
def test_pathological_grammars_stay_bounded(src, text, max_stacks):
    grammar = Grammar.from_gbnf(src)
    state = grammar.initial_state()
    peak = len(state)
    for b in text.encode():
        state = state.advance(bytes([b]))
        peak = max(peak, len(state))
    assert state.is_accepting()
    assert peak <= max_stacks


def test_stack_limit_is_a_clear_error(monkeypatch):
    import structspec.grammar.parse_state as ps

    monkeypatch.setattr(ps, "MAX_STACKS", 50)
    grammar = Grammar.from_gbnf('root ::= s\ns ::= "a" s | "a" s "b" | ""')
    with pytest.raises(StackLimitError) as info:
        grammar.initial_state().advance("a" * 100)
    assert info.value.code == "E110" and "50" in str(info.value)


def test_deep_nesting_has_flat_state_cost():
    grammar = Grammar.from_gbnf(NESTED)
    deep = grammar.initial_state().advance("[" * 5000)
    assert len(deep) <= 2
    assert deep.advance("1" + "]" * 5000).is_accepting()


def _forced_by_allowed_bytes(state) -> bytes:
    """forced_bytes spelled out with allowed_bytes (the oracle for the per-row table)."""
    out = bytearray()
    while state is not None and len(out) < 256 and not state.accepting:
        if any(state.rules.token_edges[h.state] for h in state.heads):
            break
        allowed = state.allowed_bytes()
        if len(allowed) != 1:
            break
        (b,) = allowed
        out.append(b)
        state = state.advance_byte(b)
    return bytes(out)


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "grammars").glob("*.gbnf")),
                         ids=lambda p: p.stem)
def test_forced_bytes_match_allowed_bytes_on_random_walks(path):
    grammar = Grammar.from_gbnf(path.read_text(encoding="utf-8"))
    rng = random.Random(path.stem)
    for _ in range(20):
        state = grammar.initial_state()
        for _ in range(40):
            assert state.forced_bytes() == _forced_by_allowed_bytes(state)
            allowed = sorted(state.allowed_bytes())
            if not allowed:
                break
            state = state.advance_byte(rng.choice(allowed))
