"""Draft trees: one target forward verifies a main draft line and the branches hung off it.

* The forward: each node's logits row equals what a linear feed of its branch gives, for SDPA
  and eager attention, and keeping an accepted branch leaves the cache as if that branch had
  been fed alone.
* Verification: the target's token picks among deterministic children, so committed tokens
  are distributed as plain masked sampling (chi-square, rejecting at p < 1e-3 with a fixed seed).
* End to end on the bundled demo model: greedy decoding with branches is token-identical to
  plain decoding, and branches ending copied values are taken.
"""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from structspec.masks._states import StateTable
from tiny_models import one_thread

from structspec import Grammar, Vocabulary
from structspec import compile as compile_grammar
from structspec.generation.cache import CachedModel, tree_attention
from structspec.generation.chain import Draft
from structspec.generation.logit_rows import LogitRows
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Stats
from structspec.generation.verify import verify

__all__ = ["one_thread"]

VOCAB = 64


@functools.cache
def _model(attention: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         attn_implementation=attention)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _linear(model, sequence: list[int]) -> torch.Tensor:
    """The logits after the last token of ``sequence``, from a fresh cache."""
    return CachedModel(model, VOCAB).logits(sequence, 1)[0]


# Nodes: 0 -> 1 -> 2 on the main line; 3 -> 4 off node 0; 5 off the root.
TOKENS = [11, 12, 13, 21, 22, 31]
PARENTS = [-1, 0, 1, 0, 3, -1]
BRANCHES = {0: [0], 1: [0, 1], 2: [0, 1, 2], 3: [0, 3], 4: [0, 3, 4], 5: [5]}


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_each_node_sees_its_own_branch_only(attention: str) -> None:
    model = _model(attention)
    assert tree_attention(model)
    sequence = [3, 9, 27, 17, 51, 25, 7]
    runner = CachedModel(model, VOCAB, trees=True)
    runner.logits(sequence[:4], 1)  # part of the sequence is cached already
    rows = runner.tree_logits(sequence, TOKENS, PARENTS)
    assert torch.allclose(rows[0], _linear(model, sequence), atol=1e-5)
    for node, path in BRANCHES.items():
        expected = _linear(model, sequence + [TOKENS[i] for i in path])
        assert torch.allclose(rows[1 + node], expected, atol=1e-5), node


@pytest.mark.parametrize("path", [[0, 3, 4], [5], [0, 1], []])
def test_keeping_a_branch_leaves_the_cache_as_if_it_alone_was_fed(path: list[int]) -> None:
    model = _model("sdpa")
    sequence = [3, 9, 27, 17, 51]
    runner = CachedModel(model, VOCAB, trees=True)
    runner.tree_logits(sequence, TOKENS, PARENTS)
    runner.keep(len(sequence), path)
    committed = sequence + [TOKENS[i] for i in path] + [40]
    assert runner.tokens == committed[:-1]
    after = runner.logits(committed, 1)[0]
    assert runner.tokens == committed
    assert torch.allclose(after, _linear(model, committed), atol=1e-5)


@st.composite
def trees(draw) -> tuple[list[int], list[int], list[int], list[int]]:
    """A sequence, a random draft tree over it (tokens, parents: each node after an earlier
    one or the root) and a root-first path through the tree."""
    sequence = draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12))
    size = draw(st.integers(1, 10))
    parents = [draw(st.integers(-1, i - 1)) for i in range(size)]
    tokens = draw(st.lists(st.integers(0, VOCAB - 1), min_size=size, max_size=size))
    path, node = [], -1
    while True:
        children = [i for i, parent in enumerate(parents) if parent == node]
        if not children or not draw(st.booleans()):
            return sequence, tokens, parents, path
        node = draw(st.sampled_from(children))
        path.append(node)


@settings(max_examples=40, deadline=None)
@given(trees(), st.integers(0, 12))
def test_any_tree_forward_and_kept_branch_match_linear_feeds(tree, cached: int) -> None:
    sequence, tokens, parents, path = tree
    model = _model("sdpa")
    runner = CachedModel(model, VOCAB, trees=True)
    if cached < len(sequence):
        runner.logits(sequence[: cached + 1], 1)  # some of the sequence is in the cache already
    rows = runner.tree_logits(sequence, tokens, parents)
    for node in range(len(tokens)):
        branch, at = [], node
        while at >= 0:
            branch.insert(0, tokens[at])
            at = parents[at]
        assert torch.allclose(rows[1 + node], _linear(model, sequence + branch), atol=1e-5)
    runner.keep(len(sequence), path)
    committed = sequence + [tokens[i] for i in path] + [5]
    assert torch.allclose(runner.logits(committed, 1)[0], _linear(model, committed), atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(trees())
@example(([3, 9], [11, 12, 21, 22, 23], [-1, 0, 0, 2, 3], [0, 2, 3, 4]))  # a run overlapping its place
def test_keeping_a_branch_moves_exactly_its_entries(tree) -> None:
    """The kept cache is bit for bit the sequence's entries followed by the path's, gathered
    by index (what ``keep`` moves run by run)."""
    sequence, tokens, parents, path = tree
    runner = CachedModel(_model("sdpa"), VOCAB, trees=True)
    runner.tree_logits(sequence, tokens, parents)
    index = torch.tensor(list(range(len(sequence))) + [len(sequence) + node for node in path])
    expected = [(layer.keys.index_select(-2, index), layer.values.index_select(-2, index))
                for layer in runner.cache.layers]
    runner.keep(len(sequence), path)
    for (keys, values), layer in zip(expected, runner.cache.layers, strict=True):
        held = layer.get_seq_length()  # a crop moves the end: the entries after it are dropped
        assert held == len(index) == len(runner.tokens)
        assert torch.equal(layer.keys[..., :held, :], keys) and torch.equal(layer.values[..., :held, :], values)


def test_a_tree_needs_a_model_checked_for_it() -> None:
    with pytest.raises(ValueError, match="cannot take a draft tree"):
        CachedModel(_model("sdpa"), VOCAB).tree_logits([1, 2], TOKENS, PARENTS)


def test_a_model_with_sliding_window_layers_takes_no_tree() -> None:
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=16)
    model = MistralForCausalLM(config)
    assert not tree_attention(model)
    runner = CachedModel(model, VOCAB)
    runner.logits([1, 2, 3, 4], 1)
    runner.keep(2, [0, 1])  # the main line kept: nothing moves
    with pytest.raises(ValueError, match="plain growing layers"):  # a branch cannot be kept in place
        runner.keep(1, [1])


def _chi_square_p(counts: dict, expected: dict[tuple, float], n: int) -> float:
    from scipy.stats import chisquare

    keys = [k for k, p in expected.items() if p > 0]
    assert set(counts) <= set(keys), set(counts) - set(keys)
    total = sum(expected[k] for k in keys)  # 1 up to float32 rounding
    observed = [counts.get(k, 0) for k in keys]
    return float(chisquare(observed, [expected[k] / total * n for k in keys]).pvalue)


def test_the_target_token_picks_the_child_so_samples_follow_the_masked_target() -> None:
    """Root children ``a`` (then ``b``) and ``c``: the first token is drawn from the root's
    masked row, and after ``a`` or ``c`` the second from that node's row; the walk stops
    after a first token no child drafted."""
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"c", b"d", b"e", None], eos_ids=[5])
    compiled = compile_grammar(Grammar.from_gbnf("root ::= [a-d] [a-e]"), vocab)
    sampling = Sampling(temperature=1.0)
    draft = Draft()
    draft.extend([0, 1], [None, None], "ngram")
    draft.extend([2], [None], "ngram", fork=0)
    logits = torch.tensor([[1.0, 0.2, 0.5, 0.7, 3.0, 0.0],  # root (e is masked: [a-d] first)
                           [0.1, 2.0, -1.0, 0.3, 0.4, 0.0],  # after a
                           [0.0] * 6,  # after a b: the grammar is done
                           [1.5, -0.5, 0.2, 0.9, 0.0, 0.0]])  # after c
    first = sampling.probs(compiled.matcher().apply_mask(logits[0].clone()))
    matcher = compiled.matcher()
    matcher.accept_token(0)
    after_a = sampling.probs(matcher.apply_mask(logits[1].clone()))
    matcher = compiled.matcher()
    matcher.accept_token(2)
    after_c = sampling.probs(matcher.apply_mask(logits[3].clone()))
    expected = {(x, None): float(first[x]) for x in (1, 3)}
    expected.update({(0, y): float(first[0] * after_a[y]) for y in range(5)})
    expected.update({(2, y): float(first[2] * after_c[y]) for y in range(5)})
    rng = torch.Generator().manual_seed(1)
    counts: dict[tuple, int] = {}
    n = 6000
    for _ in range(n):
        rows = LogitRows(logits.clone(), logits.shape[-1])
        path, token = verify(rows, draft, compiled.matcher(), sampling, rng, Stats())
        tokens = [draft.tokens[node] for node in path] + ([] if token is None else [token])
        key = (tokens[0], tokens[1] if len(tokens) > 1 else None)
        counts[key] = counts.get(key, 0) + 1
    assert _chi_square_p(counts, expected, n) > 1e-3


def test_greedy_decoding_with_branches_is_token_identical_on_the_demo_model() -> None:
    from structspec.generation import Generator, SpecConfig
    from structspec.models import load
    from structspec.models.prompt import extraction_messages

    model, tok = load("demo")
    schema = {"type": "object", "properties": {"title": {"type": "string"}, "date": {"type": "string"},
              "venue": {"type": "string"}, "free": {"type": "boolean"}},
              "required": ["title", "date", "venue", "free"], "additionalProperties": False}
    text = "Spring Garden Fair on 2024-05-12 at the Town Hall park. Entry is free for everyone."
    gen = Generator(model, tok)
    prompt = extraction_messages(text, schema)
    plain = gen.generate(prompt, schema, max_new_tokens=64)
    spec = gen.generate(prompt, schema, max_new_tokens=64, speculative=SpecConfig(sources=("forced", "ngram")))
    assert spec.token_ids == plain.token_ids
    assert spec.stats.branches_taken > 0
    assert spec.stats.tokens_per_forward > 2.5


# -- the draft tree's bookkeeping --------------------------------------------------------------

EXTENSIONS = st.lists(  # (tokens, fork or None for the main line), applied in order
    st.tuples(st.lists(st.integers(0, 5), max_size=4), st.none() | st.integers(0, 6)), max_size=8
)


def _grown(extensions: list[tuple[list[int], int | None]]) -> Draft:
    draft = Draft()
    for tokens, fork in extensions:
        if fork is not None:
            fork = min(fork, len(draft.line))
        draft.extend(tokens, [None] * len(tokens), "ngram" if fork is None else "alt", fork=fork, kind="end")
    return draft


def _children_one_by_one(draft: Draft) -> dict[int, list[int]]:
    """Each node's children, main-line child first, node by node (the oracle)."""
    out: dict[int, list[int]] = {}
    on_line = set(draft.line)
    for node, parent in sorted(enumerate(draft.parents), key=lambda item: item[0] not in on_line):
        out.setdefault(parent, []).append(node)
    return out


@given(EXTENSIONS)
def test_a_draft_grown_in_rows_links_each_token_to_the_one_before(extensions) -> None:
    """Extending by rows is extending token by token: each token follows the one before it,
    a row's first follows the main line's node before its fork (or the root), and only main-line
    rows lengthen the main line."""
    draft = _grown(extensions)
    parents, line, forks = [], [], {}
    for tokens, fork in extensions:
        ahead = len(line) if fork is None else min(fork, len(line))
        parent = line[ahead - 1] if ahead else -1
        if fork is not None and tokens:
            forks[len(parents)] = "end"
        for _ in tokens:
            if fork is None:
                line.append(len(parents))
            parents.append(parent)
            parent = len(parents) - 1
    assert (draft.parents, draft.line, draft.forks) == (parents, line, forks)
    assert draft.tokens == [t for tokens, _ in extensions for t in tokens]
    assert len(draft.sources) == len(draft.qs) == len(draft.tokens)


@given(EXTENSIONS, st.data())
def test_children_and_the_first_child_checked_are_those_of_the_tree(extensions, data) -> None:
    from structspec.generation.chain import _first_child

    draft = _grown(extensions)
    children = _children_one_by_one(draft)
    assert draft.children() == children
    path: list[int] = []  # a random accepted path from the root
    while children.get(path[-1] if path else -1) and data.draw(st.booleans()):
        path.append(data.draw(st.sampled_from(children[path[-1] if path else -1])))
    assert _first_child(draft, path) == children.get(path[-1] if path else -1, [])[:1]


def test_a_row_needs_a_draft_distribution_per_token() -> None:
    with pytest.raises(ValueError, match="2 tokens but 1"):
        Draft().extend([1, 2], [None], "ngram")


SCORES = st.floats(-3, 3, width=32) | st.sampled_from([float("nan"), float("-inf"), 3.0])


@settings(max_examples=200, deadline=None)
@given(data=st.data(), greedy=st.booleans(), left=st.none() | st.integers(1, 12), small_table=st.booleans())
def test_verify_taking_over_the_drafts_matcher_is_stepping_again(data, greedy: bool, left: int | None,
                                                                 small_table: bool) -> None:
    """Differential: verification that takes the main line's tokens over from the matcher the
    draft was made with (``Draft.end``) -- and with it takes a greedy row's argmax that is the
    main line's token without reading the mask -- accepts the same nodes, picks the same token
    and leaves the sequence's matcher where stepping every token again and masking every row
    (no ``end``) leaves it, budget cuts included, on random draft trees, rows (NaN, -inf and ties
    among them) and budgets, greedy and sampled. Greedy float32 rows are walked by the native
    state table (``Matcher.greedy_path``), float64 rows by the Python walk: both agree, also
    when a tiny state table starts new epochs in the middle of the walk."""
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"c", b'"', b"ab", b" ", None], eos_ids=[6])
    compiled = compile_grammar(Grammar.from_gbnf(r'root ::= "\"" [a-c ]{0,9} "\""'), vocab)
    if small_table:
        compiled.table = StateTable(2, 3)
    start = compiled.matcher()
    start.accept_tokens(data.draw(st.lists(st.sampled_from([0, 1, 2, 4, 5]), max_size=3).map(lambda t: [3, *t])))
    end = start.copy()
    line = []
    for _ in range(data.draw(st.integers(0, 6))):
        choices = [t for t in range(6) if end.allows(t)]
        if not choices:
            break
        line.append(data.draw(st.sampled_from(choices)))
        end.accept_token(line[-1])
    draft = Draft(end=end)
    draft.extend(line, [None] * len(line), "ngram")
    for _ in range(data.draw(st.integers(0, 2))):
        fork = data.draw(st.integers(0, len(line)))
        tokens = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
        draft.extend(tokens, [None] * len(tokens), "ngram", fork=fork)
    rows = data.draw(st.lists(st.lists(SCORES, min_size=7, max_size=7),
                              min_size=len(draft.tokens) + 1, max_size=len(draft.tokens) + 1))
    logits = torch.tensor(rows)
    sampling = Sampling() if greedy else Sampling(temperature=1.0)
    results = []
    for given_end, dtype in ((end, torch.float32), (None, torch.float32), (end, torch.float64), (None, torch.float64)):
        stepped = Draft(draft.tokens, draft.sources, draft.qs, draft.parents, draft.line, draft.forks, given_end)
        matcher, stats = start.copy(), Stats()
        rows = LogitRows(logits.to(dtype), 7)
        try:
            out = verify(rows, stepped, matcher, sampling, torch.Generator().manual_seed(7), stats, left)
        except RuntimeError as exc:  # a masked row with nothing left: the same error either way
            out = str(exc)
        results.append((out, matcher.state, matcher.num_tokens, matcher.is_finished(), stats.budget_cuts))
    assert results[0] == results[1] == results[2] == results[3]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 70), min_size=1, max_size=4), st.data())
def test_layers_of_other_shapes_grow_and_move_in_their_own_arenas(feeds: list[int], data) -> None:
    """A cache whose layers' states differ in shape (the second layer's values narrower, as in
    attention whose values have their own head size): every layer holds what it was fed across
    the arenas' growth, and a move copies the same entries in every layer."""
    from structspec.generation.cache import _Arenas, _growing_layer

    arenas = _Arenas(2)
    layers = [_growing_layer()(arenas, index) for index in range(2)]
    shapes = [((1, 2, 4), (1, 2, 4)), ((1, 2, 4), (1, 2, 3))]  # (batch, heads, width) of keys, values
    generator = torch.Generator().manual_seed(len(feeds))
    fed = [[torch.empty(1, 2, 0, width) for *_, width in pair] for pair in shapes]
    for count in feeds:
        for layer, pair, held in zip(layers, shapes, fed, strict=True):
            states = [torch.randn(*shape[:-1], count, shape[-1], generator=generator) for shape in pair]
            layer.update(*states)
            for k in range(2):
                held[k] = torch.cat([held[k], states[k]], dim=-2)
    assert len(arenas.all) == 2  # the keys of both layers and the first layer's values share one
    total = sum(feeds)
    for layer, held in zip(layers, fed, strict=True):
        assert torch.equal(layer.keys, held[0]) and torch.equal(layer.values, held[1])
    count = data.draw(st.integers(1, total))
    source = data.draw(st.integers(0, total - count))
    to = data.draw(st.integers(0, source))
    for arena in arenas.all:
        arena.move(source, to, count)
    for layer, held in zip(layers, fed, strict=True):
        for entries, expected in zip((layer.keys, layer.values), held, strict=True):
            assert torch.equal(entries.narrow(-2, to, count), expected.narrow(-2, source, count))
            assert torch.equal(entries.narrow(-2, 0, to), expected.narrow(-2, 0, to))
