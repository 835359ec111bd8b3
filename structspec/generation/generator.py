"""``Generator``: constrained generation, plain or speculative, over transformers causal LMs."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from structspec.generation.adaptive import DraftModelCost
from structspec.generation.batch import Batch
from structspec.generation.cache import CachedModel, common_prefix, logits_width, tree_attention
from structspec.generation.chain import DraftChain
from structspec.generation.config import SpecConfig
from structspec.generation.constraint import to_constraint
from structspec.generation.detokenize import TextAssembler
from structspec.generation.drafters import ForcedDrafter, ModelDrafter, NgramDrafter, span_tokens
from structspec.generation.loop import Decoding, decode
from structspec.generation.prefetch import MaskPrefetch
from structspec.generation.prompt import Messages, check_context, prompt_ids
from structspec.generation.sampling import Sampling
from structspec.generation.sequence import Request, RequestError, Sequence
from structspec.generation.stats import Result, Stats
from structspec.generation.vocab_check import draft_vocabulary
from structspec.grammar.content import Constraint
from structspec.lru import BoundedCache
from structspec.masks.compiled import CompiledGrammar
from structspec.masks.compiled import compile as compile_grammar
from structspec.tokens.vocabulary import Vocabulary

DRAFT_RUNNERS_KEPT = 2
"""Draft-model caches a generator keeps from its latest sequences for new prompts to share
(the draft model is called for its first draft only after the whole prompt is in its cache)."""


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
        # A draft-model token's cost in target forwards until measured: the models' size ratio.
        self._draft_price = _size(draft_model) / _size(model) if draft_model is not None else 0.0
        self._draft_cost = DraftModelCost()  # measured, shared by the sequences
        # The draft model's caches of the latest sequences: a new one copies the prefix its
        # prompt shares with them (the instructions and schema of the request before).
        self._draft_runners: deque[CachedModel] = deque(maxlen=DRAFT_RUNNERS_KEPT)
        self._workers = threading.local()  # each thread's mask worker (see _prefetch)
        self._spans = span_tokens()  # spans the n-gram sources tokenized, kept across generations

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
        tools: list[dict[str, Any]] | None = None,
        source: str | None = None,
        grounded: bool = False,
    ) -> Result | Stream:
        """Generate a continuation of ``prompt`` (text, or chat messages) that follows
        ``constraint`` (a Grammar, GBNF text, a JSON Schema dict, a Pydantic model class, a
        :class:`~structspec.StructuralTag`, or a grammar compiled for this vocabulary).

        The sampling options are checked as a :class:`~structspec.generation.sampling.Sampling`
        (:class:`~structspec.generation.sampling.OptionError` names a bad one), and the prompt
        plus ``max_new_tokens`` must fit in the model's context
        (:class:`~structspec.generation.prompt.ContextLengthError` otherwise), before anything
        is decoded. ``speculative=None`` decodes one token per target forward; a
        :class:`SpecConfig` drafts and verifies (same output distribution; token-identical when
        greedy). ``tools`` (OpenAI-style function definitions) are shown to the model through
        the chat template (see :func:`~structspec.generation.prompt.prompt_ids`); constrain the
        calls with :func:`~structspec.generation.tool_calls.tool_call_tag`. Returns a
        :class:`Result`, or with ``stream=True`` a :class:`Stream` of text pieces.

        ``source`` (a schema or Pydantic constraint): the text that strings marked
        ``"x-grounded": true`` (``Annotated[str, Grounded()]``) must copy a span of;
        ``grounded=True`` grounds every string without ``enum``, ``const``, ``format`` or
        ``pattern`` as well (docs/grounded.md).
        """
        request = Request(prompt, constraint, max_new_tokens, temperature, top_p, top_k, seed, tools, source,
                          grounded)
        target = CachedModel(self.model, self.vocabulary.size, trees=self._tree_attention)
        run = _Run(self, self.sequence(request, speculative), target)
        if stream:
            return Stream(run)
        for _ in run.pieces():
            pass
        return run.result

    def generate_batch(
        self, requests: Iterable[Request], *, speculative: SpecConfig | None = None, max_batch: int = 16
    ) -> list[Result]:
        """Generate for every request, decoding up to ``max_batch`` of them at once: one target
        forward a round for all rows, each row with its own prompt, constraint, sampling and
        stop (see :class:`~structspec.generation.batch.Batch`). A finished row leaves the batch
        and the next request takes its place.

        Returns the results in request order. Greedy rows are token for token what
        :meth:`generate` gives for each request alone. A request that cannot start (a bad
        option, constraint or prompt) raises :class:`~structspec.generation.sequence.RequestError`
        naming its index, before any decoding; like
        :meth:`generate`, a Pydantic output that does not validate raises, once every row is done.
        """
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        sequences = []
        for index, request in enumerate(requests):
            try:
                sequences.append(self.sequence(request, speculative))
            except (ValueError, TypeError) as exc:
                raise RequestError(index, exc) from exc
        batch = self.batch()
        waiting = list(reversed(sequences))
        while waiting or len(batch):
            while waiting and len(batch) < max_batch:
                batch.add(waiting.pop())
            batch.step()
        self._compiled.reweigh()  # the masks these rows computed count against the cache's bytes
        for sequence in sequences:
            if sequence.error is not None:
                raise sequence.error
        return [sequence.result for sequence in sequences]

    def batch(self) -> Batch:
        """An empty :class:`~structspec.generation.batch.Batch` over this generator's models:
        add sequences (:meth:`sequence`) at any time and :meth:`Batch.step` it."""
        return Batch(self.model, self.vocabulary, trees=self._tree_attention)

    def sequence(self, request: Request, speculative: SpecConfig | None = None) -> Sequence:
        """A :class:`~structspec.generation.sequence.Sequence` ready to decode ``request``: its
        options checked (:class:`~structspec.generation.sampling.OptionError`), its prompt
        encoded and checked against the context
        (:class:`~structspec.generation.prompt.ContextLengthError`), its constraint compiled."""
        sampling = Sampling(temperature=request.temperature, top_k=request.top_k, top_p=request.top_p,
                            seed=request.seed, max_new_tokens=request.max_new_tokens)
        ids = prompt_ids(self.tokenizer, request.prompt, request.tools)
        check_context(len(ids), sampling.max_new_tokens, {"model": self.model, "draft model": self.draft_model})
        parsed, compiled = self.compile(request.constraint, source=request.source, grounded=request.grounded)
        rng = sampling.rng()
        chain = self._chain(speculative, sampling, rng, ids)
        max_draft = speculative.max_draft if speculative else 0
        decoding = Decoding(ids, compiled.matcher(), sampling.max_new_tokens, sampling, rng, chain, max_draft, Stats())
        return Sequence(decoding, parsed, TextAssembler(self.vocabulary, self.tokenizer))

    def _prefetch(self) -> MaskPrefetch:
        """The calling thread's mask worker, kept across its generations (streams it interleaves
        share it: each round waits for what the last one started)."""
        worker = getattr(self._workers, "prefetch", None)
        if worker is None:
            worker = self._workers.prefetch = MaskPrefetch()
        return worker

    def _chain(
        self, config: SpecConfig | None, sampling: Sampling, rng: torch.Generator, prompt: list[int]
    ) -> DraftChain | None:
        if config is None:
            return None
        drafters: list = []
        for source in config.resolved_sources(self.draft_model is not None):
            if source == "forced":
                drafters.append(ForcedDrafter())
            elif source == "ngram":
                drafters.append(NgramDrafter(config.ngram_max, config.ngram_min, spans=self._spans))
            else:
                runner = CachedModel(self.draft_model, self.vocabulary.size)
                if self._draft_runners:
                    runner.adopt(max(self._draft_runners, key=lambda r: common_prefix(r.tokens, prompt, len(prompt))),
                                 prompt)
                self._draft_runners.append(runner)
                drafters.append(ModelDrafter(runner, sampling, rng, self._draft_price, self._draft_cost))
        return DraftChain(drafters, config, branching=self._tree_attention)


@dataclass
class _Run:
    """One generation decoded alone, with its own cache of the target."""

    generator: Generator
    sequence: Sequence
    target: CachedModel

    @property
    def result(self) -> Result | None:
        return self.sequence.result

    def pieces(self) -> Iterator[str]:
        """Run the loop, yielding text pieces; sets :attr:`result` at the end."""
        for committed in decode(self.target, self.sequence.decoding, self.generator._prefetch()):
            piece = self.sequence.add(committed)
            if piece:
                yield piece
        tail = self.sequence.finish()
        if tail:
            yield tail
        self.generator._compiled.reweigh()  # the masks this run computed count against the cache's bytes


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
