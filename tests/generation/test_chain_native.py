"""The draft chain's native round (``structspec/generation/_chain.pyx``) against the Python loop
it replaced, kept here as the oracle: on random sources -- free and paid, proposing random
tokens, draft distributions and branches, some proposing nothing -- random acceptance
histories and forward costs, both build the same draft (tokens, sources, parents, main line,
branch kinds) and count the same stats."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from structspec.generation._chain import RoundValue

from structspec import Grammar, Vocabulary
from structspec import compile as compile_grammar
from structspec.generation.adaptive import DraftModelCost
from structspec.generation.chain import Draft, DraftChain
from structspec.generation.config import SpecConfig
from structspec.generation.proposal import BRANCH_KINDS, Branch, Proposal
from structspec.generation.stats import Stats

VOCAB = Vocabulary.from_token_bytes([b"a", b"b", b"c", b"ab", None], eos_ids=[4])


@dataclass
class _Source:
    """A source proposing what a seeded generator draws from its inputs, advancing the
    matcher over its tokens as real sources do."""

    name: str
    free: bool
    seed: int
    prior_price: float = 0.3

    def __post_init__(self) -> None:
        self.cost = DraftModelCost()

    def catch_up(self, context: list[int]) -> int:
        return len(context) % 5

    def propose(self, context: list[int], matcher, limit: int, stats: Stats) -> Proposal:
        rng = random.Random(hash((self.seed, len(context), limit)))
        if rng.random() < 0.3:
            return Proposal()
        tokens = [rng.randrange(4) for _ in range(rng.randint(0, limit))]
        tokens = tokens[: matcher.accept_tokens(tokens)]
        qs = [None if self.free else torch.full((5,), 0.2) for _ in tokens]
        branches = [Branch(rng.randint(0, len(tokens)), [rng.randrange(4) for _ in range(rng.randint(0, 3))],
                           rng.choice(BRANCH_KINDS)) for _ in range(rng.randint(0, 2))]
        return Proposal(tokens, qs, branches)


def _python_draft(chain: DraftChain, context: list[int], matcher, limit: int, stats: Stats) -> Draft:
    """The chain's round as the Python loop did it (the oracle)."""
    result = Draft(end=matcher)
    quota = {d.name: chain.config.max_per_source for d in chain.drafters if d.name != "forced"}

    def rank(ranked: tuple) -> tuple[bool, float]:
        drafter, acceptance = ranked
        return not drafter.free, -(acceptance + (0.2 if drafter.name == "forced" else 0.0))

    ranked = sorted(((d, chain.acceptance[d.name].probability) for d in chain.drafters), key=rank)
    free_price = chain._forward_price()
    main: list[int] = []
    sequence = context
    round_ = RoundValue()
    idle: set[str] = set()
    progress = True
    while progress and len(main) < limit and not matcher.is_finished():
        progress = False
        for drafter, acceptance in ranked:
            name = drafter.name
            if name in idle:
                continue
            if drafter.free:
                price, upfront = free_price, 0.0
            else:
                price, upfront = chain._price(drafter), chain._upfront(drafter, sequence)
            room = limit - len(main)
            if name in quota:
                room = round_.worth(acceptance, price, min(room, quota[name]), upfront)
            if room <= 0 or matcher.is_finished():
                continue
            proposal = drafter.propose(sequence, matcher, room, stats)
            added = proposal.tokens
            start, reach = len(main), round_.survival
            if added:
                idle.clear()
                if name in quota:
                    quota[name] -= len(added)
                round_.add(len(added), acceptance, price, upfront)
                result.extend(added, proposal.qs, name)
                main += added
                sequence = context + main
                progress = True
            elif not proposal.branches:
                if drafter.free:
                    idle.add(name)
                continue
            for branch in proposal.branches:
                fork, tokens = start + branch.fork, branch.tokens
                chance = reach * acceptance**branch.fork * chain.branch_taken[branch.kind].probability
                parent = result.line[fork - 1] if fork else -1
                fits = (chain.branching and tokens and fork + len(tokens) <= limit
                        and (parent, tokens[0]) not in zip(result.parents, result.tokens, strict=True))
                if fits and round_.branch(chance, len(tokens), price):
                    result.extend(tokens, [None] * len(tokens), name, fork=fork, kind=branch.kind)
    result.count_into(stats)
    return result


@settings(max_examples=300, deadline=None)
@given(seeds=st.lists(st.integers(0, 10**6), min_size=1, max_size=3), paid=st.booleans(),
       history=st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=6),
       forward=st.lists(st.tuples(st.integers(1, 9), st.floats(0.001, 0.02)), max_size=4),
       limit=st.integers(1, 12), branching=st.booleans(), per_source=st.integers(1, 8),
       context=st.lists(st.integers(0, 3), max_size=6))
def test_the_native_round_drafts_what_the_python_loop_drafted(seeds, paid, history, forward, limit, branching,
                                                             per_source, context) -> None:
    compiled = compile_grammar(Grammar.from_gbnf('root ::= [abc]{0,14}'), VOCAB)
    names = ["forced", "ngram", "draft"][: len(seeds)]
    drafts = []
    for build in (DraftChain.draft, _python_draft):
        sources = [_Source(name, not (paid and name == "draft"), seed)
                   for name, seed in zip(names, seeds, strict=False)]
        chain = DraftChain(sources, SpecConfig(max_per_source=per_source), branching=branching)
        for index, (passed, failed) in enumerate(history):
            chain.acceptance[names[index % len(names)]].update(passed, failed)
            chain.branch_taken[BRANCH_KINDS[index % 2]].update(passed % 2, failed)
        for fed, seconds in [(300, 0.5), *forward]:
            chain.forward.add(fed, seconds)
        stats = Stats()
        matcher = compiled.matcher()
        draft = build(chain, list(context), matcher, limit, stats)
        drafts.append((draft.tokens, draft.sources, draft.parents, draft.line, draft.forks,
                       [q is None for q in draft.qs], matcher.num_tokens,
                       {name: s.drafted for name, s in stats.sources.items()}, stats.branches))
    assert drafts[0] == drafts[1]
