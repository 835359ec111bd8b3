"""Fuzz the native mask core for a while: random grammars, vocabularies, token ids and bytes.

    python tools/fuzz_masks.py [--seconds 600] [--seed 0] [--shortcuts] [--split]

Each round draws a random grammar (literals, classes with multi-byte characters, counted
repetitions, optional and repeated items, recursion through three rules) and a random byte
vocabulary (every byte of the grammar's characters, random slices that split characters, a
control token and an end-of-sequence token), then walks random tokens: at every state the mask
must equal brute force (each id advanced through a matcher copy), and random token ids (out of
range too) and random byte strings must be refused or accepted without a crash. A grammar
error other than E108/E110 from the core is a failure; ``--shortcuts`` forces the core's loop
probes and counted chains on every node, ``--split`` the loop split (docs/masks.md) at every
state with a uniform step, reading 1-4 units. Each round also hands the trie builders
(``structspec/tokens/_trie.pyx``) random byte matrices, lengths, rows and offsets: a
ValueError or arrays, never a crash; and the n-gram source's byte functions
(``structspec/generation/_ngram.pyx``) random texts, offsets (out of range too), lengths
(negative too) and token sequences: results that hold what they promise, never a crash. At
every state of the walk, greedy verification of a random draft tree over random rows (NaN,
-inf and ties among them; draft tokens out of range too) in the state table
(:meth:`~structspec.masks.matcher.Matcher.greedy_path`) must choose what brute force does, also
with a state table small enough to start new epochs in the middle of a walk; and the native
n-gram source (``NgramSource``), given a random context and random bounds, must propose a line
and branches the grammar accepts where they start, within its room.
Failing grammars are printed with the seed to replay.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from structspec.masks._states import HANDED_OVER, StateTable

import structspec
from structspec import Grammar, GrammarError, Vocabulary
from structspec.generation import _ngram
from structspec.generation.drafters import NgramDrafter
from structspec.generation.proposal import BRANCH_KINDS
from structspec.generation.stats import Stats
from structspec.masks import runner
from structspec.masks.matcher import Matcher
from structspec.tokens import _trie
from structspec.tokens import trie as token_tries

CHARS = ["a", "b", "c", '"', "\\", "é", "ß", "日", "😀", " ", "{", "}"]
CLASSES = ["[ab]", "[^a]", "[a-é]", "[^\\x00-\\x7F]", ".", "[😀-😂]", "[日b]", '[^"\\\\]']


def _literal(rng: random.Random) -> str:
    text = "".join(rng.choice(CHARS) for _ in range(rng.randint(1, 3)))
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _item(rng: random.Random, names: list[str], leading: bool) -> str:
    base = _literal(rng) if rng.random() < 0.5 else rng.choice(CLASSES)
    if not leading and rng.random() < 0.25:
        base = rng.choice(names)
    low = rng.randint(0, 3)
    suffix = rng.choice(["", "*", "+", "?", f"{{{low},{low + rng.randint(0, 9)}}}", f"{{{low + 1}}}"])
    if leading and (suffix in ("*", "?") or suffix.startswith("{0")):
        suffix = "+"
    return base + suffix


def random_grammar(rng: random.Random) -> str:
    names = ["root", "r1", "r2"]
    rules = []
    for name in names:
        alternatives = []
        for _ in range(rng.randint(1, 3)):
            items = [_item(rng, names, True)] + [_item(rng, names, False) for _ in range(rng.randint(0, 3))]
            alternatives.append(" ".join(items))
        if rng.random() < 0.3:
            alternatives.append('""')
        rules.append(f"{name} ::= {' | '.join(alternatives)}")
    return "\n".join(rules)


def random_vocabulary(rng: random.Random) -> Vocabulary:
    pieces = sorted({bytes([b]) for c in CHARS for b in c.encode("utf-8")})
    for _ in range(rng.randint(0, 40)):
        text = "".join(rng.choice(CHARS) for _ in range(rng.randint(1, 6))).encode("utf-8")
        start = rng.randrange(len(text))
        pieces.append(text[start : start + rng.randint(1, 8)])
    tokens: list[bytes | None] = [*pieces, None, None]
    rng.shuffle(tokens)
    return Vocabulary.from_token_bytes(tokens, [max(i for i, t in enumerate(tokens) if t is None)])


def check(compiled: structspec.CompiledGrammar, rng: random.Random, steps: int) -> None:
    """A random walk with brute-force masks, random ids, random bytes and a greedy walk of a
    random draft tree at every state."""
    if rng.random() < 0.25:  # epochs begin in the middle of walks
        compiled.table = StateTable(rng.randint(1, 4), rng.randint(1, 6))
    matcher = compiled.matcher()
    size = compiled.vocabulary.size
    for _ in range(steps):
        words = matcher.mask_words()
        allowed = [t for t in range(size) if matcher.copy().accept_token(t)]
        mask = [t for t in range(size) if words[t >> 5] >> (t & 31) & 1]
        if mask != allowed:
            raise AssertionError(f"mask {mask} != brute force {allowed} at {matcher.state}")
        check_greedy_path(matcher, rng)
        check_ngram_source(matcher, rng)
        for token in (rng.randint(-3, size + 3) for _ in range(4)):
            matcher.copy().accept_token(token)
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
        after = matcher.state.advance(data)
        if after is not None:
            compiled.mask_words(after)
        choices = [t for t in allowed if t not in compiled.vocabulary.eos_ids]
        if not choices:
            return
        matcher.accept_token(rng.choice(choices))


def check_ngram_source(matcher: Matcher, rng: random.Random) -> None:
    """The native n-gram source on a random context (repeated, so that lookups find it) with
    random bounds: its line is at most ``limit`` tokens the grammar accepts, in order, and the
    matcher it was given went along them; each branch starts at a fork along the line and the
    grammar accepts it there."""
    size = matcher.compiled.vocabulary.size
    context = [rng.randrange(size) for _ in range(rng.randint(0, 12))] * rng.randint(1, 3)
    limit = rng.randint(0, 8)
    source = NgramDrafter(rng.randint(-2, 40), rng.randint(-2, 6), rng.randint(-2, 70))
    drafted = matcher.copy()
    proposal = source.propose(context, drafted, limit, Stats())
    tokens = proposal.tokens
    assert len(tokens) <= limit and proposal.qs == [None] * len(tokens), ("n-gram line", context, tokens)
    replay = matcher.copy()
    assert replay.accept_tokens(tokens) == len(tokens) and replay.state == drafted.state, ("n-gram line", tokens)
    for branch in proposal.branches:
        assert 0 <= branch.fork <= len(tokens) and branch.kind in BRANCH_KINDS, ("n-gram branch", branch)
        start = matcher.copy()
        start.accept_tokens(tokens[: branch.fork])
        assert start.accept_tokens(branch.tokens) == len(branch.tokens), ("n-gram branch", context, branch)


def check_greedy_path(matcher: Matcher, rng: random.Random) -> None:
    """Greedy verification of a random draft tree over random rows: what the state table's
    walk chooses is what brute force chooses (each row's argmax among the tokens a matcher copy
    accepts, the main-line child first), up to where it hands the choice over."""
    size = matcher.compiled.vocabulary.size
    n = rng.randint(0, 6)
    parents = [rng.randint(-1, i - 1) for i in range(n)]
    line = [i for i in range(n) if parents[i] == i - 1]
    line = line[: next((k for k, i in enumerate(line) if i != k), len(line))]  # a chain from the root
    scores = [rng.choice([float("nan"), float("-inf"), 1.0, 0.0]) if rng.random() < 0.2 else rng.uniform(-2, 2)
              for _ in range((n + 1) * size)]
    rows = np.array(scores, np.float32).reshape(n + 1, size)
    # half the tokens are their row's argmax (a draft the target agrees with), the rest anything
    tokens = [int(rows[parents[i] + 1].argmax()) if rng.random() < 0.5 else rng.randint(-2, size + 2)
              for i in range(n)]
    walked = matcher.copy()
    path, token = walked.greedy_path(rows, tokens, parents, line, None)
    expected, node, reference = [], -1, matcher.copy()
    while len(expected) < len(path):
        allowed = [t for t in range(size) if reference.copy().accept_token(t)]
        best = max(allowed, key=lambda t: (np.isnan(rows[node + 1, t]), rows[node + 1, t], -t))
        children = [j for j in range(node + 1, n) if parents[j] == node and tokens[j] == best]
        children.sort(key=lambda j: (j not in line, j))
        assert children, ("greedy path", tokens, parents, path)
        expected.append(children[0])
        reference.accept_token(best)
        node = children[0]
    assert path == expected, ("greedy path", tokens, parents, path, expected)
    if token is not None and token != HANDED_OVER:  # the token after the path, taken too
        allowed = [t for t in range(size) if reference.copy().accept_token(t)]
        best = max(allowed, key=lambda t: (np.isnan(rows[node + 1, t]), rows[node + 1, t], -t))
        assert token == best and not any(parents[j] == node and tokens[j] == best for j in range(n)), (
            "greedy token", tokens, parents, path, token, best)
        reference.accept_token(token)
    assert walked.state == reference.state and walked.num_tokens == reference.num_tokens, ("greedy state", path)


def fuzz_builders(rng: random.Random) -> None:
    """The trie builders on random (often inconsistent) input: a ValueError or arrays."""
    rows, width = rng.randint(0, 6), rng.randint(0, 5)
    matrix = np.array([rng.randrange(256) for _ in range(rows * width)], np.uint8).reshape(rows, width)
    lengths = [rng.randint(-1, width + 1) for _ in range(rows)]
    flat = bytes(rng.randrange(256) for _ in range(rng.randint(0, 12)))
    picks = [rng.randint(-1, rows) for _ in range(rng.randint(0, 3))]
    calls = (lambda: _trie.trie_nodes(matrix, lengths), lambda: _trie.row_bytes(matrix, lengths),
             lambda: _trie.unit_rows(matrix, lengths, np.frombuffer(flat.ljust(256, b"\x01")[:256], np.uint8),
                                     rng.random() < 0.5, rng.randint(-1, 4)),
             lambda: _trie.rest_rows(matrix, lengths, picks, [rng.randint(-1, width) for _ in picks], [0] * len(picks)))
    for call in calls:
        with contextlib.suppress(ValueError):
            call()


def fuzz_ngram(rng: random.Random) -> None:
    """The n-gram byte functions on random input, including offsets and lengths out of range:
    each result checked against what it promises (an AssertionError names the call)."""
    data = bytes(rng.choice(b'ab ":,{.\n') for _ in range(rng.randint(0, 40)))
    size = len(data)
    low, high = rng.randint(-3, 8), rng.randint(-3, 50)
    found = _ngram.longest_repeated_suffix(data, low, high)
    repeated = found and data[size - found :] in data[: size - 1]
    assert found == 0 or (low <= found <= high and repeated), ("longest", data, low, high)
    written, least, most = rng.randint(-3, 12), rng.randint(-2, 5), rng.randint(-2, 40)
    starts = _ngram.lookup(data, written, least, most)
    assert len(starts) <= _ngram.MAX_SCANNED and starts == sorted(starts, reverse=True), ("lookup", data, written)
    # each start follows an earlier occurrence of one suffix: its last byte, at least
    assert all(0 < at < size and data[at - 1] == data[-1] for at in starts), ("lookup", data, written, least, most)
    assert len(set(starts)) == len(starts), ("lookup", data, starts)
    offsets = [rng.randint(-2, size + 3) for _ in range(rng.randint(0, 6))]
    width = rng.randint(0, 12)
    agreed = _ngram.agreed_continuation(data, [at for at in offsets if at >= 0], width)
    windows = [data[at : at + width] for at in offsets if at >= 0]
    assert all(window.startswith(agreed) for window in windows), ("agreed", data, offsets, width)
    end = _ngram.first_word_end(data, [at for at in offsets if at >= 0])
    assert end == b"" or (len(end) <= 2 and _ngram.ends_word(end)), ("word end", data, offsets)
    assert 0 <= _ngram.value_length(data, rng.randint(-3, 50)) <= size, ("value length", data)
    pieces = [bytes(rng.choice(b"ab\n") for _ in range(rng.randint(0, 3))) or None for _ in range(4)]
    text = _ngram.ContextText()
    for _ in range(4):
        context = [rng.randrange(4) for _ in range(rng.randint(0, 10))]
        assert text.sync(context, pieces) == b"".join(pieces[t] or b"" for t in context), ("text", context, pieces)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shortcuts", action="store_true", help="loop probes and chains on every node")
    parser.add_argument("--split", action="store_true", help="the loop split at every state with a uniform step")
    args = parser.parse_args(argv)
    if args.shortcuts:
        runner.PROBE_AT, runner.CHAINS_AFTER, runner.CHAIN_HEIGHT = 1, 0, 1 << 20
    if args.split:
        runner.SPLIT_BITS, token_tries.SPLIT_SHARE, token_tries.BIG_SUBTREE = 0, 0, 1
    deadline = time.monotonic() + args.seconds
    rounds = states = skipped = 0
    seed = args.seed
    while time.monotonic() < deadline:
        rng = random.Random(seed)
        fuzz_builders(rng)
        try:
            fuzz_ngram(rng)
        except AssertionError as exc:
            print(f"seed {seed}: n-gram {exc}")
            return 1
        if args.split:
            runner.SPLIT_STEPS = rng.randint(1, 4)
        gbnf = random_grammar(rng)
        try:
            grammar = Grammar.from_gbnf(gbnf)
        except GrammarError:
            skipped += 1
            seed += 1
            continue
        try:
            check(structspec.compile(grammar, random_vocabulary(rng)), rng, 10)
        except GrammarError as exc:
            if exc.code not in ("E108", "E110"):
                print(f"seed {seed}: unexpected {exc.code}: {exc}\n{gbnf}")
                return 1
        except AssertionError as exc:
            print(f"seed {seed}: {exc}\n{gbnf}")
            return 1
        rounds += 1
        states += 10
        seed += 1
        if rounds % 100 == 0:
            print(f"{rounds} grammars, seed {seed}", flush=True)
    print(f"{rounds} grammars ({skipped} rejected by the front end), about {states} states checked, "
          f"seeds {args.seed}..{seed - 1}: no difference")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
