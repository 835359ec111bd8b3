"""The KV cache of a batch of sequences of different lengths, each at its own positions.

Layout: every layer holds keys and values ``[rows, heads, slots, dim]``. A row's cached tokens
sit in some of the slots (``slots[row]``, in sequence order); the other slots are holes that
its attention mask leaves out. A forward appends the same number of slots to every row -- the
widest row's feed -- and gives each fed token its own position (the row's length plus its
depth in the row's draft tree) and its own mask row: the row's live slots, and its ancestors
in the feed. Afterwards each row keeps the slots of the tokens it accepted, wherever they lie
in its tree, and the rest become holes: nothing moves. When holes pile up, or rows leave, the
cache is compacted once for all rows: each kept row's live slots gathered to the front, in order.

Why not left padding: rows accept different numbers of draft tokens each round, and a row's
accepted branch may lie off its draft's main line, so a left-aligned layout would shift every
row's entries every round. Keys carry their rotary position already, so where a slot lies
does not matter to attention: only the mask and the positions fed do.

Needs what a draft tree needs (:func:`~structspec.generation.cache.tree_attention`): attention
that takes a 4-D mask and explicit positions, and plain growing cache layers.
"""

from __future__ import annotations

import numpy as np
import torch

from structspec.generation.cache import _takes, _text_config, common_prefix, vocabulary_rows

Feed = tuple[list[int], list[int], int]
"""A row's part of a forward: tokens, each token's parent in the feed (-1: the row's cached
tokens; parents come first), and how many logits rows it needs (those of its last tokens)."""


class BatchCache:
    """Rows of cached tokens in one KV cache; see the module docstring for the layout.

    :meth:`add` appends rows, :meth:`logits` runs one forward over every row, :meth:`keep` says
    which fed tokens each row keeps, :meth:`retain` drops rows."""

    def __init__(self, model: torch.nn.Module, width: int) -> None:
        self.model = model
        self.width = width
        self.device = next(model.parameters()).device
        self.cache = self._empty()
        self.valid = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # [rows, slots]: live entries
        self.slots: list[list[int]] = []  # each row's slots, in sequence order
        self.tokens: list[list[int]] = []  # each row's cached tokens
        self._cache_arg = "cache" if _takes(type(model), "cache") else "past_key_values"
        self._additive_mask = getattr(_text_config(model), "_attn_implementation", None) == "eager"
        self._fed: list[list[int]] = []  # the last forward's feeds
        self._offset = 0  # slots before the last forward

    def __len__(self) -> int:
        return len(self.slots)

    @property
    def size(self) -> int:
        """Slots per row, live or not."""
        return int(self.valid.shape[1])

    def add(self, prefixes: list[list[int]]) -> None:
        """Append one row per prefix, holding its tokens. The longest prefix that a row already
        holds (or a row added in the same call) is copied rather than encoded again: prompts
        that share their instructions and schema pay for them once."""
        encoded: list[tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]] | None]] = []
        for prefix in prefixes:
            encoded.append((list(prefix), self._encode(prefix, encoded)))
        self._append(encoded)

    def logits(self, feeds: list[Feed]) -> list[torch.Tensor]:
        """One forward over every row (``feeds[i]`` for row ``i``, at least one token each);
        returns each row's float32 CPU logits ``[n_out, width]`` after its last ``n_out`` fed
        tokens. Each token attends to its row's cached tokens and its ancestors in the feed,
        at the position of the row's length plus its depth. Call :meth:`keep` for every row
        before the next forward."""
        rows, size = len(self.slots), self.size
        if len(feeds) != rows:
            raise ValueError(f"{len(feeds)} feeds for {rows} rows")
        fed = max(len(tokens) for tokens, _, _ in feeds)
        ids = np.zeros((rows, fed), dtype=np.int64)
        positions = np.zeros((rows, fed), dtype=np.int64)
        seen = np.broadcast_to(np.eye(fed, dtype=np.bool_), (rows, fed, fed)).copy()  # pads see themselves
        for row, (tokens, parents, _) in enumerate(feeds):
            n, base = len(tokens), len(self.slots[row])
            ids[row, :n] = tokens
            positions[row, :] = base
            positions[row, :n] += _ancestry(parents, seen[row])
        allowed = torch.cat(
            [self.valid[:, None, :].expand(rows, fed, size), torch.from_numpy(seen).to(self.device)], dim=2
        )
        with torch.no_grad():
            out = self.model(
                input_ids=torch.from_numpy(ids).to(self.device),
                attention_mask=self._mask(allowed),
                position_ids=torch.from_numpy(positions).to(self.device),
                use_cache=True,
                **{self._cache_arg: self.cache},
            )
        self.valid = torch.cat([self.valid, torch.zeros(rows, fed, dtype=torch.bool, device=self.device)], dim=1)
        self._offset, self._fed = size, [tokens for tokens, _, _ in feeds]
        row_index = [row for row, (tokens, _, n_out) in enumerate(feeds) for _ in range(n_out)]
        column = [i for tokens, _, n_out in feeds for i in range(len(tokens) - n_out, len(tokens))]
        flat = vocabulary_rows(out.logits[row_index, column], self.width)
        return list(flat.split([n_out for _, _, n_out in feeds]))

    def keep(self, row: int, kept: list[int]) -> None:
        """After :meth:`logits`: ``row`` keeps the fed tokens ``kept`` (indices into its feed, in
        sequence order: a path from the feed's root); its other fed tokens become holes."""
        fed = self._fed[row]
        columns = [self._offset + i for i in kept]
        self.slots[row] += columns
        self.tokens[row] += [fed[i] for i in kept]
        if columns:
            self.valid[row, columns] = True

    def retain(self, rows: list[int] | None = None) -> None:
        """Keep only ``rows`` (all when None), in that order, and compact the slots: each row's
        live entries gathered to the front, in sequence order."""
        rows = list(range(len(self.slots))) if rows is None else rows
        lengths = [len(self.slots[row]) for row in rows]
        longest = max(lengths, default=0)
        index = torch.zeros(len(rows), longest, dtype=torch.long)
        for i, row in enumerate(rows):
            index[i, : lengths[i]] = torch.tensor(self.slots[row], dtype=torch.long)
        index = index.to(self.device)
        picked = torch.tensor(rows, dtype=torch.long, device=self.device)
        if not rows:
            self.cache = self._empty()
        for layer in self.cache.layers if rows else ():
            if layer.is_initialized and layer.keys.numel():
                gather = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
                layer.keys = layer.keys.index_select(0, picked).gather(2, gather)
                layer.values = layer.values.index_select(0, picked).gather(2, gather)
        self.valid = torch.arange(longest, device=self.device)[None, :] < torch.tensor(lengths, device=self.device)[
            :, None
        ] if rows else torch.zeros(0, 0, dtype=torch.bool, device=self.device)
        self.slots = [list(range(n)) for n in lengths]
        self.tokens = [self.tokens[row] for row in rows]

    def tidy(self) -> None:
        """Compact when holes take more than half the slots (and more than a few)."""
        longest = max((len(slots) for slots in self.slots), default=0)
        if self.size > 2 * longest + 64:
            self.retain()

    def _empty(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _encode(self, prefix: list[int], encoded: list) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """Keys and values ``[1, heads, len(prefix), dim]`` per layer of ``prefix`` (None when
        empty): the longest part some row already holds is copied, the rest encoded."""
        if not prefix:
            return None
        shared, source = 0, None
        for row, tokens in enumerate(self.tokens):
            n = common_prefix(tokens, prefix, len(prefix))
            if n > shared:
                shared, source = n, ("row", row)
        for i, (tokens, entries) in enumerate(encoded):
            n = common_prefix(tokens, prefix, len(prefix)) if entries is not None else 0
            if n > shared:
                shared, source = n, ("new", i)
        single = self._empty()
        if source is not None:
            for layer, (keys, values) in enumerate(self._entries(source, shared, encoded)):
                single.update(keys, values, layer)
        if shared < len(prefix):
            with torch.no_grad():
                self.model(
                    input_ids=torch.tensor([prefix[shared:]], device=self.device),
                    use_cache=True,
                    logits_to_keep=1,
                    **{self._cache_arg: single},
                )
        return [(layer.keys, layer.values) for layer in single.layers]

    def _entries(self, source: tuple[str, int], n: int, encoded: list) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The first ``n`` tokens' keys and values of a batch row or of a row being added."""
        kind, at = source
        if kind == "new":
            return [(keys[:, :, :n], values[:, :, :n]) for keys, values in encoded[at][1]]
        index = torch.tensor(self.slots[at][:n], dtype=torch.long, device=self.device)
        return [
            (layer.keys[at : at + 1].index_select(2, index), layer.values[at : at + 1].index_select(2, index))
            for layer in self.cache.layers
        ]

    def _append(self, encoded: list) -> None:
        """Add rows whose entries were encoded alone: every tensor padded to the longest, then
        concatenated along the batch."""
        if not encoded:
            return
        size = max([self.size, *(len(tokens) for tokens, _ in encoded)])
        template = next((entries for _, entries in encoded if entries is not None), None)
        for index, layer in enumerate(self.cache.layers):
            old = (layer.keys, layer.values) if layer.is_initialized and layer.keys.numel() else None
            like = old if old is not None else (template[index] if template is not None else None)
            if like is None:
                continue  # nothing cached anywhere yet
            parts: list[tuple[torch.Tensor, torch.Tensor]] = []
            if old is not None:
                parts.append(old)
            elif len(self.slots):
                parts.append(tuple(_blank(t, len(self.slots), 0) for t in like))
            for _, entries in encoded:
                parts.append(entries[index] if entries is not None else tuple(_blank(t, 1, 0) for t in like))
            keys = torch.cat([_pad(k, size) for k, _ in parts], dim=0)
            values = torch.cat([_pad(v, size) for _, v in parts], dim=0)
            if not layer.is_initialized:
                layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
        lengths = torch.tensor([len(tokens) for tokens, _ in encoded], device=self.device)
        new_valid = torch.arange(size, device=self.device)[None, :] < lengths[:, None]
        old_valid = torch.nn.functional.pad(self.valid, (0, size - self.size))
        self.valid = torch.cat([old_valid, new_valid], dim=0)
        for tokens, _ in encoded:
            self.slots.append(list(range(len(tokens))))
            self.tokens.append(tokens)

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """``allowed`` ``[rows, queries, keys]`` as the 4-D mask the attention takes: boolean
        for SDPA, additive for eager attention."""
        allowed = allowed[:, None]
        if not self._additive_mask:
            return allowed
        dtype = next(self.model.parameters()).dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=self.device).masked_fill(~allowed, torch.finfo(dtype).min)


def _ancestry(parents: list[int], seen: np.ndarray) -> np.ndarray:
    """Fill ``seen[i, j]`` (node ``i`` attends to node ``j``) for a feed whose node ``i`` follows
    ``parents[i]``; returns each node's depth."""
    n = len(parents)
    if all(parent == i - 1 for i, parent in enumerate(parents)):
        seen[:n, :n] = np.tri(n, dtype=np.bool_)
        return np.arange(n)
    depth = np.zeros(n, dtype=np.int64)
    for i, parent in enumerate(parents):
        if parent >= 0:
            seen[i, :n] = seen[parent, :n]
            depth[i] = depth[parent] + 1
        seen[i, i] = True
    return depth


def _blank(like: torch.Tensor, rows: int, slots: int) -> torch.Tensor:
    """Zeros shaped like ``like`` but with ``rows`` rows and ``slots`` slots."""
    return like.new_zeros((rows, like.shape[1], slots, like.shape[3]))


def _pad(tensor: torch.Tensor, size: int) -> torch.Tensor:
    """``tensor`` with holes appended along the slots up to ``size``."""
    missing = size - tensor.shape[2]
    return tensor if not missing else torch.cat([tensor, _blank(tensor, tensor.shape[0], missing)], dim=2)
