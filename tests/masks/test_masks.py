"""Token masks are exact: every mask equals brute force (each token id tried on the state).

States are sampled by seeded random walks (each step takes an allowed token, often one that
ends inside a UTF-8 character) and by walking the tokens of the grammar library's sample
texts, over ``grammars/*.gbnf``, hand-written grammars (token references, nullable and
recursive rules, UTF-8 classes, ambiguity) and random grammars (hypothesis), for several real
tokenizers. Brute force over 128k ids takes about a second per state, so most checks use a
sub-vocabulary of a real tokenizer (every single-byte token, tokens made only of bytes
>= 0x80, tokens that split a UTF-8 character, the sample texts' tokens, random others, all
special tokens) and a few use whole vocabularies.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import REPO, assets_dir, tokenizer_dir
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import structspec
from structspec import CompiledGrammar, Grammar, GrammarError, Matcher, StackLimitError, Vocabulary

GRAMMARS = REPO / "grammars"
LIBRARY = sorted(GRAMMARS.glob("*.gbnf"))
TOKENIZERS = ("llama3", "qwen2.5", "llama2", "phi-3-mini", "gpt2", "smollm")
SUB_VOCAB_RANDOM = 600
LIBRARY_STATES = 36  # states checked per library grammar (random walks, then sample texts)

HAND_WRITTEN = {
    "utf8-classes": 'root ::= [α-ω]+ ( " " [^\\x00-\\x7F]+ )* "."',
    "any-char": 'root ::= "<" .{1,3} ">" [ぁ-ゖ]*',
    "recursion": 'root ::= list\nlist ::= "[" ( item ( "," item )* )? "]"\nitem ::= list | [0-9]+ | "\\"" [^"]* "\\""',
    "nullable": 'root ::= a b a "!"\na ::= "" | "x" a\nb ::= "y"?',
    "rule-end-inside-token": 'root ::= word ( " " word )* "."\nword ::= [a-z]+ | [a-z]+ "-" word',
    "ambiguous": 'root ::= t "b" | u "c"\nt ::= "a" t | ""\nu ::= "a" u | "a"',
    "nested-nullable": 'root ::= "(" e ")"\ne ::= "" | e1\ne1 ::= "a" e | "(" e ")" e',
    # a head with moves of its own that calls a rule (an object's key position): one mask covers both
    "call-beside-own-moves": 'root ::= "{" ("\\"id\\":" [0-9]+ | "\\"" key "\\":" [0-9]+) "}" | "[" key "]"\n'
                             'key ::= [a-z]*',
    # heads whose closures reach each other through empty calls
    "empty-call-cycle": 'root ::= "x" (n "q"? m "p"?)* "!" | "o" other\nn ::= "a"*\nm ::= "b"*\nother ::= n m',
}


# -- vocabularies -------------------------------------------------------------------------------


@functools.cache
def _tokenizer(name: str) -> tuple[Any, Vocabulary]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(name))
    return tokenizer, Vocabulary.from_tokenizer(tokenizer)


def _sample_texts() -> list[str]:
    texts = []
    for path in sorted((GRAMMARS / "samples").glob("*.json")):
        texts.extend(json.loads(path.read_text(encoding="utf-8")).get("accept", []))
    return texts


def _splits_character(spelled: bytes) -> bool:
    try:
        spelled.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@functools.cache
def _sub_vocab(name: str, texts: tuple[str, ...] = ()) -> tuple[Vocabulary, dict[int, int]]:
    """A few thousand tokens of tokenizer ``name`` (with every token of the library samples and
    of ``texts``), renumbered; returns it and old id -> new id."""
    tokenizer, full = _tokenizer(name)
    rng = random.Random(name)
    spelled = full.token_bytes
    text = [i for i, b in enumerate(spelled) if b]
    high = [i for i in text if min(spelled[i]) >= 0x80]
    split = [i for i in text if _splits_character(spelled[i])]
    keep = {i for i in text if len(spelled[i]) == 1}
    keep |= set(rng.sample(high, min(200, len(high)))) | set(rng.sample(split, min(200, len(split))))
    keep |= set(rng.sample(text, SUB_VOCAB_RANDOM))
    for sample in (*_sample_texts(), *texts):
        keep.update(tokenizer.encode(sample, add_special_tokens=False))
    keep |= full.eos_ids | set(full.special_tokens.values())
    ids = sorted(keep)
    renumber = {old: new for new, old in enumerate(ids)}
    vocab = Vocabulary.from_token_bytes(
        [spelled[i] for i in ids],
        [renumber[i] for i in full.eos_ids],
        {text: renumber[i] for text, i in full.special_tokens.items()},
    )
    return vocab, renumber


@functools.cache
def _handmade_vocab() -> Vocabulary:
    """Single bytes, multi-byte pieces (whole and split characters), a special token, EOS."""
    pieces = [bytes([b]) for b in range(256)]
    pieces += b'ab abx a-b b. xa xx xy y! a) (( )) () [1 ], 1, << > "x "]'.split()
    pieces += [b"\xce\xb1", b"\xce", b"\xb1\xce", b"\xb1 \xce\xb2", b"a\xce", b"\xe3\x81", b"\x81\x82", b"\xe3\x81\x82"]
    pieces += [b"<\xe3", b"\x82>", b"\xff", b"\xc0\x80"]
    return Vocabulary.from_token_bytes([*pieces, None, None], [len(pieces) + 1], {"<think>": len(pieces)})


def _compile(gbnf: str, vocab: Vocabulary) -> CompiledGrammar:
    return structspec.compile(Grammar.from_gbnf(gbnf), vocab)


# -- brute force --------------------------------------------------------------------------------


def _brute_force(matcher: Matcher) -> torch.Tensor:
    """Allowed tokens by trying every id on a copy of the matcher."""
    size = matcher.compiled.vocabulary.size
    return torch.tensor([matcher.copy().accept_token(i) for i in range(size)], dtype=torch.bool)


def _brute_force_text(matcher: Matcher) -> torch.Tensor:
    """Brute force for grammars without token references: each text token's bytes through
    ``ParseState.advance`` (tokens sharing a dead first byte are skipped together); control
    tokens through ``accept_token``."""
    assert not matcher.compiled.rules.token_refs
    state = matcher.state
    after_first: dict[int, Any] = {}
    allowed = []
    for token_id, spelled in enumerate(matcher.compiled.vocabulary.token_bytes):
        if spelled is None:
            allowed.append(matcher.copy().accept_token(token_id))
            continue
        first = after_first.get(spelled[0], False)
        if first is False:
            first = after_first[spelled[0]] = state.advance(spelled[:1])
        allowed.append(first is not None and (len(spelled) == 1 or first.advance(spelled[1:]) is not None))
    return torch.tensor(allowed, dtype=torch.bool)


def _assert_exact(matcher: Matcher, where: str, brute=_brute_force) -> torch.Tensor | None:
    """The mask after checking it against brute force; None where the state is refused as too
    ambiguous (E110). The engine may refuse only where trying tokens one by one does too; the
    converse need not hold (its sweep shares work between stacks), and then there is nothing
    to compare with."""
    try:
        mask = matcher.allowed_mask()
    except StackLimitError:
        with pytest.raises(StackLimitError):
            brute(matcher)
        return None
    try:
        expected = brute(matcher)
    except StackLimitError:
        return None
    if not torch.equal(mask, expected):
        spelled = matcher.compiled.vocabulary.token_bytes
        wrongly_allowed = [(i, spelled[i]) for i in torch.nonzero(mask & ~expected).flatten().tolist()[:8]]
        wrongly_denied = [(i, spelled[i]) for i in torch.nonzero(expected & ~mask).flatten().tolist()[:8]]
        pytest.fail(f"mask != brute force {where}: mask allows {wrongly_allowed}, mask forbids {wrongly_denied}")
    return mask


def _ends_inside_character(spelled: bytes | None) -> bool:
    """Whether ``spelled`` ends with an incomplete UTF-8 sequence (a lead byte without all its
    continuation bytes)."""
    if not spelled:
        return False
    for back in range(1, min(4, len(spelled)) + 1):
        byte = spelled[-back]
        if byte < 0x80:
            return False
        if byte >= 0xC0:
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return back < needed
    return False


def _random_walk(compiled: CompiledGrammar, seed: int, steps: int, brute=_brute_force) -> int:
    """Check the mask at each state of a seeded walk of allowed tokens; returns states checked.

    Every third step prefers a token ending inside a UTF-8 character, when one is allowed. An
    end-of-sequence id is taken only where the grammar is incomplete (a token reference names it).
    """
    rng = random.Random(seed)
    matcher = compiled.matcher()
    vocab = compiled.vocabulary
    path: list[bytes | int] = []
    for step in range(steps):
        mask = _assert_exact(matcher, f"after {path!r} (seed {seed})", brute)
        if mask is None:
            return step + 1
        ending = vocab.eos_ids if matcher.is_accepting() else ()
        choices = [i for i in torch.nonzero(mask).flatten().tolist() if i not in ending]
        if not choices:
            return step + 1
        partial = [i for i in choices if _ends_inside_character(vocab.token_bytes[i])]
        token = rng.choice(partial if partial and step % 3 == 2 else choices)
        path.append(vocab.token_bytes[token] or token)
        assert matcher.accept_token(token)
    return steps


def _text_walk(compiled: CompiledGrammar, ids: list[int], limit: int, brute=_brute_force) -> int:
    """Check the mask before each token of a tokenized valid text; returns states checked."""
    matcher = compiled.matcher()
    vocab = compiled.vocabulary
    for step, token in enumerate(ids[:limit]):
        mask = _assert_exact(matcher, f"after {[vocab.token_bytes[i] for i in ids[:step]]!r}", brute)
        assert mask is not None and mask[token], f"token {vocab.token_bytes[token]!r} of a valid text is masked"
        assert matcher.accept_token(token)
    return min(len(ids), limit)


# -- grammar library ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_library_grammar_masks_are_exact(path: Path) -> None:
    tokenizer, _ = _tokenizer("llama3")
    vocab, renumber = _sub_vocab("llama3")
    compiled = _compile(path.read_text(encoding="utf-8"), vocab)
    budget = LIBRARY_STATES // 2
    for seed in range(3):
        budget -= _random_walk(compiled, seed, min(budget, 6), _brute_force_text)
    samples_file = GRAMMARS / "samples" / f"{path.stem}.json"
    samples = json.loads(samples_file.read_text(encoding="utf-8"))["accept"] if samples_file.is_file() else []
    budget += LIBRARY_STATES // 2
    for text in sorted(samples, key=len, reverse=True)[:3]:
        if budget <= 0:
            break
        ids = [renumber[i] for i in tokenizer.encode(text, add_special_tokens=False)]
        budget -= _text_walk(compiled, ids, min(budget, 14), _brute_force_text)


# -- MaskBench schemas ---------------------------------------------------------------------------

MASKBENCH = (
    "Glaiveai2K---generate_invoice_0df16806",
    "Snowplow---sp_148_Normalized",
    "Github_easy---o33707",
    "Github_medium---o61593",
    "Kubernetes---kb_588_Normalized",
)


@pytest.mark.parametrize("name", MASKBENCH)
def test_maskbench_schema_masks_are_exact(name: str) -> None:
    schema_to_gbnf = pytest.importorskip("structspec.jsonschema").schema_to_gbnf
    path = assets_dir() / "jsonschemabench" / "maskbench" / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"MaskBench case {path} not found")
    case = json.loads(path.read_text(encoding="utf-8"))
    texts = tuple(json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False) for t in case["tests"] if t["valid"])
    tokenizer, _ = _tokenizer("llama3")
    vocab, renumber = _sub_vocab("llama3", texts)
    compiled = _compile(schema_to_gbnf(case["schema"]), vocab)
    for text in texts[:2]:
        ids = [renumber[i] for i in tokenizer.encode(text, add_special_tokens=False)]
        _text_walk(compiled, ids, 16)
    for seed in range(2):
        _random_walk(compiled, seed, 6)


# -- hand-written grammars ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_hand_written_masks_are_exact_on_handmade_vocab(name: str) -> None:
    compiled = _compile(HAND_WRITTEN[name], _handmade_vocab())
    for seed in range(12):
        _random_walk(compiled, seed, 10)


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
@pytest.mark.parametrize("tokenizer", ["llama3", "llama2"])
def test_hand_written_masks_are_exact_on_real_tokens(tokenizer: str, name: str) -> None:
    compiled = _compile(HAND_WRITTEN[name], _sub_vocab(tokenizer)[0])
    for seed in range(3):
        _random_walk(compiled, seed, 6)


def _token_ref_grammars(vocab: Vocabulary) -> dict[str, str]:
    """Grammars with token references resolved against ``vocab``'s own ids."""
    by_bytes = {spelled: i for i, spelled in enumerate(vocab.token_bytes) if spelled}
    x, close = by_bytes[b"x"], by_bytes[b")"]
    special = min(text for text, i in vocab.special_tokens.items() if i not in vocab.eos_ids)
    eos = min(vocab.eos_ids)
    return {
        "by-id": f'root ::= "a" <[{x}]> [a-z]* | <[{x}]>+ "."',
        "negated": f'root ::= "(" !<[{close}]>* ")"',
        "special": f'root ::= {special} "x" | "x" {special}?',
        "special-text-is-not-the-token": f'root ::= "{special}" | "y"',
        "with-recursion": f'root ::= item\nitem ::= "(" item* ")" | <[{x}]> | !<[{close}]> "."',
        "end-of-sequence-token": f'root ::= "a"+ <[{eos}]> "x"? | "b"',
    }


@pytest.mark.parametrize("tokenizer", [None, "llama3", "phi-3-mini"], ids=["handmade", "llama3", "phi-3-mini"])
def test_token_reference_masks_are_exact(tokenizer: str | None) -> None:
    vocab = _handmade_vocab() if tokenizer is None else _sub_vocab(tokenizer)[0]
    for gbnf in _token_ref_grammars(vocab).values():
        compiled = _compile(gbnf, vocab)
        for seed in range(6):
            _random_walk(compiled, seed, 8)


def test_text_token_ending_the_grammar_beside_a_token_reference_is_accepted() -> None:
    vocab = Vocabulary.from_token_bytes([b"x", b".", None], [2])
    matcher = _compile('root ::= <[0]>+ "."', vocab).matcher()
    assert matcher.accept_token(0)
    assert matcher.allowed_mask().tolist() == [True, True, False]
    assert matcher.accept_token(1)


def test_token_reference_to_an_end_of_sequence_token_is_exact() -> None:
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"ab", None], [3], {"<|eot_id|>": 3})
    matcher = _compile('root ::= "ab" <|eot_id|> "x"?', vocab).matcher()
    assert matcher.accept_token(2)
    _assert_exact(matcher, "after b'ab'")


# -- whole vocabularies -------------------------------------------------------------------------

FULL_VOCAB_CASES = {
    # grammar (None: grammars/json.gbnf), bytes before the state checked against brute force
    "utf8-start": ('root ::= [α-ω]+ ( " " [^\\x00-\\x7F]+ )* "."', b""),
    "utf8-mid-character": ('root ::= [α-ω]+ ( " " [^\\x00-\\x7F]+ )* "."', "αβ 日".encode()[:-1]),
    "json-number": (None, b"[12"),
    "json-string": (None, b'{"k":"ab'),
    "json-string-mid-character": (None, '{"k":"日本'.encode() + b"\xe6"),
}


@pytest.mark.parametrize("case", sorted(FULL_VOCAB_CASES))
@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_full_vocabulary_masks_are_exact(tokenizer: str, case: str) -> None:
    gbnf, prefix = FULL_VOCAB_CASES[case]
    _, vocab = _tokenizer(tokenizer)
    compiled = _compile(gbnf or (GRAMMARS / "json.gbnf").read_text(encoding="utf-8"), vocab)
    matcher = compiled.matcher()
    ids = vocab.encode_bytes(prefix)
    assert matcher.accept_tokens(ids) == len(ids), f"{tokenizer} tokens {ids} of {prefix!r} are refused"
    _assert_exact(matcher, f"after {prefix!r} ({tokenizer})", _brute_force_text)


# -- random grammars over random byte vocabularies ----------------------------------------------

CHARS = ("a", "b", "é", "α", "日", "😀")
CLASSES = ("[ab]", "[^a]", "[α-ω]", "[^\\x00-\\x7F]", ".", "[a-é]", "[😀-😂]", "[日]")


def _items(names: tuple[str, ...], leading: bool) -> st.SearchStrategy[str]:
    """One grammar item; a ``leading`` item never matches the empty string (no left recursion)."""
    literal = st.lists(st.sampled_from(CHARS), min_size=1, max_size=2).map(lambda cs: '"' + "".join(cs) + '"')
    base = st.one_of(literal, st.sampled_from(CLASSES))
    if leading:
        return st.tuples(base, st.sampled_from(["", "+", "{2}"])).map("".join)
    atom = st.one_of(base, st.sampled_from(names))
    return st.tuples(atom, st.sampled_from(["", "*", "+", "?", "{0,2}"])).map("".join)


@st.composite
def _grammars(draw: st.DrawFn) -> str:
    names = ("root", "r1", "r2")
    rules = []
    for name in names:
        alternatives = []
        for _ in range(draw(st.integers(1, 3))):
            rest = draw(st.lists(_items(names, leading=False), max_size=3))
            alternatives.append(" ".join([draw(_items(names, leading=True)), *rest]))
        if draw(st.booleans()):
            alternatives.append('""')
        rules.append(f"{name} ::= {' | '.join(alternatives)}")
    return "\n".join(rules)


@st.composite
def _byte_vocabularies(draw: st.DrawFn) -> Vocabulary:
    """Single bytes of every character, slices of random text (often splitting characters),
    a control token and an end-of-sequence token, in random order."""
    encoded = [c.encode("utf-8") for c in CHARS]
    pieces = sorted({bytes([b]) for piece in encoded for b in piece})
    for _ in range(draw(st.integers(0, 16))):
        text = "".join(draw(st.lists(st.sampled_from(CHARS), min_size=1, max_size=4))).encode("utf-8")
        start = draw(st.integers(0, len(text) - 1))
        pieces.append(text[start : start + draw(st.integers(1, 5))])
    tokens: list[bytes | None] = [*pieces, None, None]
    order = draw(st.permutations(range(len(tokens))))
    tokens = [tokens[i] for i in order]
    return Vocabulary.from_token_bytes(tokens, [order.index(len(tokens) - 1)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(gbnf=_grammars(), vocab=_byte_vocabularies(), seed=st.integers(0, 2**16))
def test_random_grammar_masks_are_exact(gbnf: str, vocab: Vocabulary, seed: int) -> None:
    try:
        grammar = Grammar.from_gbnf(gbnf)
    except GrammarError:
        assume(False)
    _random_walk(structspec.compile(grammar, vocab), seed, 8)


# -- lifetime ----------------------------------------------------------------------------------


def test_a_compiled_grammar_is_freed_with_its_grammar() -> None:
    """The per-pair cache must not keep what it maps: once neither the grammar nor the
    compiled grammar is held, both are gone (here without waiting for the cycle collector)."""
    import gc
    import weakref

    vocab = _handmade_vocab()
    grammar = Grammar.from_gbnf(HAND_WRITTEN["recursion"])
    compiled = structspec.compile(grammar, vocab)
    matcher = compiled.matcher()
    matcher.accept_tokens(vocab.encode_bytes(b'[["x",1'))
    matcher.mask_words()
    assert structspec.compile(grammar, vocab) is compiled  # shared while in use, with its masks
    dead_grammar, dead_compiled = weakref.ref(grammar), weakref.ref(compiled)
    gc.disable()
    try:
        del grammar, compiled, matcher
        assert dead_compiled() is None and dead_grammar() is None
    finally:
        gc.enable()


def test_a_compiled_grammar_keeps_its_grammar() -> None:
    import gc

    vocab = _handmade_vocab()
    compiled = structspec.compile(Grammar.from_gbnf('root ::= "ab"+'), vocab)
    gc.collect()
    assert structspec.compile(compiled.grammar, vocab) is compiled
    assert compiled.matcher().accept_tokens(vocab.encode_bytes(b"abab")) == 2


def test_compiled_grammar_size_grows_with_its_masks() -> None:
    vocab = _handmade_vocab()
    compiled = _compile(HAND_WRITTEN["recursion"], vocab)
    before = compiled.nbytes
    matcher = compiled.matcher()
    for token in vocab.encode_bytes(b'[["x",1,[]],"yy"'):
        matcher.mask_words()
        assert matcher.accept_token(token)
    assert compiled.nbytes > before + 10 * 4 * compiled.n_words  # at least the masks it cached
