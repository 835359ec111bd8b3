"""A causal LM with its KV cache: feed only what the cache lacks, crop on divergence."""

from __future__ import annotations

import functools
import inspect
import sys

import torch

from structspec.generation.logit_rows import LogitRows


def logits_width(model: torch.nn.Module) -> int:
    """The number of logits a model emits per position."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return int(config.vocab_size)


class CachedModel:
    """One sequence's view of a model: the cache holds a token prefix; :meth:`logits` crops the
    cache back to where it agrees with the asked sequence and feeds the rest, so a prompt is
    encoded once and rejected draft tokens are dropped."""

    def __init__(self, model: torch.nn.Module, width: int, trees: bool = False) -> None:
        from transformers import DynamicCache

        self.model = model
        self.width = width
        self.trees = trees  # the caller checked tree_attention(model)
        self.cache = DynamicCache(config=model.config)
        self._arenas: _Arenas | None = None  # the growing layers' (see keep)
        if self.cache.layers and all(type(layer) is _dynamic_layer() for layer in self.cache.layers):
            self._arenas = _Arenas(len(self.cache.layers))
            self.cache.layers = [_growing_layer()(self._arenas, index) for index in range(len(self.cache.layers))]
        self.tokens: list[int] = []
        self._device = next(model.parameters()).device
        self._keep_arg = _takes(type(model), "logits_to_keep")
        # transformers 5 names the cache argument ``cache`` (``past_key_values`` is deprecated
        # and goes in 5.40); older releases and models not yet migrated take ``past_key_values``
        self._cache_arg = "cache" if _takes(type(model), "cache") else "past_key_values"
        self._additive_mask = getattr(_text_config(model), "_attn_implementation", None) == "eager"

    def logits(self, sequence: list[int], n_out: int) -> LogitRows:
        """Logits ``[n_out, width]`` predicting the token after each of the last ``n_out``
        positions of ``sequence`` (padded with -inf or trimmed to ``width``); rows read as
        float32 CPU tensors, where masks, sampling and the seeded generator live."""
        if not 1 <= n_out <= len(sequence):
            raise ValueError(f"n_out must lie in [1, {len(sequence)}], got {n_out}")
        keep = self._reuse(sequence, len(sequence) - n_out)
        feed = sequence[keep:]
        kwargs = {"logits_to_keep": n_out} if self._keep_arg else {}
        with torch.no_grad():
            out = self.model(
                input_ids=torch.tensor([feed], device=self._device),
                use_cache=True,
                **{self._cache_arg: self.cache},
                **kwargs,
            )
        self.tokens.extend(feed)
        return LogitRows(out.logits[0, -n_out:], self.width)

    def pending(self, sequence: list[int]) -> int:
        """How many tokens :meth:`logits` would feed for ``sequence`` (at least its last)."""
        return len(sequence) - common_prefix(self.tokens, sequence, len(sequence) - 1)

    def adopt(self, donor: CachedModel, sequence: list[int]) -> None:
        """Start (empty) holding a copy of what ``donor`` (of the same model) holds of
        ``sequence``'s longest shared prefix, at most all but its last token: a prompt that
        starts like one decoded before skips computing that part."""
        if self.tokens or donor.model is not self.model:
            raise ValueError("only an empty cache of the same model can adopt another's entries")
        n = common_prefix(donor.tokens, sequence, len(sequence) - 1)
        if not n:
            return
        for index, layer in enumerate(donor.cache.layers):
            if layer.is_initialized:
                self.cache.update(layer.keys[..., :n, :].clone(), layer.values[..., :n, :].clone(), index)
        self.tokens = list(sequence[:n])

    def tree_logits(self, sequence: list[int], nodes: list[int], parents: list[int]) -> LogitRows:
        """Logits ``[1 + len(nodes), width]`` after ``sequence`` (row 0) and after each node of a
        draft tree (row ``1 + i``), from one forward. Node ``i`` holds token ``nodes[i]`` and
        follows node ``parents[i]`` (-1: the end of ``sequence``); parents come before their
        children. Each node attends to ``sequence`` and its own ancestors only, at the position
        of its depth, so its row equals what a linear feed of its branch would give. Call
        :meth:`keep` with the accepted branch before the next forward."""
        if all(parent == i - 1 for i, parent in enumerate(parents)):
            return self.logits(sequence + nodes, len(nodes) + 1)
        if not self.trees:
            raise ValueError("this model's attention cannot take a draft tree (see tree_attention)")
        keep = self._reuse(sequence, len(sequence) - 1)
        fed = len(sequence) - keep
        depth: list[int] = []
        seen = torch.zeros(len(nodes), len(nodes), dtype=torch.bool)  # node i sees node j
        for i, parent in enumerate(parents):
            if parent >= 0:
                seen[i] = seen[parent]
            seen[i, i] = True
            depth.append(0 if parent < 0 else depth[parent] + 1)
        size = fed + len(nodes)
        allowed = torch.ones(size, keep + size, dtype=torch.bool).tril(keep)
        allowed[fed:, keep + fed :] = seen  # and every node sees the whole sequence
        positions = list(range(keep, len(sequence))) + [len(sequence) + d for d in depth]
        kwargs = {"logits_to_keep": len(nodes) + 1} if self._keep_arg else {}
        with torch.no_grad():
            out = self.model(
                input_ids=torch.tensor([sequence[keep:] + nodes], device=self._device),
                attention_mask=self._mask(allowed),
                position_ids=torch.tensor([positions], device=self._device),
                use_cache=True,
                **{self._cache_arg: self.cache},
                **kwargs,
            )
        self.tokens.extend(sequence[keep:] + nodes)
        return LogitRows(out.logits[0, -(len(nodes) + 1) :], self.width)

    def keep(self, length: int, path: list[int]) -> None:
        """After :meth:`tree_logits` over a sequence of ``length`` tokens: keep in the cache
        the sequence and the nodes of ``path`` (node indices, root first), dropping the rest.
        Kept entries off the main line move into place, a run of consecutive nodes at a time (one
        copy for every layer: see :class:`_Arena`; a branch is one run); nothing before them is
        copied."""
        if len(self.tokens) == length + len(path):  # every node fed was accepted: all in place already
            return
        for source, to, count in _moves(path):
            if self._arenas is None:  # tree_attention(model) holds for growing layers only
                raise ValueError("only a cache of plain growing layers can keep a branch off the main line")
            for arena in self._arenas.all:
                arena.move(length + source, length + to, count)
        kept = [self.tokens[length + i] for i in path]
        if len(self.tokens) > length + len(path):
            self.cache.crop(length + len(path) - len(self.tokens))
        del self.tokens[length:]
        self.tokens.extend(kept)

    def _reuse(self, sequence: list[int], most: int) -> int:
        """Crop the cache to its longest common prefix with ``sequence`` (at most ``most``
        tokens, so that what must be fed is fed); returns that prefix's length."""
        keep = common_prefix(self.tokens, sequence, most)
        if keep < len(self.tokens):
            self.cache.crop(keep - len(self.tokens))
            del self.tokens[keep:]
        return keep

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """``allowed`` as the 4-D mask the model's attention takes: boolean for SDPA, additive
        for eager attention."""
        allowed = allowed[None, None].to(self._device)
        if not self._additive_mask:
            return allowed
        dtype = next(self.model.parameters()).dtype
        additive = torch.zeros(allowed.shape, dtype=dtype, device=self._device)
        return additive.masked_fill(~allowed, torch.finfo(dtype).min)


@functools.cache
def _dynamic_layer() -> type:
    from transformers.cache_utils import DynamicLayer

    return DynamicLayer


class _Arena:
    """The keys or values of many cache layers in one tensor ``[slots, *states]``, each slot one
    layer's keys or values with room to spare along the token dimension (half as much again as
    it holds, grown for every slot at once when one is full). A model whose layers' states all
    have one shape keeps its whole cache in one arena, so :meth:`CachedModel.keep` moves every
    layer's entries of an accepted branch in one copy: on the demo target, 8 copies of about
    6 µs each (most of a round's host time when the target takes a branch) became one.

    The price: growing copies the whole cache at once, so for that moment it is held twice and
    a half (a layer's own buffer grew alone, half as much again as one layer)."""

    def __init__(self, slots: int, like: torch.Tensor) -> None:
        self.slots = slots
        self.states = (*like.shape[:-2], like.shape[-1])  # a slot's shape, less its token dimension
        self.dtype, self.device = like.dtype, like.device
        self.tensor: torch.Tensor | None = None
        self.views: list[torch.Tensor] = []  # each slot of ``tensor``
        self.held = 0  # the most tokens a slot was written up to (what growing copies)

    def fits(self, states: torch.Tensor) -> bool:
        """Whether ``states`` (one layer's keys or values) can live in a slot of this arena."""
        return (*states.shape[:-2], states.shape[-1]) == self.states and (states.dtype, states.device) == (
            self.dtype, self.device)

    def room(self, slot: int, end: int) -> torch.Tensor:
        """Slot ``slot``'s buffer, with room for ``end`` tokens at least."""
        if self.tensor is None or self.tensor.shape[-2] < end:
            room = max(end + end // 2, 64)
            grown = torch.empty((self.slots, *self.states[:-1], room, self.states[-1]), dtype=self.dtype,
                                device=self.device)
            if self.tensor is not None and self.held:
                grown.narrow(-2, 0, self.held).copy_(self.tensor.narrow(-2, 0, self.held))
            self.tensor, self.views = grown, list(grown.unbind(0))
        self.held = max(self.held, end)
        return self.views[slot]

    def move(self, source: int, to: int, count: int) -> None:
        """Copy every slot's entries ``source`` to ``source + count`` to ``to`` on."""
        if self.tensor is None:
            return
        moved = self.tensor.narrow(-2, source, count)
        # a run that overlaps its new place is read before it is written over
        self.tensor.narrow(-2, to, count).copy_(moved.clone() if source < to + count else moved)


class _Arenas:
    """The arenas of one cache of ``layers`` layers: one for the states of the shape the first
    layer's keys have (a slot each for every layer's keys and values), and one of a single slot
    for each layer's keys or values of another shape."""

    def __init__(self, layers: int) -> None:
        self.layers = layers
        self.all: list[_Arena] = []

    def place(self, slot: int, states: torch.Tensor) -> tuple[_Arena, int]:
        """Where slot ``slot`` (layer ``i``'s keys: ``2 * i``, its values: ``2 * i + 1``) of
        states like ``states`` lives: its arena and its slot there."""
        if not self.all:
            self.all.append(_Arena(2 * self.layers, states))
        if self.all[0].fits(states):
            return self.all[0], slot
        self.all.append(_Arena(1, states))
        return self.all[-1], 0


@functools.cache
def _growing_layer() -> type:
    """A plain growing cache layer whose entries live in slots of its cache's arenas
    (:class:`_Arena`). A forward writes its tokens' entries after the
    held ones, where transformers' own layer copies the whole layer into a new tensor (a
    copy of every entry each round, which grows with the context: an 8B-shaped layer at 2,000
    tokens, fp32 on this CPU, took 483 µs to take 6 tokens and crop them, against 7.7 µs
    here); and cropping -- every round that rejects
    a draft token -- moves the end, where transformers' slices each layer's keys and values
    anew (most of the host's time keeping a round's accepted branch). Between a crop
    and the next update ``keys`` and ``values`` still show the dropped entries;
    ``get_seq_length()`` is the length held (what transformers reads)."""

    class GrowingLayer(_dynamic_layer()):
        def __init__(self, arenas: _Arenas, index: int) -> None:
            super().__init__()
            self.length = 0
            self.arenas = arenas
            self.index = index
            self.places: tuple[tuple[_Arena, int], tuple[_Arena, int]] | None = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if self.places is None:  # set up here: lazy_initialization's arguments differ by release
                self.dtype, self.device = key_states.dtype, key_states.device
                self.is_initialized = True
                self.places = (self.arenas.place(2 * self.index, key_states),
                               self.arenas.place(2 * self.index + 1, value_states))
            start = self.length
            end = start + key_states.shape[-2]
            (key_arena, key_slot), (value_arena, value_slot) = self.places
            keys, values = key_arena.room(key_slot, end), value_arena.room(value_slot, end)
            keys.narrow(-2, start, end - start).copy_(key_states)
            values.narrow(-2, start, end - start).copy_(value_states)
            self.length = end
            self.keys, self.values = keys.narrow(-2, 0, end), values.narrow(-2, 0, end)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove > 0:
                raise ValueError(f"crop takes a negative count of tokens to remove, got {tokens_to_remove}")
            self.length = max(0, self.length + tokens_to_remove)

    return GrowingLayer


def _moves(path: list[int]) -> list[tuple[int, int, int]]:
    """How to move a kept branch's entries into place: ``(node, place, count)`` for each run of
    ``path`` (node indices, increasing) that is not in place already -- ``count`` consecutive
    nodes from ``node`` on, kept at ``place`` on. Each run's place lies before its first node
    and after the places of the runs before it, so moving the runs in order reads each before
    anything writes over it."""
    moves, start = [], 0
    for place in range(1, len(path) + 1):
        if place == len(path) or path[place] != path[place - 1] + 1:  # a run ends
            if path[start] != start:
                moves.append((path[start], start, place - start))
            start = place
    return moves


def tree_attention(model: torch.nn.Module) -> bool:
    """Whether ``model`` can verify a draft tree in one forward: its attention (SDPA, or eager
    from its modeling file) takes a custom 4-D mask and explicit positions, and every cache
    layer is a plain growing one whose entries can be moved (no sliding windows)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    attention = getattr(_text_config(model), "_attn_implementation", None)
    return (
        (attention == "sdpa" or (attention == "eager" and _eager_attention(model) is not None))
        and _takes(type(model), "position_ids")
        and bool(cache.layers)
        and all(type(layer) is _dynamic_layer() for layer in cache.layers)
    )


def _eager_attention(module: torch.nn.Module):
    """The eager attention function of a module's modeling file (every transformers model file
    defines one), or None."""
    return getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)


@functools.cache
def _takes(model_class: type, argument: str) -> bool:
    return argument in inspect.signature(model_class.forward).parameters


def _text_config(model: torch.nn.Module):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """How many leading items ``a`` and ``b`` share, at most ``limit``."""
    n = min(len(a), len(b), limit)
    if (a if len(a) == n else a[:n]) == (b if len(b) == n else b[:n]):  # the usual case, compared in C
        return n
    low, high = 0, n  # a[:low] == b[:low] and a[:high] != b[:high]: halve by slices compared in C
    while high - low > 16:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    while a[low] == b[low]:
        low += 1
    return low
