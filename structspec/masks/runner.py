"""Run a whole vocabulary at once through the grammar's pushdown automaton, from a lone frame.

The token-mask hot path asks, for an automaton state ``q``, which tokens are consumed while the
stack never pops below ``q``'s frame, and below which token-trie nodes ``q``'s rule may end with
bytes left. Walking every token through real parse stacks byte by byte is what made first
visits cost seconds.

:class:`StackRunner` instead determinizes that pushdown lazily: a *run state* is a parse state
rooted at a lone frame (its ``accepting`` flag: the bottom rule may end here), numbered on first
sight, and ``trans[run_state, byte_class]`` (``UNKNOWN`` until needed, ``DEAD`` for no move) is a
dense int32 table filled on demand with one ``ParseState.advance_byte`` per new entry. A run is
a breadth-first sweep of the token trie (:mod:`structspec.tokens.trie`): one numpy step per depth
over every live (node, run state) pair, so shared prefixes are run once and only entries never
seen before touch Python. A subtree whose remaining bytes all loop on its run state is accepted
whole, without expanding it (inside a JSON string that is most of the vocabulary). The table is
shared by every ``q`` of the compiled grammar, so the parse work is bounded by the number of
distinct (run state, byte class) pairs, not by the size of the vocabulary.
"""

from __future__ import annotations

import dataclasses
import threading
from weakref import WeakValueDictionary

import numpy as np

from structspec.grammar.parse_state import Frame, ParseState, StackLimitError, close, frame
from structspec.grammar.ruleset import ByteMoves, RuleSet
from structspec.grammar.utf8 import utf8_sequences
from structspec.lru import BoundedCache
from structspec.tokens.trie import TokenTrie, byte_mask, set_words

UNKNOWN = -2
DEAD = -1
PROBE_AT = 256  # trie nodes sitting in one run state at once, from which its loops are probed
MAX_CLOSED = 16  # run states a probed loop may wander through
SCALAR_BELOW = 32  # live pairs under which a sweep finishes one node at a time (long tokens)
DELEGATE_AT = 2048  # tokens below the nodes of one callee state, from which its run is delegated
SUBRUN_CACHE_BYTES = 32 << 20  # per runner: delegated runs kept for reuse by other states
SUBRUN_CACHE_ENTRIES = 4096
RUN_STATE_BYTES = 512  # estimated bytes per run state: its parse state, heads, dictionary entries
POINTER_BYTES = 8
BYTE_ROW_BYTES = 4096  # a state's byte -> state dict, built on first use (up to 256 entries)
RULE_TUPLE_BYTES = 7 * POINTER_BYTES  # the hole's rule set: one slot per state in each of its 7 tuples


def with_hole(rules: RuleSet) -> tuple[RuleSet, int]:
    """``rules`` plus one extra state, the *hole*: no moves, final. A stack whose bottom is the
    hole stands for a callee's frames whatever lies below them; the hole ending is the callee
    returning, which a delegated run reports as pending (see :meth:`StackRunner._split`)."""
    hole = rules.n_states
    class_table = np.vstack([rules.class_table, np.full((1, rules.class_table.shape[1]), -1, np.int32)])
    extended = dataclasses.replace(
        rules,
        byte_next=ByteMoves(rules.byte_class, class_table),
        refs=(*rules.refs, ()),
        token_edges=(*rules.token_edges, ()),
        final=(*rules.final, True),
        rule_of=(*rules.rule_of, -1),
        class_table=class_table,
        movable=(*rules.movable, False),
        sink=(*rules.sink, False),
        plain=(*rules.plain, False),
        frames=WeakValueDictionary(),
    )
    return extended, hole


def rows_in(lo: np.ndarray, hi: np.ndarray, n_rows: int) -> np.ndarray:
    """Bool ``[n_rows]``: the union of the row ranges ``[lo[i], hi[i])``."""
    marks = np.bincount(lo, minlength=n_rows + 1) - np.bincount(hi, minlength=n_rows + 1)
    return np.cumsum(marks[:n_rows]) > 0


class StackRunner:
    """A lazily built DFA over lone-frame parse states for one rule set and one token trie."""

    def __init__(self, rules: RuleSet, trie: TokenTrie) -> None:
        self.rules, self._hole = with_hole(rules)
        self.trie = trie
        self.byte_class = rules.byte_class.astype(np.int32)
        self._node_class = self.byte_class[trie.byte]
        self._node_class_view = memoryview(self._node_class)
        n_classes = int(self.byte_class.max(initial=0)) + 1
        self._representative = [int(np.flatnonzero(self.byte_class == c)[0]) for c in range(n_classes)]
        multibyte = utf8_sequences(((0x80, 0x10FFFF),))
        self._multibyte = [[np.unique(self.byte_class[lo : hi + 1]).tolist() for lo, hi in seq] for seq in multibyte]
        self._self_loops: dict[int, int] = {}  # automaton state -> 256-bit mask of its self-loop bytes
        self._states: list[ParseState] = []
        self._ids: dict[ParseState, int] = {}
        self._starts: dict[int, int] = {}
        self._trans = np.full((64, n_classes), UNKNOWN, dtype=np.int32)
        self._pops = np.zeros(64, dtype=bool)
        self._loops = np.zeros((64, 2), dtype=np.uint64)
        self._has_loop = np.zeros(64, dtype=bool)
        self._probed = np.zeros(64, dtype=bool)
        self._rows: dict[int, list[int]] = {}  # complete transition rows, for the probes
        self._ends: dict[int, frozenset[int] | None] = {}  # see _character_ends
        self._splits: dict[int, tuple[int, int] | None] = {}  # see _split
        self._fruitless: set[tuple[int, ...]] = set()  # top automaton states whose probe found no loop
        self._after: dict[tuple[Frame, ...], int] = {}  # top frames after a byte -> run state
        self._subruns: BoundedCache[tuple[int, bytes], tuple[np.ndarray, np.ndarray, np.ndarray]] = BoundedCache(
            max_entries=SUBRUN_CACHE_ENTRIES, max_bytes=SUBRUN_CACHE_BYTES, weigh=_run_bytes)
        self._lock = threading.RLock()

    def start(self, q: int) -> int:
        """The run state of a lone frame topped by automaton state ``q``."""
        found = self._starts.get(q)
        if found is None:
            with self._lock:
                heads, accepting = close(self.rules, [frame(self.rules, q, None)])
                found = self._starts[q] = self._number(ParseState(self.rules, heads, accepting))
        return found

    def run(self, start: int, nodes: np.ndarray, keep: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run the tokens below the trie ``nodes`` (their prefixes already consumed) from run
        state ``start``.

        Returns row ranges ``(lo, hi)`` of the tokens consumed to their end without popping
        the start frame, and the nodes after which the start frame's rule may end while the
        tokens below have bytes left (never a start node itself: an end there is the
        caller's own closure). With ``keep`` the result is kept (with the delegated runs) for
        the next run of the same nodes from the same state; do not modify it.
        """
        with self._lock:
            if keep:
                return self._subrun(start, np.sort(nodes.astype(np.int32, copy=False)))
            return self._run(start, nodes.astype(np.int32, copy=False))

    def _run(self, start: int, node: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        trie = self.trie
        cur = np.full(len(node), start, dtype=np.int32)
        lo_parts: list[np.ndarray] = []
        hi_parts: list[np.ndarray] = []
        pending: list[np.ndarray] = []
        step = 0
        while len(node):
            if step:
                lo_parts.append(trie.row_lo[node])
                hi_parts.append(trie.end_hi[node])
            self._probe_crowded(cur)
            looping = np.flatnonzero(self._has_loop[cur])
            if len(looping):
                # Everything below only loops on every stack: consumed, no need to expand it.
                rest, loops = trie.rest_sets[node[looping]], self._loops[cur[looping]]
                stays = looping[((rest[:, 0] & ~loops[:, 0]) | (rest[:, 1] & ~loops[:, 1])) == 0]
                if len(stays):
                    lo_parts.append(trie.end_hi[node[stays]])
                    hi_parts.append(trie.row_hi[node[stays]])
                    keep = np.ones(len(node), dtype=bool)
                    keep[stays] = False
                    node, cur = node[keep], cur[keep]
            if step:
                pops = self._pops[cur]
                if pops.any():
                    pending.append(node[pops])
            node, cur = self._delegate(node, cur, lo_parts, hi_parts)
            if step and len(node) < SCALAR_BELOW:
                self._finish(node.tolist(), cur.tolist(), lo_parts, hi_parts, pending)
                break
            first = trie.child_lo[node]
            counts = trie.child_hi[node] - first
            total = int(counts.sum())
            if not total:
                break
            parent = np.repeat(np.arange(len(node), dtype=np.int32), counts)
            child = np.arange(total, dtype=np.int32) + np.repeat(first - (np.cumsum(counts) - counts), counts)
            cls = self._node_class[child]
            src = cur[parent]
            nxt = self._trans[src, cls]
            missing = np.flatnonzero(nxt == UNKNOWN)
            if len(missing):
                self._fill(src[missing], cls[missing])
                nxt[missing] = self._trans[src[missing], cls[missing]]
            alive = np.flatnonzero(nxt >= 0)
            node, cur = child[alive], nxt[alive]
            step += 1
        empty = np.zeros(0, np.int32)
        lo = np.concatenate(lo_parts) if lo_parts else empty
        hi = np.concatenate(hi_parts) if hi_parts else empty
        pend = np.concatenate(pending) if pending else empty
        return lo, hi, pend[trie.end_hi[pend] < trie.row_hi[pend]]

    def _finish(
        self,
        nodes: list[int],
        states: list[int],
        lo_parts: list[np.ndarray],
        hi_parts: list[np.ndarray],
        pending: list[np.ndarray],
    ) -> None:
        """The end of a sweep, depth first, one (node, run state) pair at a time: past the
        first few bytes only a handful of long tokens (runs of ``-``, ``*``, spaces) stay alive,
        and a numpy step per byte for them costs more than walking them in Python."""
        view = self.trie.scalar_view()
        node_class, trans = self._node_class_view, self._trans
        loops, has_loop, pops = self._loops, self._has_loop, self._pops
        lo, hi, pend = [], [], []
        todo = list(zip(nodes, states, strict=True))
        while todo:
            node, state = todo.pop()
            for child in range(view.child_lo[node], view.child_hi[node]):
                cls = node_class[child]
                nxt = int(trans[state, cls])
                if nxt == UNKNOWN:
                    self._fill(np.array([state], np.int32), np.array([cls], np.int32))
                    trans, loops, has_loop, pops = self._trans, self._loops, self._has_loop, self._pops  # may grow
                    nxt = int(trans[state, cls])
                if nxt < 0:
                    continue
                lo.append(view.row_lo[child])
                hi.append(view.end_hi[child])
                if has_loop[nxt] and not (view.rest_low[child] & ~int(loops[nxt, 0])
                                          or view.rest_high[child] & ~int(loops[nxt, 1])):
                    lo.append(view.end_hi[child])
                    hi.append(view.row_hi[child])
                    continue
                if pops[nxt]:
                    pend.append(child)
                todo.append((child, nxt))
        lo_parts.append(np.array(lo, np.int32))
        hi_parts.append(np.array(hi, np.int32))
        pending.append(np.array(pend, np.int32))

    def _delegate(
        self, node: np.ndarray, cur: np.ndarray, lo_parts: list[np.ndarray], hi_parts: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Hand the big subtrees whose run state is inside a callee to a run of the callee
        alone (:meth:`_split`), cached by (callee state, nodes): the callee's tokens do not
        depend on what lies below it, so a JSON string value's sweep is done once for every
        key that holds one. Where the callee returns with bytes left, its nodes come back to
        this run in the caller's continuation state."""
        size = self.trie.row_hi[node] - self.trie.row_lo[node]
        big = np.flatnonzero(size >= DELEGATE_AT)
        if not len(big):
            return node, cur
        handed = np.zeros(len(node), dtype=bool)
        extra_nodes: list[np.ndarray] = []
        extra_states: list[np.ndarray] = []
        for state in np.unique(cur[big]).tolist():
            split = self._split(state)
            if split is None:
                continue
            callee, caller = split
            mine = big[cur[big] == state]
            handed[mine] = True
            lo, hi, returned = self._subrun(callee, np.sort(node[mine]))
            lo_parts.append(lo)
            hi_parts.append(hi)
            if len(returned) and caller != DEAD:
                extra_nodes.append(returned)
                extra_states.append(np.full(len(returned), caller, dtype=np.int32))
        if not handed.any():
            return node, cur
        keep = ~handed
        return np.concatenate([node[keep], *extra_nodes]), np.concatenate([cur[keep], *extra_states])

    @property
    def nbytes(self) -> int:
        """Estimated bytes of the tables built so far, the runs kept, and the rule set with its
        hole (a copy of the grammar's class table and per-state tuples)."""
        arrays = (self._trans, self._pops, self._loops, self._has_loop, self._probed, self._node_class,
                  self.rules.class_table)
        return (
            sum(a.nbytes for a in arrays)
            + self.rules.n_states * RULE_TUPLE_BYTES
            + len(self.rules.byte_next) * BYTE_ROW_BYTES
            + len(self._states) * RUN_STATE_BYTES
            + len(self._rows) * self._trans.shape[1] * POINTER_BYTES
            + (len(self._after) + len(self._ends) + len(self._splits)) * 2 * RUN_STATE_BYTES // 4
            + self._subruns.nbytes
        )

    def _subrun(self, callee: int, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = (callee, nodes.tobytes())
        found = self._subruns.get(key, None)
        if found is None:
            found = self._subruns.put(key, self._run(callee, nodes))
        return found

    def _split(self, state: int) -> tuple[int, int] | None:
        """``(callee, caller)`` run states for a run state whose stacks all sit strictly above
        one common frame ``X`` (the lowest frame that is not the hole): ``callee`` is those
        stacks with ``X`` and everything below it replaced by the hole, ``caller`` the closure
        of ``X`` (where the run goes on once the callee returns). None when no such frame."""
        if state in self._splits:
            return self._splits[state]
        found = None
        heads = self._states[state].heads
        if heads:
            chains = [_chain(head) for head in heads]
            depth = 2 if chains[0][-1].state == self._hole else 1  # X's depth from the bottom
            common = {chain[-depth] if len(chain) > depth else None for chain in chains}
            if len(common) == 1 and None not in common:
                (x,) = common
                hole = frame(self.rules, self._hole, None)
                callee_heads: dict[Frame, None] = {}
                for chain in chains:
                    top = hole
                    for f in reversed(chain[:-depth]):
                        top = frame(self.rules, f.state, top)
                    callee_heads[top] = None
                heads_after, accepting = close(self.rules, [x])
                after = ParseState(self.rules, heads_after, accepting)
                caller = self._number(after) if heads_after or accepting else DEAD
                found = self._number(ParseState(self.rules, tuple(callee_heads), False)), caller
        self._splits[state] = found
        return found

    def _probe_crowded(self, states: np.ndarray) -> None:
        """Learn the loop set of run states that many nodes sit in at once (see
        :meth:`_closed_loops`); states seen fewer times keep their automaton self-loops. Once
        a probe of a state with the same top automaton states has found nothing (the
        positions of a counted string, ``char{16}`` nested in blocks, differ only in the frames
        below), such states are no longer probed: a loop set is a shortcut, never needed for
        exactness."""
        fresh = states[~self._probed[states]]
        if len(fresh) < PROBE_AT:
            return
        counts = np.bincount(fresh)
        for state in np.flatnonzero(counts >= PROBE_AT).tolist():
            self._probed[state] = True
            tops = tuple(sorted(head.state for head in self._states[state].heads))
            if tops in self._fruitless:
                continue
            try:
                low, high = self._closed_loops(state)
            except StackLimitError:  # probing reaches bytes no token spells; a shortcut is optional
                low, high = 0, 0
            if not (low or high):
                self._fruitless.add(tops)
            self._loops[state, 0] |= np.uint64(low)
            self._loops[state, 1] |= np.uint64(high)
            self._has_loop[state] = bool(self._loops[state, 0] or self._loops[state, 1])

    def _closed_loops(self, state: int) -> tuple[int, int]:
        """A byte-class set ``L`` (and whether whole multi-byte characters join it) such that
        the run states reachable from ``state`` by ``L`` bytes and characters are few, and from
        each of them every ``L`` byte and every character moves through live states to another
        of them: any token rest made of those keeps the run alive. Starts from everything live
        and drops, while some reachable state breaks the rule, the step that first reached it
        (or the broken step itself, at ``state``)."""
        row = self._row(state)
        allowed, utf8 = {c for c in range(len(row)) if row[c] >= 0}, True
        while True:
            broken = self._break_in_closure(state, allowed, utf8)
            if broken is None:
                return set_words(byte_mask(np.isin(self.byte_class, sorted(allowed))), utf8)
            if broken == "overflow":
                return 0, 0
            if broken == "utf8":
                utf8 = False
            else:
                allowed.discard(broken)

    def _break_in_closure(self, state: int, allowed: set[int], utf8: bool) -> int | str | None:
        """The step to drop from (``allowed``, ``utf8``) for :meth:`_closed_loops`, None when
        the closure is sound, ``"overflow"`` when it has more than ``MAX_CLOSED`` states."""
        reached: dict[int, int | str | None] = {state: None}  # run state -> the step that reached it
        todo = [state]
        while todo:
            current = todo.pop()
            row = self._row(current)
            steps: list[tuple[int | str, frozenset[int] | set[int] | None]] = [(c, {row[c]}) for c in sorted(allowed)]
            if utf8:
                steps.append(("utf8", self._character_ends(current)))
            for step, targets in steps:
                if targets is None or DEAD in targets:
                    return step if reached[current] is None else reached[current]
                for target in targets - reached.keys():
                    reached[target] = step if reached[current] is None else reached[current]
                    todo.append(target)
            if len(reached) > MAX_CLOSED:
                return "overflow"
        return None

    def _row(self, state: int) -> list[int]:
        """The whole transition row of ``state``, filled (kept as a list once complete)."""
        row = self._rows.get(state)
        if row is None:
            classes = np.flatnonzero(self._trans[state] == UNKNOWN)
            if len(classes):
                self._fill(np.full(len(classes), state, dtype=np.int32), classes)
            row = self._rows[state] = self._trans[state].tolist()
        return row

    def _character_ends(self, state: int) -> frozenset[int] | None:
        """The run states after each well-formed multi-byte character from ``state``, or None
        when some character (or a prefix of one) dies on the way."""
        if state in self._ends:
            return self._ends[state]
        ends: set[int] | None = set()
        for sequence in self._multibyte:
            current = {state}
            for classes in sequence:
                current = {row[c] for row in map(self._row, current) for c in classes}
                if DEAD in current:
                    ends = None
                    break
            if ends is None:
                break
            ends |= current
        found = self._ends[state] = None if ends is None else frozenset(ends)
        return found

    def _fill(self, states: np.ndarray, classes: np.ndarray) -> None:
        """Fill ``trans`` for the given (run state, byte class) pairs: the top frames each
        byte leads to, then their closure, done once per distinct set of top frames (most
        classes of a state lead to the same few)."""
        rules, byte_next, width = self.rules, self.rules.byte_next, self._trans.shape[1]
        pairs = states.astype(np.int64) * width + classes
        for pair in (np.unique(pairs) if len(pairs) > 1 else pairs).tolist():
            state, cls = divmod(pair, width)
            b = self._representative[cls]
            tops = tuple(
                head if q == head.state else frame(rules, q, head.parent)  # a loop keeps its frame
                for head in self._states[state].heads
                if (q := byte_next[head.state].get(b)) is not None
            )
            found = self._after.get(tops)
            if found is None:
                found = self._after[tops] = self._closure_of(tops)
            self._trans[state, cls] = found

    def _closure_of(self, tops: tuple[Frame, ...]) -> int:
        """The run state whose stacks are the closure of ``tops`` (as ``ParseState.advance_byte``
        builds it), or DEAD."""
        rules = self.rules
        if not tops:
            return DEAD
        if len(tops) == 1 and rules.plain[tops[0].state]:
            return self._number(ParseState(rules, tops, False))
        heads, accepting = close(rules, tops)
        if not heads and not accepting:
            return DEAD
        return self._number(ParseState(rules, heads, accepting))

    def _number(self, state: ParseState) -> int:
        found = self._ids.get(state)
        if found is not None:
            return found
        found = len(self._states)
        if found == len(self._pops):
            self._trans = np.concatenate([self._trans, np.full_like(self._trans, UNKNOWN)])
            self._pops = np.concatenate([self._pops, np.zeros_like(self._pops)])
            self._loops = np.concatenate([self._loops, np.zeros_like(self._loops)])
            self._has_loop = np.concatenate([self._has_loop, np.zeros_like(self._has_loop)])
            self._probed = np.concatenate([self._probed, np.zeros_like(self._probed)])
        self._states.append(state)
        self._ids[state] = found
        self._pops[found] = state.accepting
        low, high = self._loop_words(state)
        self._loops[found] = (low, high)
        self._has_loop[found] = bool(low or high)
        return found


    def _loop_words(self, state: ParseState) -> tuple[int, int]:
        """The bytes on which every stack of ``state`` stays put (its top loops), as the two
        words of :func:`~structspec.tokens.trie.set_words`: a token whose rest is only such bytes
        is consumed from ``state``. Each automaton state's self-loops are read off its row of
        the class table once."""
        loops = (1 << 256) - 1 if state.heads else 0
        for head in state.heads:
            q = head.state
            mask = self._self_loops.get(q)
            if mask is None:
                mask = self._self_loops[q] = byte_mask(self.rules.class_table[q][self.byte_class] == q)
            loops &= mask
        return set_words(loops)


def _run_bytes(key: tuple[int, bytes], run: tuple[np.ndarray, np.ndarray, np.ndarray]) -> int:
    """Estimated bytes of a kept run: its arrays and its key (the nodes it ran, as bytes)."""
    return sum(part.nbytes for part in run) + len(key[1]) + 4 * 64


def _chain(head: Frame) -> list[Frame]:
    """The frames of a stack, top first."""
    out = []
    current: Frame | None = head
    while current is not None:
        out.append(current)
        current = current.parent
    return out
