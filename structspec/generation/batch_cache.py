"""The KV cache of a batch of sequences: one packed sequence of slots, each row seeing its own.

Layout: every layer holds keys and values ``[1, heads, slots, dim]``, the entries of every row
side by side. A row's cached tokens are a list of slots (``slots[row]``, in sequence order), and
``visible[row]`` marks them. A step feeds every row's tokens one after the other as a single
sequence (no padding) and gives each fed token its row's position for it (the row's length plus
its depth in the row's draft tree) and its own mask row: the slots its row sees, and its
ancestors among its row's fed tokens. Afterwards each row keeps the slots of the tokens it
accepted, wherever they lie in its tree; the rest are holes no row sees. Nothing moves: a
row that leaves only stops seeing its slots. When holes are more than half of the slots, the
cache is compacted once for all rows (the live slots gathered to the front, in order).

Rows that share a prompt prefix share its slots: a joining row starts out holding the longest
prefix of its prompt that any row holds, which it sees in place, so prompts with the same
instructions and schema pay for them once, in compute and in memory. The rest of its prompt is
fed with its first round, in the step's one forward with every other row's tokens: no forward
of its own, and the running rows do not wait for one.

Why packed rather than padded: rows draft different numbers of tokens each round (a long
forced run in one row, nothing in the next), and padding every row to the widest feed made a
step cost several times the compute of the tokens actually fed; a CPU pays for every padded
position. Packed, a step costs the tokens fed plus attention over the slots. Keys carry their
rotary position already, so where a slot lies does not matter to attention: only the mask and
the positions fed do.

Needs what a draft tree needs (:func:`~structspec.generation.cache.tree_attention`): attention
that takes a 4-D mask and explicit positions, and plain growing cache layers.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from structspec.generation.cache import _takes, common_prefix, vocabulary_rows

Feed = tuple[list[int], list[int], int]
"""A row's part of a forward: tokens, each token's parent in the feed (-1: the row's cached
tokens; parents come first), and how many logits rows it needs (those of its last tokens)."""


class BatchCache:
    """Rows of cached tokens in one packed KV cache; see the module docstring for the layout.

    :meth:`add` appends rows, :meth:`logits` runs one forward over every row, :meth:`keep` says
    which fed tokens each row keeps, :meth:`retain` drops rows."""

    def __init__(self, model: torch.nn.Module, width: int) -> None:
        self.model = model
        self.width = width
        self.device = next(model.parameters()).device
        self.cache = self._empty()
        self.slots: list[list[int]] = []  # each row's slots, in sequence order
        self.tokens: list[list[int]] = []  # each row's cached tokens
        self.visible = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # [rows, slots]
        self._cache_arg = "cache" if _takes(type(model), "cache") else "past_key_values"
        self._keep_arg = _takes(type(model), "logits_to_keep")
        self._fed: list[tuple[int, list[int]]] = []  # the last forward's first slot and tokens, per row
        self.slack = 64  # holes tolerated beyond the live slots before compacting

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def size(self) -> int:
        """Slots in the cache, live or holes."""
        return int(self.visible.shape[1])

    def add(self, prefixes: list[list[int]]) -> None:
        """Append one row per prefix. A new row holds the longest part of its prefix that a row
        holds already (those slots, shared and seen in place); the rest is not encoded here but
        fed with the row's first :meth:`logits`, in the same forward as the other rows' tokens."""
        for prefix in prefixes:
            shared, source = self.held(prefix)
            self.slots.append(self.slots[source][:shared] if shared else [])
            self.tokens.append(list(prefix[:shared]))
        self._see(self.size)

    def held(self, tokens: list[int]) -> tuple[int, int]:
        """The length of the longest prefix of ``tokens`` that a row holds, and that row (-1: none)."""
        shared, source = 0, -1
        for row, cached in enumerate(self.tokens):
            n = common_prefix(cached, tokens, len(tokens))
            if n > shared:
                shared, source = n, row
        return shared, source

    def logits(self, feeds: list[Feed]) -> list[torch.Tensor]:
        """One forward over every row (``feeds[i]`` for row ``i``, at least one token each);
        returns each row's float32 CPU logits ``[n_out, width]`` after its last ``n_out`` fed
        tokens. Each token attends to its row's cached tokens and its ancestors in the feed,
        at the position of the row's length plus its depth. Call :meth:`keep` for every row
        before the next forward."""
        if len(feeds) != len(self.slots):
            raise ValueError(f"{len(feeds)} feeds for {len(self.slots)} rows")
        size = self.size
        total = sum(len(tokens) for tokens, _, _ in feeds)
        ids = np.zeros(total, dtype=np.int64)
        positions = np.zeros(total, dtype=np.int64)
        seen = np.zeros((total, total), dtype=np.bool_)
        owner = np.zeros(total, dtype=np.int64)
        self._fed, at = [], 0
        for row, (tokens, parents, _) in enumerate(feeds):
            n = len(tokens)
            ids[at : at + n] = tokens
            positions[at : at + n] = len(self.slots[row]) + _ancestry(parents, seen[at : at + n, at : at + n])
            owner[at : at + n] = row
            self._fed.append((size + at, tokens))
            at += n
        owners = torch.from_numpy(owner).to(self.device)
        allowed = torch.cat([self.visible.index_select(0, owners), torch.from_numpy(seen).to(self.device)], dim=1)
        wanted = torch.tensor([first - size + i for (first, tokens), (_, _, n_out) in zip(self._fed, feeds, strict=True)
                               for i in range(len(tokens) - n_out, len(tokens))], device=self.device)
        # only the wanted positions go through the output layer (a prompt fed with its row's
        # first round needs one; that layer is about half a small model's compute per token)
        keep = {"logits_to_keep": wanted} if self._keep_arg else {}
        with torch.no_grad():
            out = self.model(
                input_ids=torch.from_numpy(ids).to(self.device)[None],
                attention_mask=self._mask(allowed),
                position_ids=torch.from_numpy(positions).to(self.device)[None],
                use_cache=True,
                **{self._cache_arg: self.cache},
                **keep,
            )
        self._see(size + total)
        flat = vocabulary_rows(out.logits[0] if self._keep_arg else out.logits[0, wanted], self.width)
        return list(flat.split([n_out for _, _, n_out in feeds]))

    def keep(self, row: int, kept: list[int]) -> None:
        """After :meth:`logits`: ``row`` keeps the fed tokens ``kept`` (indices into its feed, in
        sequence order: a path from the feed's root); its other fed tokens become holes."""
        first, fed = self._fed[row]
        columns = [first + i for i in kept]
        self.slots[row] += columns
        self.tokens[row] += [fed[i] for i in kept]
        if columns:
            self.visible[row, columns] = True

    def retain(self, rows: list[int]) -> None:
        """Keep only ``rows``, in that order (their slots stay where they are)."""
        self.slots = [self.slots[row] for row in rows]
        self.tokens = [self.tokens[row] for row in rows]
        self.visible = self.visible[torch.tensor(rows, dtype=torch.long, device=self.device)]
        self.tidy()

    def tidy(self) -> None:
        """Compact the cache when holes outnumber the live slots (by more than :attr:`slack`):
        the live slots, in order, gathered to the front of every layer."""
        live = sorted({slot for slots in self.slots for slot in slots})
        if self.size <= 2 * len(live) + self.slack:
            return
        if not live:
            self.cache = self._empty()
        else:
            index = torch.tensor(live, dtype=torch.long, device=self.device)
            for layer in self.cache.layers:
                if layer.is_initialized and layer.keys.numel():
                    layer.keys = layer.keys.index_select(2, index)
                    layer.values = layer.values.index_select(2, index)
        moved = {slot: i for i, slot in enumerate(live)}
        self.slots = [[moved[slot] for slot in slots] for slots in self.slots]
        self.visible = torch.zeros(0, 0, dtype=torch.bool, device=self.device)
        self._see(len(live))

    def _see(self, size: int) -> None:
        """Grow :attr:`visible` to ``size`` slots and mark every row's slots (new rows included)."""
        grown = torch.zeros(len(self.slots), size, dtype=torch.bool, device=self.device)
        old = self.visible
        grown[: old.shape[0], : old.shape[1]] = old
        for row in range(old.shape[0], len(self.slots)):
            if self.slots[row]:
                grown[row, self.slots[row]] = True
        self.visible = grown

    def _empty(self):
        """A cache whose layers write new entries into room kept for them (see :func:`_growing_layer`)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        cache.layers = [_growing_layer()() for _ in cache.layers]
        return cache

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """``allowed`` ``[queries, keys]`` as the 4-D additive mask the attention takes (SDPA
        and eager both do; SDPA runs faster with it than with a boolean one on the CPU)."""
        dtype = next(self.model.parameters()).dtype
        blocked = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        return blocked.masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]


def _ancestry(parents: list[int], seen: np.ndarray) -> np.ndarray:
    """Fill ``seen[i, j]`` (fed token ``i`` attends to fed token ``j``) for a feed whose token
    ``i`` follows ``parents[i]``; returns each token's depth."""
    n = len(parents)
    if all(parent == i - 1 for i, parent in enumerate(parents)):
        seen[:, :] = np.tri(n, dtype=np.bool_)
        return np.arange(n)
    depth = np.zeros(n, dtype=np.int64)
    for i, parent in enumerate(parents):
        if parent >= 0:
            seen[i] = seen[parent]
            depth[i] = depth[parent] + 1
        seen[i, i] = True
    return depth


@functools.cache
def _growing_layer() -> type:
    """A plain cache layer whose keys and values sit at the front of buffers with room to grow:
    a forward writes its entries in place rather than copying the whole layer into a new tensor
    (what ``DynamicLayer.update`` does), and the room doubles when it runs out. Keys and values
    handed to attention are views of the buffers; a layer given new tensors (compaction) takes
    them as its buffers at the next update. (A class made on first use: transformers is
    imported only when a model is.)"""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            have, add = (self.keys.shape[-2] if self.keys.dim() == 4 else 0), key_states.shape[-2]
            buffers = getattr(self, "_buffers", None)
            if buffers is None or buffers[0].data_ptr() != self.keys.data_ptr() or have + add > buffers[0].shape[-2]:
                room = max(2 * (have + add), 256)
                buffers = tuple(t.new_empty((*t.shape[:-2], room, t.shape[-1])) for t in (key_states, value_states))
                if have:
                    buffers[0][..., :have, :] = self.keys
                    buffers[1][..., :have, :] = self.values
                self._buffers = buffers
            buffers[0][..., have : have + add, :] = key_states
            buffers[1][..., have : have + add, :] = value_states
            self.keys, self.values = buffers[0][..., : have + add, :], buffers[1][..., : have + add, :]
            return self.keys, self.values

    return GrowingLayer
