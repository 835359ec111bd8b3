"""The peer-engine adapters (tools/peers) and benchmark asset helpers (tools/_assets).

Differential checks: each installed peer's verdict on small schemas equals `jsonschema`'s,
its verdict on a small GBNF equals Python's `re`, and its masks agree with its own
`accept_token`. Peers come from the `bench` extra; tests of a peer that does not import skip.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO, tokenizer_dir

sys.path.insert(0, str(REPO / "tools"))

import _assets
from peers import PEER_NAMES, Peer, PeerCompileError, available_peers, make_peer
from peers.tcfg_rewrite import RepetitionError, rewrite_counted_repeats

jsonschema = pytest.importorskip("jsonschema")

# A byte-level BPE like Llama-3's, with a 50k vocabulary so the peers' per-tokenizer setup
# stays quick; tools/bench_peers_smoke.py exercises the Llama-3 tokenizer.
TOKENIZER = "gpt2"

SCHEMAS = [
    (
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name"],
            "additionalProperties": False,
        },
        [
            {"name": "Ada", "age": 36},
            {"name": "Zoë"},
            {"name": 'a "quoted" name', "age": -4},
            {"age": 3},
            {"name": 7},
            {"name": "Ada", "age": 1.5},
            {"name": "Ada", "extra": True},
            [],
        ],
    ),
    (
        {"type": "array", "items": {"type": "boolean"}},
        [[], [True], [True, False, True], [1], ["true"], {}, None],
    ),
    (
        {"enum": ["red", "green", "blue"]},
        ["red", "green", "blue", "Red", "redd", 3, None],
    ),
]
MALFORMED = ['{"name":"Ada"', '{"name":"Ada"}}', "[true,]", '"red', "", "[tru]"]

GBNF = 'root ::= "[" num ("," num)* "]"\nnum ::= [1-9] [0-9]{0,2} | "0"\n'
GBNF_REGEX = re.compile(r"\[(?:[1-9][0-9]{0,2}|0)(?:,(?:[1-9][0-9]{0,2}|0))*\]")
GBNF_TEXTS = ["[0]", "[1,22,333]", "[4444]", "[01]", "[]", "[1,]", "[7", "[12,0,999]"]
GBNF_PEERS = {"xgrammar", "llguidance", "transformers-cfg"}


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.fixture(scope="module", params=PEER_NAMES)
def peer(request: pytest.FixtureRequest) -> Peer:
    if request.param not in available_peers():
        pytest.skip(f"{request.param} is not installed (pip install structspec[bench])")
    return make_peer(request.param, tokenizer_dir(TOKENIZER))


def compile_or_skip(peer: Peer, schema: dict):
    try:
        return peer.compile_json_schema(schema)
    except PeerCompileError as exc:
        if peer.name == "transformers-cfg":  # no JSON Schema front end of its own
            pytest.skip(str(exc))
        raise


@pytest.mark.parametrize("schema_index", range(len(SCHEMAS)))
def test_verdicts_agree_with_jsonschema(peer: Peer, schema_index: int) -> None:
    schema, instances = SCHEMAS[schema_index]
    grammar = compile_or_skip(peer, schema)
    for instance in instances:
        expected = jsonschema.Draft202012Validator(schema).is_valid(instance)
        assert grammar.accepts_text(compact(instance)) == expected, (peer.name, instance)


def test_malformed_json_is_rejected(peer: Peer) -> None:
    grammars = [compile_or_skip(peer, schema) for schema, _ in SCHEMAS]
    for text in MALFORMED:
        assert not any(g.accepts_text(text) for g in grammars), (peer.name, text)


def test_masks_agree_with_accepted_tokens(peer: Peer) -> None:
    schema, instances = SCHEMAS[0]
    grammar = compile_or_skip(peer, schema)
    eos = peer.tokenizer.eos_token_id
    for instance in instances[:3]:
        matcher = grammar.matcher()
        for token in peer.encode(compact(instance)):
            matcher.compute_mask()
            allowed = matcher.allowed_token_ids()
            assert matcher.mask_allows(token) and token in allowed
            assert all(matcher.mask_allows(int(t)) for t in allowed[:50])
            assert not matcher.is_accepting() or matcher.mask_allows(eos)
            assert matcher.accept_token(token)
        matcher.compute_mask()
        assert matcher.is_accepting() and matcher.mask_allows(eos)


def test_logits_processor_follows_the_peer_through_generation(peer: Peer) -> None:
    import torch
    from peers.hf_processor import peer_processor_factory

    schema, _ = SCHEMAS[0]
    compile_or_skip(peer, schema)
    processor = peer_processor_factory(peer)(schema)
    torch.manual_seed(0)
    prompt = [11, 12, 13]  # never fed to the peer
    ids = list(prompt)
    eos = peer.tokenizer.eos_token_id
    for _ in range(40):
        scores = torch.randn(1, peer.vocab_size)
        masked = processor(torch.tensor([ids]), scores.clone())
        allowed = torch.isfinite(masked[0])
        assert torch.equal(masked[0][allowed], scores[0][allowed])
        token = int(masked[0].argmax())
        assert allowed[token]
        if token == eos:
            break
        ids.append(token)
    generated = ids[len(prompt) :]
    matcher = peer.compile_json_schema(schema).matcher()
    assert all(matcher.accept_token(t) for t in generated)
    with pytest.raises(ValueError, match="one sequence"):
        processor(torch.tensor([ids, ids]), torch.zeros(2, peer.vocab_size))


def test_gbnf_verdicts_agree_with_regex(peer: Peer) -> None:
    if peer.name not in GBNF_PEERS:
        with pytest.raises(PeerCompileError):
            peer.compile_gbnf(GBNF)
        return
    grammar = peer.compile_gbnf(GBNF)
    for text in GBNF_TEXTS:
        assert grammar.accepts_text(text) == bool(GBNF_REGEX.fullmatch(text)), (peer.name, text)


@pytest.mark.parametrize(
    ("gbnf", "respelled"),
    [
        ('r ::= "a"{0,2} [b]{2,} c{,3}', 'r ::= ("a"{1,2})? [b]{2} [b]* (c{1,3})?'),
        ('r ::= ("x" | y{0,}){0,1} z{1,4} .{3}', 'r ::= (("x" | y*){1,1})? z{1,4} .{3}'),
        ('r ::= "{0,1}" [{]{1,} # q{0,1}', 'r ::= "{0,1}" [{]{1} [{]* # q{0,1}'),
        ("r ::= [\\]]{0,}", "r ::= [\\]]*"),
    ],
)
def test_tcfg_rewrite_respells_misparsed_repetitions(gbnf: str, respelled: str) -> None:
    assert rewrite_counted_repeats(gbnf) == respelled


def test_tcfg_rewrite_refuses_empty_repetition() -> None:
    with pytest.raises(RepetitionError, match="empty repetition"):
        rewrite_counted_repeats('r ::= "a"{0}')


def test_unknown_peer_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown peer 'nope'"):
        make_peer("nope", "/nonexistent")


def test_outlines_index_timeout_is_a_compile_error() -> None:
    if "outlines-core" not in available_peers():
        pytest.skip("outlines-core is not installed")
    peer = make_peer("outlines-core", tokenizer_dir(TOKENIZER), compile_timeout_s=1e-4)
    schema = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(20)}}
    with pytest.raises(PeerCompileError, match="exceeded"):
        peer.compile_json_schema(schema)
    quick = make_peer("outlines-core", tokenizer_dir(TOKENIZER))
    assert quick.compile_json_schema({"type": "boolean"}).accepts_text("true")


def test_stratified_sample_is_balanced_and_prefix_stable(tmp_path: Path) -> None:
    files = [tmp_path / f"{subset}---{i}.json" for subset in "ABC" for i in range(5 if subset != "C" else 2)]
    sample = _assets.stratified_sample(files, 10, seed=3)
    assert len(sample) == len(set(sample)) == 10
    counts = {s: sum(_assets.subset_of(p) == s for p in sample) for s in "ABC"}
    assert counts == {"A": 4, "B": 4, "C": 2}
    assert _assets.stratified_sample(files, 4, seed=3) == sample[:4]
    assert _assets.stratified_sample(files, 10, seed=4) != sample
    kept = _assets.stratified_sample(files, 10, seed=3, keep=lambda p: _assets.subset_of(p) != "B")
    assert {_assets.subset_of(p) for p in kept} == {"A", "C"} and len(kept) == 7


def test_assets_dir_follows_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRUCTSPEC_ASSETS", str(tmp_path))
    assert _assets.assets_dir() == tmp_path
    monkeypatch.setenv("STRUCTSPEC_ASSETS", str(tmp_path / "missing"))
    assert _assets.assets_dir() is None
    with pytest.raises(SystemExit, match="STRUCTSPEC_ASSETS"):
        _assets.require_assets()


def test_load_case_reads_and_reports_malformed_files(tmp_path: Path) -> None:
    good = tmp_path / "Snowplow---x.json"
    good.write_text(json.dumps({"schema": {"type": "null"}, "tests": [{"data": None, "valid": True}]}))
    case = _assets.load_case(good)
    assert (case.subset, case.name, case.schema) == ("Snowplow", "Snowplow---x", {"type": "null"})
    assert case.instances[0].valid and _assets.has_instances(good)
    bad = tmp_path / "Snowplow---bad.json"
    bad.write_text('{"schema": {}}')
    with pytest.raises(ValueError, match="malformed MaskBench file"):
        _assets.load_case(bad)
    assert _assets.compact_json({"a": [1, "é"]}) == '{"a":[1,"é"]}'
