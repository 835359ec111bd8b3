"""``Generator``: constrained generation, plain or speculative, over transformers causal LMs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from structspec.generation.cache import CachedModel, logits_width, tree_attention
from structspec.generation.chain import DraftChain
from structspec.generation.config import SpecConfig
from structspec.generation.constraint import Constraint, to_constraint
from structspec.generation.detokenize import TextAssembler
from structspec.generation.drafters import ForcedDrafter, ModelDrafter, NgramDrafter
from structspec.generation.loop import decode
from structspec.generation.prompt import Messages, check_context, prompt_ids
from structspec.generation.sampling import Sampling
from structspec.generation.stats import Result, Stats
from structspec.generation.vocab_check import draft_vocabulary
from structspec.lru import BoundedCache
from structspec.masks.compiled import CompiledGrammar
from structspec.masks.compiled import compile as compile_grammar
from structspec.tokens.vocabulary import Vocabulary


class Stream:
    """Iterate (once) for text pieces as tokens are accepted; afterwards :attr:`result` holds
    the :class:`Result` that ``stream=False`` would have returned."""

    def __init__(self, run: _Run) -> None:
        self._pieces = run.pieces()
        self._run = run

    def __iter__(self) -> Iterator[str]:
        return self._pieces

    @property
    def result(self) -> Result | None:
        """The result once the stream is exhausted, else ``None``."""
        return self._run.result


class Generator:
    """Generates text that follows a constraint from a causal LM, optionally speculatively.

    ``draft_model`` must share the target's vocabulary (checked through ``draft_tokenizer``,
    which defaults to ``tokenizer``). Compiled constraints are cached per generator: at most
    ``cache_size`` of them and ``cache_bytes`` of their estimated size (masks included, measured
    again after each generation), least recently used dropped first.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        draft_model: Any = None,
        draft_tokenizer: Any = None,
        cache_size: int = 32,
        cache_bytes: int = 1 << 30,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.vocabulary = Vocabulary.from_tokenizer(tokenizer, vocab_size=logits_width(model))
        self.draft_model = draft_model.eval() if draft_model is not None else None
        if draft_model is not None:
            draft_vocabulary(self.vocabulary, draft_tokenizer or tokenizer, logits_width(draft_model))
        self._compiled: BoundedCache[Any, tuple[Constraint, CompiledGrammar]] = BoundedCache(
            max_entries=cache_size, max_bytes=cache_bytes, weigh=_compiled_bytes)
        self._tree_attention = tree_attention(self.model)

    def compile(
        self, constraint: Any, *, source: str | None = None, grounded: bool = False
    ) -> tuple[Constraint, CompiledGrammar]:
        """The constraint read as a grammar (strings grounded in ``source`` as
        :meth:`generate` says) and compiled for this vocabulary (cached). The returned
        :class:`Constraint` can be passed to :meth:`generate` as the constraint itself. A
        :class:`~structspec.masks.compiled.CompiledGrammar` for this vocabulary is used as it
        is, and not cached here: its owner decides how long it lives."""
        if isinstance(constraint, CompiledGrammar):
            if constraint.vocabulary != self.vocabulary:
                raise ValueError("the compiled grammar was compiled for another vocabulary than this model's")
            return to_constraint(constraint.grammar, source=source, grounded=grounded), constraint
        key = _cache_key(constraint)
        if key is not None and source is not None:
            key = (key, source, grounded)
        hit = self._compiled.get(key, None) if key is not None else None
        if hit is not None:
            return hit
        parsed = to_constraint(constraint, source=source, grounded=grounded)
        entry = (parsed, compile_grammar(parsed.grammar, self.vocabulary))
        return self._compiled.put(key, entry) if key is not None else entry

    def generate(
        self,
        prompt: str | Messages,
        constraint: Any,
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int | None = None,
        speculative: SpecConfig | None = None,
        stream: bool = False,
        source: str | None = None,
        grounded: bool = False,
    ) -> Result | Stream:
        """Generate a continuation of ``prompt`` (text, or chat messages) that follows
        ``constraint`` (a Grammar, GBNF text, a JSON Schema dict, a Pydantic model class, or a
        grammar compiled for this vocabulary).

        The sampling options are checked as a :class:`~structspec.generation.sampling.Sampling`
        (:class:`~structspec.generation.sampling.OptionError` names a bad one), and the prompt
        plus ``max_new_tokens`` must fit in the model's context
        (:class:`~structspec.generation.prompt.ContextLengthError` otherwise), before anything
        is decoded. ``speculative=None`` decodes one token per target forward; a
        :class:`SpecConfig` drafts and verifies (same output distribution; token-identical when
        greedy). Returns a :class:`Result`, or with ``stream=True`` a :class:`Stream` of text pieces.

        ``source`` (a schema or Pydantic constraint): the text that strings marked
        ``"x-grounded": true`` (``Annotated[str, Grounded()]``) must copy a span of;
        ``grounded=True`` grounds every string without ``enum``, ``const``, ``format`` or
        ``pattern`` as well (docs/grounded.md).
        """
        sampling = Sampling(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, max_new_tokens=max_new_tokens)
        ids = prompt_ids(self.tokenizer, prompt)
        check_context(len(ids), max_new_tokens, {"model": self.model, "draft model": self.draft_model})
        parsed, compiled = self.compile(constraint, source=source, grounded=grounded)
        rng = sampling.rng()
        chain = self._chain(speculative, sampling, rng)
        run = _Run(self, parsed, compiled, ids, sampling, rng, chain, speculative)
        if stream:
            return Stream(run)
        for _ in run.pieces():
            pass
        return run.result

    def _chain(self, config: SpecConfig | None, sampling: Sampling, rng: torch.Generator) -> DraftChain | None:
        if config is None:
            return None
        drafters: list = []
        for source in config.resolved_sources(self.draft_model is not None):
            if source == "forced":
                drafters.append(ForcedDrafter())
            elif source == "ngram":
                drafters.append(NgramDrafter(config.ngram_max, config.ngram_min))
            else:
                runner = CachedModel(self.draft_model, self.vocabulary.size)
                drafters.append(ModelDrafter(runner, sampling, rng, _size(self.draft_model) / _size(self.model)))
        return DraftChain(drafters, config, branching=self._tree_attention)


@dataclass
class _Run:
    """One generation: the loop plus text assembly, stats and the final value."""

    gen: Generator
    parsed: Constraint
    compiled: CompiledGrammar
    ids: list[int]
    sampling: Sampling
    rng: torch.Generator
    chain: DraftChain | None
    config: SpecConfig | None
    result: Result | None = None

    def pieces(self) -> Iterator[str]:
        """Run the loop, yielding text pieces; sets :attr:`result` at the end."""
        start = time.perf_counter()
        stats = Stats()
        matcher = self.compiled.matcher()
        text = TextAssembler(self.gen.vocabulary, self.gen.tokenizer)
        target = CachedModel(self.gen.model, self.gen.vocabulary.size, trees=self.gen._tree_attention)
        max_draft = self.config.max_draft if self.config else 0
        generated: list[int] = []
        steps = decode(target, self.ids, matcher, self.sampling.max_new_tokens, self.sampling, self.rng,
                       self.chain, max_draft, stats)
        for committed in steps:
            generated += committed
            piece = text.add(committed)
            if piece:
                yield piece
        tail = text.finish()
        if tail:
            yield tail
        self.gen._compiled.reweigh()  # the masks this run computed count against the cache's bytes
        stats.finish(time.perf_counter() - start, stats.stop_reason)
        complete = stats.stop_reason != "max_new_tokens" or matcher.is_accepting()
        value = self.parsed.value(text.text) if complete else None
        self.result = Result(text.text, value, stats, tuple(generated))


def _size(model: Any) -> int:
    """Parameter count: a draft model's cost relative to the target before it is measured."""
    return sum(p.numel() for p in model.parameters())


def _compiled_bytes(_key: Any, entry: tuple[Constraint, CompiledGrammar]) -> int:
    return entry[1].nbytes


def _cache_key(constraint: Any) -> Any:
    if isinstance(constraint, str):
        return ("gbnf", constraint)
    if isinstance(constraint, dict):
        return ("schema", json.dumps(constraint, sort_keys=True, default=repr))
    try:
        return ("type", constraint, hash(constraint))
    except TypeError:
        return None
