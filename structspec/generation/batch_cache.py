"""The KV cache of a batch of sequences: a cache row per sequence, attention per row.

Layout: every layer holds keys and values ``[rows, heads, columns, dim]``; row ``r``'s cached
tokens fill its columns ``0 .. len(tokens[r]) - 1`` in sequence order, so a token's column is
its position. A step feeds every row's tokens one after the other as a single sequence (no
padding) through the model's linear layers, giving each fed token its row's position for it
(the row's length plus its depth in the row's draft tree). Each layer writes the fed tokens'
keys and values into their rows after the cached ones (:func:`_row_layer`), and attention runs
per row (:func:`_row_attention`): each row's fed tokens attend to its own columns only -- its
cached tokens, then their ancestors among its fed tokens. The rows' queries form one padded
block, less any feed much longer than the others (a prompt fed with its row's first round, a
long forced run), attended on its own so that the others are not padded to its length.
Afterwards each row keeps the fed tokens it accepted (moved into place when its draft tree
took a branch off the main line); the next step overwrites the rest.
A row that leaves frees its cache row for the next one to join; nothing else moves.

Rows that share a prompt prefix: a joining row starts out holding the longest prefix of its
prompt that any row holds, copied from that row's columns, so prompts with the same
instructions and schema are computed once. The rest of its prompt is fed with its first
round, in the step's one forward with every other row's tokens: no forward of its own, and
the running rows do not wait for one.

Why this layout. Feeds stay packed because rows draft different numbers of tokens each round
(a long forced run in one row, nothing in the next): padding every row to the widest feed
made a step cost several times the compute of the tokens fed, and a CPU pays for every padded
position in the linear layers, which are most of a forward. Attention is per row because in
one packed cache (the previous layout: every row's entries side by side, each token masked to
its own) every fed token attended over the whole batch's entries, most of them masked out: at
8 rows of ~250 tokens, a token's attention read 1,000-1,400 entries for the ~250 it may see,
and the waste grows with the batch (32 rows on a GPU) and the length of the rows.

Needs what a draft tree needs (:func:`~structspec.generation.cache.tree_attention`): attention
that takes a 4-D mask and explicit positions, and plain growing cache layers; and an attention
module that calls the function its config names (every transformers model does), since the
step swaps in the per-row one for its forward.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from structspec.generation.cache import _eager_attention, _takes, _text_config, common_prefix
from structspec.generation.logit_rows import LogitRows

Feed = tuple[list[int], list[int], int]
"""A row's part of a forward: tokens, each token's parent in the feed (-1: the row's cached
tokens; parents come first), and how many logits rows it needs (those of its last tokens)."""

LAYOUT = "structspec_rows"
"""The keyword that carries a step's :class:`_Layout` through the model to its attention."""

KEPT_ROWS = 2
"""Cache rows kept after their sequences leave (the latest), for the prompts that join later to
share: a server's next request under the same instructions and schema, one after the other,
copies their entries instead of computing them again."""

ALONE_GAIN = 16
"""The padded query positions that attending a long feed on its own must save the other rows
before it is split off: one attention call more per layer against the padding. On the CPU (demo
target, steps of 8-16 rows of ~250 tokens, a scratch script timing ``logits``): 16 rows of one
token each, as plain decoding feeds them, cost 8.4 ms a step as one padded block against 11.5
ms with every row attended alone, and speculative feeds of 1-16 tokens cost the same either way
(10.2-11.3 ms); both against 11-18 ms for the one packed cache of the previous layout. On an
accelerator, where padding costs nothing until the device is busy, a larger gain may pay; not
measured (no GPU in this work)."""


@dataclass
class _Group:
    """Rows attended together: cache rows ``rows``, each with ``depth`` query slots (its fed
    tokens, then padding), over their first ``columns`` columns."""

    rows: slice
    depth: int
    columns: int
    queries: torch.Tensor  # [rows * depth]: each slot's fed token (padding: token 0)
    mask: torch.Tensor  # [rows, 1, depth, columns], additive


@dataclass
class _Layout:
    """One step's shape, read by every layer: where each fed token's keys go and how its
    attention is computed."""

    rows: torch.Tensor  # [fed]: each fed token's row
    columns: torch.Tensor  # [fed]: and column
    height: int  # rows in the batch
    width: int  # columns any row attends
    groups: list[_Group]
    back: torch.Tensor  # [fed]: each fed token's slot in the groups' outputs, one after the other
    in_order: bool  # one group whose slots are the fed tokens in order: nothing to gather
    lone_row: tuple[int, int] | None  # the one row fed, if one: its place and first column (one slice)


class BatchCache:
    """Rows of cached tokens, a cache row each; see the module docstring for the layout.

    :meth:`add` appends rows, :meth:`logits` runs one forward over every row, :meth:`keep` says
    which fed tokens each row keeps, :meth:`retain` drops rows."""

    def __init__(self, model: torch.nn.Module, width: int) -> None:
        from transformers import DynamicCache

        self.model = model
        self.width = width
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.cache.layers = [_row_layer()() for _ in self.cache.layers]
        self.tokens: list[list[int]] = []  # each row's cached tokens
        self.places: list[int] = []  # each row's row in the cache layers (a leaving row's is reused)
        self.kept: list[tuple[list[int], int]] = []  # rows that left, kept to share: tokens and place
        self._cache_arg = "cache" if _takes(type(model), "cache") else "past_key_values"
        self._keep_arg = _takes(type(model), "logits_to_keep")
        self._fed: list[tuple[int, list[int]]] = []  # the last forward's tokens, and the row's length before
        self._dtype = next(model.parameters()).dtype
        self.alone_gain = ALONE_GAIN

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, prefixes: list[list[int]]) -> None:
        """Append one row per prefix. A new row holds the longest part of its prefix that a row
        holds already (copied from that row); the rest is not encoded here but fed with the
        row's first :meth:`logits`, in the same forward as the other rows' tokens."""
        for prefix in prefixes:
            shared, source = self.held(prefix)
            taken = set(self.places) | {place for _, place in self.kept}
            place = min(set(range(len(taken) + 1)) - taken)
            self.tokens.append(list(prefix[:shared]))
            self.places.append(place)
            for layer in self._layers():
                layer.copy_prefix(source, place, shared)

    def held(self, tokens: list[int]) -> tuple[int, int]:
        """The length of the longest prefix of ``tokens`` that a row holds (or a row that left
        and is kept, see :data:`KEPT_ROWS`), and that row's place in the cache (-1: none)."""
        shared, source = 0, -1
        for cached, place in [*zip(self.tokens, self.places, strict=True), *self.kept]:
            n = common_prefix(cached, tokens, len(tokens))
            if n > shared:
                shared, source = n, place
        return shared, source

    def logits(self, feeds: list[Feed]) -> list[LogitRows]:
        """One forward over every row (``feeds[i]`` for row ``i``, at least one token each);
        returns each row's logits ``[n_out, width]`` after its last ``n_out`` fed tokens. Each
        token attends to its row's cached tokens and its ancestors in the feed, at the position
        of the row's length plus its depth. Call :meth:`keep` for every row
        before the next forward."""
        if len(feeds) != len(self.tokens):
            raise ValueError(f"{len(feeds)} feeds for {len(self.tokens)} rows")
        total = sum(len(tokens) for tokens, _, _ in feeds)
        ids = np.zeros(total, dtype=np.int64)
        positions = np.zeros(total, dtype=np.int64)
        rows = np.zeros(total, dtype=np.int64)
        seen: list[np.ndarray] = []
        starts: list[int] = []  # where each row's feed starts in the packed sequence
        self._fed, at = [], 0
        for row, (tokens, parents, _) in enumerate(feeds):
            n, length = len(tokens), len(self.tokens[row])
            starts.append(at)
            ids[at : at + n] = tokens
            seen.append(np.zeros((n, n), dtype=np.bool_))
            positions[at : at + n] = length + _ancestry(parents, seen[-1])
            rows[at : at + n] = self.places[row]
            self._fed.append((length, tokens))
            at += n
        layout = self._layout(rows, starts, seen)
        for layer in self.cache.layers:
            layer.layout = layout
        wanted = torch.tensor([start + i for start, (tokens, _, n_out) in zip(starts, feeds, strict=True)
                               for i in range(len(tokens) - n_out, len(tokens))], device=self.device)
        # only the wanted positions go through the output layer (a prompt fed with its row's
        # first round needs one; that layer is about half a small model's compute per token)
        keep = {"logits_to_keep": wanted} if self._keep_arg else {}
        with torch.no_grad(), _attention_per_row(self.model):
            out = self.model(
                input_ids=torch.from_numpy(ids).to(self.device)[None],
                position_ids=torch.from_numpy(positions).to(self.device)[None],
                use_cache=True,
                **{self._cache_arg: self.cache, LAYOUT: layout},
                **keep,
            )
        flat = LogitRows(out.logits[0] if self._keep_arg else out.logits[0, wanted], self.width)
        return flat.split([n_out for _, _, n_out in feeds])

    def keep(self, row: int, kept: list[int]) -> None:
        """After :meth:`logits`: ``row`` keeps the fed tokens ``kept`` (indices into its feed, in
        sequence order: a path from the feed's root); the others are dropped."""
        length, fed = self._fed[row]
        if kept != list(range(len(kept))):
            source = torch.tensor([length + i for i in kept], device=self.device)
            for layer in self._layers():
                layer.move(self.places[row], source, length)
        self.tokens[row] += [fed[i] for i in kept]

    def retain(self, rows: list[int]) -> None:
        """Keep only ``rows``, in that order (nothing moves). The latest :data:`KEPT_ROWS` rows
        to leave stay in the cache for later rows to share; the others' cache rows go to rows
        that join later."""
        staying = set(rows)
        self.kept += [(self.tokens[row], self.places[row]) for row in range(len(self.tokens)) if row not in staying]
        del self.kept[: max(0, len(self.kept) - KEPT_ROWS)]
        self.tokens = [self.tokens[row] for row in rows]
        self.places = [self.places[row] for row in rows]

    def _layers(self) -> Iterator:
        """The cache layers that hold entries (none before the first forward)."""
        return (layer for layer in self.cache.layers if layer.is_initialized)

    def _layout(self, rows: np.ndarray, starts: list[int], seen: list[np.ndarray]) -> _Layout:
        """The step's :class:`_Layout`: fed token ``i`` goes to cache row ``rows[i]``. Row ``r``'s
        feed starts at ``starts[r]`` and goes to its columns after its cached ones, in feed
        order; ``seen[r][i, j]``: its fed token ``i`` sees its fed token ``j``. Cache rows no row
        holds now are padding."""
        lengths = [len(tokens) for tokens in self.tokens]
        fed = [len(s) for s in seen]
        columns = np.concatenate([np.arange(length, length + n) for length, n in zip(lengths, fed, strict=True)])
        alone = _attended_alone(fed, self.alone_gain)
        together = [r for r in range(len(fed)) if r not in alone]
        height = max(self.places) + 1
        groups: list[_Group] = []
        back = np.zeros(len(rows), dtype=np.int64)
        offset = 0
        spans = [(together, slice(0, height))] + [([r], slice(self.places[r], self.places[r] + 1)) for r in alone]
        for members, span in spans:
            if not members:
                continue
            depth = max(fed[r] for r in members)
            width = max(lengths[r] + fed[r] for r in members)
            rows_in = span.stop - span.start
            queries = np.zeros((rows_in, depth), dtype=np.int64)
            allowed = np.zeros((rows_in, depth, width), dtype=np.bool_)
            allowed[:, :, 0] = True  # padding sees column 0 (a row's first token, cached or fed)
            for r in members:
                at, n, length = self.places[r] - span.start, fed[r], lengths[r]
                queries[at, :n] = starts[r] + np.arange(n)
                allowed[at, :n, :length] = True
                allowed[at, :n, length : length + n] = seen[r]
                back[starts[r] : starts[r] + n] = offset + at * depth + np.arange(n)
            offset += rows_in * depth
            mask = torch.zeros(allowed.shape, dtype=self._dtype)
            mask.masked_fill_(torch.from_numpy(~allowed), torch.finfo(self._dtype).min)
            groups.append(_Group(span, depth, width, torch.from_numpy(queries.reshape(-1)).to(self.device),
                                 mask[:, None].to(self.device)))
        in_order = len(groups) == 1 and offset == len(rows) and bool((back == np.arange(len(rows))).all())
        lone = (self.places[0], lengths[0]) if len(fed) == 1 else None
        return _Layout(torch.from_numpy(rows).to(self.device), torch.from_numpy(columns).to(self.device),
                       height, max(length + n for length, n in zip(lengths, fed, strict=True)), groups,
                       torch.from_numpy(back).to(self.device), in_order, lone)


def _attended_alone(fed: list[int], gain: int) -> list[int]:
    """The rows whose feeds are attended on their own: the longest, one by one, while splitting
    it off saves the rest at least ``gain`` padded query positions."""
    order = sorted(range(len(fed)), key=lambda r: -fed[r])
    alone: list[int] = []
    while len(order) - len(alone) > 1:
        top, following = order[len(alone)], order[len(alone) + 1]
        if (len(fed) - 1) * (fed[top] - fed[following]) < gain:
            break
        alone.append(top)
    if len(alone) == len(fed) - 1:  # the last one too: a block of one row pads the others
        alone.append(order[-1])
    return sorted(alone)


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


@contextmanager
def _attention_per_row(model: torch.nn.Module) -> Iterator[None]:
    """Run the model's attention through :func:`_row_attention` for the block. The swapped-in
    name falls back to the model's own attention in a call without a layout (another thread's
    forward of the same model), so the swap is safe to overlap."""
    config = _text_config(model)
    own = config._attn_implementation
    config._attn_implementation = _registered(own)
    try:
        yield
    finally:
        config._attn_implementation = own


@functools.cache
def _registered(own: str) -> str:
    """The name of the per-row attention over ``own`` (``sdpa`` or ``eager``), registered once."""
    from transformers import AttentionInterface

    name = f"structspec_rows_{own}"
    AttentionInterface.register(name, functools.partial(_row_attention, own))
    return name


def _row_attention(own: str, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs):
    """Attention per row: ``query`` ``[1, heads, fed, dim]`` packed, ``key`` and ``value`` the
    rows' ``[rows, kv heads, columns, dim]`` (see :class:`_RowLayer`); each group of rows of the
    step's layout runs the model's own attention (``own``) over a padded block of its queries.
    Returns ``[1, fed, heads, dim]`` as every attention function does."""
    attend = _own_attention(own, module)
    layout: _Layout | None = kwargs.pop(LAYOUT, None)
    if layout is None:
        return attend(module, query, key, value, attention_mask, **kwargs)
    if layout.in_order:  # the fed tokens are the block's slots as they are
        group = layout.groups[0]
        height = group.rows.stop - group.rows.start
        block = query.view(query.shape[1], height, group.depth, query.shape[-1]).transpose(0, 1)
        out, _ = attend(module, block, key[group.rows, :, : group.columns], value[group.rows, :, : group.columns],
                        group.mask, **kwargs)
        return out.reshape(1, height * group.depth, *out.shape[2:]), None
    packed = query[0].transpose(0, 1)  # [fed, heads, dim]
    outputs = []
    for group in layout.groups:
        height = group.rows.stop - group.rows.start
        block = packed.index_select(0, group.queries).view(height, group.depth, *packed.shape[1:]).transpose(1, 2)
        out, _ = attend(module, block, key[group.rows, :, : group.columns], value[group.rows, :, : group.columns],
                        group.mask, **kwargs)
        outputs.append(out.reshape(height * group.depth, *out.shape[2:]))
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return out.index_select(0, layout.back)[None], None


def _own_attention(own: str, module: torch.nn.Module):
    """The attention function a model runs under ``own``: transformers' SDPA one, or the eager
    one its modeling file defines."""
    if own == "sdpa":
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward
    return _eager_attention(module)  # there, as tree_attention checked


@functools.cache
def _row_layer() -> type:
    """A cache layer of rows (a class made on first use: transformers is imported only when a
    model is)."""
    from transformers.cache_utils import DynamicLayer

    class RowLayer(DynamicLayer):
        """Keys and values ``[rows, kv heads, columns, dim]`` at the front of buffers with room
        to grow (as many rows as asked for, columns doubled when short; new room is zero, so a
        masked-out column never holds a NaN). :meth:`update` writes a step's packed entries at their rows and columns
        and returns the rows' views over the columns any row attends."""

        layout: _Layout  # the step's, set before each forward

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            layout = self.layout
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.keys = key_states.new_zeros((0, key_states.shape[1], 0, key_states.shape[-1]))
                self.values = self.keys.clone()
            self._reserve(layout.height, layout.width)
            for buffer, states in ((self.keys, key_states), (self.values, value_states)):
                if layout.lone_row is not None:
                    place, first = layout.lone_row
                    buffer[place, :, first : first + states.shape[2]] = states[0]
                else:
                    buffer[layout.rows, :, layout.columns] = states[0].transpose(0, 1)
            return self.keys[: layout.height, :, : layout.width], self.values[: layout.height, :, : layout.width]

        def copy_prefix(self, source: int, row: int, n: int) -> None:
            """Make room for ``row`` and copy ``source``'s first ``n`` columns into it."""
            self._reserve(row + 1, n)
            if n:
                self.keys[row, :, :n] = self.keys[source, :, :n]
                self.values[row, :, :n] = self.values[source, :, :n]

        def move(self, row: int, source: torch.Tensor, to: int) -> None:
            """Copy ``row``'s columns ``source`` to its columns from ``to`` on, in order."""
            end = to + len(source)
            self.keys[row, :, to:end] = self.keys[row].index_select(1, source)
            self.values[row, :, to:end] = self.values[row].index_select(1, source)

        def _reserve(self, rows: int, columns: int) -> None:
            have_rows, _, have_columns, _ = self.keys.shape
            if rows <= have_rows and columns <= have_columns:
                return
            shape = list(self.keys.shape)
            shape[0] = max(have_rows, rows)  # rows come in waves (a batch's rows, one joining row)
            shape[2] = max(have_columns, 2 * columns if columns > have_columns else columns, 64)
            keys, values = self.keys.new_zeros(shape), self.values.new_zeros(shape)
            keys[:have_rows, :, :have_columns] = self.keys
            values[:have_rows, :, :have_columns] = self.values
            self.keys, self.values = keys, values

    return RowLayer
