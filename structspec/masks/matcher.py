"""The per-sequence matcher: grammar state, token masks, rollback and O(1) copies.

A matcher is a pointer into a persistent history of parse states (each node: a state and
the node before it). Accepting a token pushes a node, ``rollback`` walks back, and ``copy``
shares the node -- so a draft can fork the target's matcher for free and the two never
interfere.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from structspec.grammar.parse_state import ParseState
from structspec.lru import ENTRY_OVERHEAD, MISSING, BoundedCache
from structspec.masks._states import FINISHED, HANDED_OVER, STALE, History

__all__ = ["HANDED_OVER", "Matcher", "numpy_view"]

ALLOWED_IDS_ENTRIES = 256  # masks whose allowed ids are kept for a forbidden argmax (see _allowed_argmax)
ALLOWED_IDS_BYTES = 8 << 20

if TYPE_CHECKING:  # names for annotations only: torch is imported where a tensor is made
    import torch

    from structspec.masks.compiled import CompiledGrammar


class Matcher:
    """Tracks one sequence through a :class:`~structspec.masks.compiled.CompiledGrammar`."""

    __slots__ = ("_node", "_probe", "compiled")

    def __init__(self, compiled: CompiledGrammar, _node: History | None = None) -> None:
        self.compiled = compiled
        self._node = _node or History(compiled.grammar.initial_state(), None)
        self._probe: tuple[History, int, History | None] | None = None  # see _next

    @property
    def state(self) -> ParseState:
        """The current parse state."""
        return self._node.state

    @property
    def num_tokens(self) -> int:
        """How many tokens have been accepted (and not rolled back)."""
        return self._node.length

    def copy(self) -> Matcher:
        """An independent matcher at the same point, in O(1)."""
        return Matcher(self.compiled, self._node)

    def is_accepting(self) -> bool:
        """Whether the text so far is complete (end-of-sequence would be allowed)."""
        return self._node.state.accepting

    def is_finished(self) -> bool:
        """True once an end-of-sequence token was accepted, or when the text is complete and
        nothing may follow it."""
        node = self._node
        return node.finished or (node.state.accepting and not node.state.heads)

    def tokens_to_finish(self) -> float:
        """An upper bound on the tokens still needed for a complete text (0 once it is
        complete; ``inf`` if the vocabulary cannot spell a completion byte by byte)."""
        if self._node.finished:
            return 0.0
        return self.compiled.tokens_to_finish(self._node.state)

    def finishing_tokens(self) -> list[int]:
        """Tokens that start a shortest completion: after any of them :meth:`tokens_to_finish`
        is at least one lower (see :meth:`~structspec.masks.compiled.CompiledGrammar.finishing_tokens`)."""
        if self._node.finished:
            return []
        return self.compiled.finishing_tokens(self._node.state)

    # -- masks -----------------------------------------------------------------------------
    def mask_words(self) -> np.ndarray:
        """Packed uint32 mask words of the allowed tokens (shared: do not modify)."""
        node = self._node
        if node.finished:
            return _no_tokens(self.compiled.n_words)
        words = self.compiled.mask_words(node.state)
        self.compiled.table.mark_masked(*self.compiled.table.numbered(node))  # a prefetch need not compute it again
        return words

    def allowed_mask(self) -> torch.Tensor:
        """Bool tensor ``[vocab_size]``: True for tokens that keep the output valid."""
        import torch

        bits = np.unpackbits(self.mask_words().view(np.uint8), bitorder="little")
        return torch.from_numpy(bits[: self.compiled.vocabulary.size].view(np.bool_))

    def allows(self, token_id: int) -> bool:
        """Whether the grammar allows ``token_id`` next: one bit of :meth:`mask_words` when the
        mask of this state is already known, else by advancing along the token (what
        :meth:`accept_token` does, and kept for it), which costs the token's bytes instead of
        a sweep of the vocabulary on a state's first visit."""
        node = self._node
        if not node.finished:
            words = self.compiled.known_mask_words(node.state)
            if words is not None:
                size = self.compiled.vocabulary.size
                return 0 <= token_id < size and bool((int(words[token_id >> 5]) >> (token_id & 31)) & 1)
        return self._next(token_id) is not None

    def masked_argmax(self, logits: torch.Tensor | np.ndarray, best: int | None = None) -> int:
        """The highest-scored allowed token of a logits row (the lowest id among ties, NaN
        first), as ``apply_mask`` then ``argmax`` would give, without writing the row. Usually
        the unmasked argmax is allowed and the mask is never expanded. A numpy row, or a float32
        or float64 CPU tensor read through numpy (whose argmax is torch's at a sixth of the
        cost), takes a forbidden argmax's place from the mask bits; another row (on a GPU, in
        bfloat16) is masked in place. ``best``: the row's unmasked argmax, when the caller has
        it (it is not taken again)."""
        row = logits if isinstance(logits, np.ndarray) else numpy_view(logits)
        if row is None:
            best = int(logits.argmax()) if best is None else best
            if self.allows(best):
                return best
            return int(self.apply_mask(logits).argmax())
        best = int(row.argmax()) if best is None else best
        if self.allows(best):
            return best
        return _allowed_argmax(row, self.mask_words(), min(len(row), self.compiled.vocabulary.size))

    def fill_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        """Write the mask into ``bitmask[row]`` (int32 ``[batch, ceil(vocab/32)]``, bit j of word i
        = token 32*i+j); words past the vocabulary (padded logits) are zeroed."""
        words = self.mask_words()
        n, width = len(words), bitmask.size(-1)
        if width < n:
            raise ValueError(
                f"bitmask rows hold {width} words but the vocabulary needs {n} "
                f"(ceil({self.compiled.vocabulary.size} / 32))"
            )
        if bitmask.is_cpu:  # through numpy: a third of the per-call cost of torch's copy
            target = bitmask.numpy()[row]
            target[:n] = words  # uint32 into int32: the same bits
            if width > n:
                target[n:] = 0
            return
        import torch

        target = bitmask[row]
        target[:n].copy_(torch.from_numpy(words.view(np.int32)))
        target[n:].zero_()

    def apply_mask(self, logits: torch.Tensor) -> torch.Tensor:
        """Set forbidden tokens' logits to -inf in place (any device, dtype, trailing dim >= vocab)."""
        width = logits.size(-1)
        size = min(width, self.compiled.vocabulary.size)
        forbidden = np.ones(width, dtype=np.bool_)  # ids past the vocabulary (padded logits) too
        allowed = np.unpackbits(self.mask_words().view(np.uint8), count=size, bitorder="little")
        np.equal(allowed, 0, out=forbidden[:size])
        import torch

        logits.masked_fill_(torch.from_numpy(forbidden).to(logits.device, non_blocking=True), float("-inf"))
        return logits

    # -- advancing -------------------------------------------------------------------------
    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (and no change) if the grammar forbids it."""
        following = self._next(token_id)
        if following is None:
            return False
        self._node = following
        return True

    def _next(self, token_id: int) -> History | None:
        """The node after ``token_id`` (None: forbidden), computed once for the current node:
        :meth:`allows` then :meth:`accept_token` of the same token advance only once."""
        node = self._node
        probe = self._probe
        if probe is not None and probe[0] is node and probe[1] == token_id:
            return probe[2]
        following = self._advance(node, token_id)
        self._probe = (node, token_id, following)
        return following

    def _advance(self, node: History, token_id: int) -> History | None:
        if node.finished:
            return None
        compiled = self.compiled
        vocab = compiled.vocabulary
        if not 0 <= token_id < vocab.size:
            return None
        state = node.state
        table = compiled.table
        while True:  # through the state table, by the node's number while its epoch lasts
            number, epoch = table.numbered(node)
            after, now, following = table.follow(number, token_id, epoch, compiled._advance_token)
            if after != STALE:  # else another thread began an epoch meanwhile: number the state again
                break
        if following is None and token_id in vocab.eos_ids:
            # End of sequence, unless a token reference in the grammar names this very token.
            return History(state, node, finished=True) if state.accepting else None
        return None if following is None else History(following, node, number=after, epoch=now)

    def follow(self, other: Matcher, ahead: int) -> bool:
        """Advance by one token to where ``other`` stood ``ahead`` tokens before its current
        point, taking over its history node (nothing is stepped: a draft's matcher already went
        this way), when ``other`` went through this matcher's current point; False (and no
        change) when it did not."""
        node = other._node
        if not 0 <= ahead < node.length - self._node.length:
            return False
        for _ in range(ahead):
            node = node.previous
        if node.previous is not self._node:
            return False
        self._node = node
        return True

    def greedy_path(
        self, rows: np.ndarray, tokens: list[int], parents: list[int], line: list[int], left: int | None
    ) -> tuple[list[int], int | None]:
        """Greedy verification of a draft tree over the target's float32 ``rows`` (row 0 after
        the current point, row ``1 + i`` after node ``i`` of the tree ``tokens`` / ``parents``
        with main line ``line``), in one native call (see
        :meth:`~structspec.masks._states.StateTable.greedy_path`): each row's argmax where the
        grammar allows it, else its masked argmax, picks the child drafted with it. Advances
        along the accepted nodes and returns ``(path, token)``: the nodes, root first, and the
        token chosen after them (taken too), ``None`` when the path finished the text, or
        :data:`~structspec.masks._states.HANDED_OVER` where the choice after the path is left to
        the caller (a budget guard's replacement, an end of sequence; ``left``: the tokens the
        round may produce with the guard on, else ``None``)."""
        node = self._node
        if node.finished:
            return [], HANDED_OVER
        compiled = self.compiled
        path, self._node, token = compiled.table.greedy_path(
            rows, compiled.vocabulary.size, tokens, parents, line, node, -1 if left is None else left,
            compiled._advance_token, compiled.mask_words, compiled.tokens_to_finish)
        return path, None if token == FINISHED else token

    def accept_tokens(self, token_ids) -> int:
        """Accept tokens in order until one is forbidden; returns how many were accepted. The
        text tokens are stepped in one native call through the state table."""
        tokens = [int(token_id) for token_id in token_ids]
        node = self._node
        if node.finished or not tokens:
            return 0
        compiled = self.compiled
        self._node = compiled.table.walk(node, tokens, compiled.vocabulary.size, compiled._advance_token)
        count = self._node.length - node.length
        # the rest one by one: an end-of-sequence token, or a new epoch begun during the walk
        while count < len(tokens) and self.accept_token(tokens[count]):
            count += 1
        return count

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted tokens."""
        if not 0 <= n <= self._node.length:
            raise ValueError(f"cannot roll back {n} tokens: only {self._node.length} were accepted")
        node = self._node
        for _ in range(n):
            node = node.previous
        self._node = node

    def recent_states(self, n: int) -> list[ParseState]:
        """The states before and after each of the last ``n`` accepted tokens, oldest first
        (``n + 1`` of them; the last is :attr:`state`)."""
        if not 0 <= n <= self._node.length:
            raise ValueError(f"cannot look back {n} tokens: only {self._node.length} were accepted")
        node, states = self._node, []
        for _ in range(n + 1):
            states.append(node.state)
            node = node.previous
        return states[::-1]

    def states_to_mask(self, n: int) -> tuple[list[ParseState], list[int], int] | None:
        """The states along the last ``n`` accepted tokens and after them, from the first whose
        mask the compiled grammar's state table has not seen computed on, with their numbers and
        the table's epoch (see :meth:`~structspec.masks._states.StateTable.unmasked_along`);
        None when none is left, or a finished text comes first. For a worker to compute those
        masks ahead of their reads (and mark them)."""
        if not 0 <= n <= self._node.length:
            raise ValueError(f"cannot look back {n} tokens: only {self._node.length} were accepted")
        return self.compiled.table.unmasked_along(self._node, n)

    def forced_tokens(self) -> list[int]:
        """Canonical tokenization of the bytes every continuation must start with."""
        node = self._node
        if node.finished:
            return []
        compiled = self.compiled
        return list(compiled.table.forced(node, compiled.forced_tokens))


def numpy_view(logits: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a CPU float tensor (the same memory), which :meth:`Matcher.masked_argmax`
    reads faster than the tensor; None where there is none."""
    try:
        return logits.numpy()
    except (TypeError, RuntimeError):  # on a GPU, in bfloat16, or needing grad
        return None


@functools.cache
def _no_tokens(n_words: int) -> np.ndarray:
    """The read-only mask of a finished text, one array per width (so the argmax's id cache
    keeps one entry for it, not one per call)."""
    words = np.zeros(n_words, dtype=np.uint32)
    words.flags.writeable = False
    return words


def _allowed_ids(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return words, np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))


def _ids_bytes(_key: int, value: tuple[np.ndarray, np.ndarray]) -> int:
    return value[0].nbytes + value[1].nbytes + ENTRY_OVERHEAD


# id of a mask words array (shared per state, and by states with the same mask) -> (the array, the ids of its
# set bits, ascending). The entry holds the array, so no other array can take its id while the entry lives.
_ALLOWED_IDS: BoundedCache[int, tuple[np.ndarray, np.ndarray]] = BoundedCache(
    max_entries=ALLOWED_IDS_ENTRIES, max_bytes=ALLOWED_IDS_BYTES, weigh=_ids_bytes)


def _allowed_argmax(row: np.ndarray, words: np.ndarray, size: int) -> int:
    """``row``'s argmax once the tokens ``words`` forbids (and ids from ``size`` on) are set to
    -inf, without writing the row: the first NaN or the highest allowed score, the lowest id
    among ties (0 when the masked row is all -inf). Reads only the allowed ids' scores, through
    the ids of each mask array kept in a small cache."""
    found = _ALLOWED_IDS.get(id(words))
    if found is MISSING:
        found = _ALLOWED_IDS.put(id(words), _allowed_ids(words))
    ids = found[1]
    if len(ids) and ids[-1] >= size:
        ids = ids[: ids.searchsorted(size)]
    if not len(ids):
        return 0
    scores = row[ids]
    best = int(scores.argmax())
    return 0 if scores[best] == -np.inf else int(ids[best])
