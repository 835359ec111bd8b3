# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The draft chain's round in native code: which source to ask, how far each may draft, which
branches to keep, and the draft's lists (see :class:`~structspec.generation.chain.DraftChain`
for the rules).

Why native: a round runs after the model's forward has evicted the caches, and pays for each
line of bytecode and each Python object it touches (docs/speculative.md, *ninth pass*); the
chain's own bookkeeping around the sources -- ranking, pricing each token against the round's
expected tokens per cost, the draft's lists, the stats -- was a fifth of a greedy round's host
time. Here that bookkeeping is a few C doubles and counters per source; the sources themselves
are asked through their ``propose`` as before.
"""

from libc.math cimport pow

cdef enum:
    MAX_SOURCES = 8


cdef class RoundValue:
    """A round's expected committed tokens and its cost in verifying forwards, as drafted so
    far: ``survival`` the chance that every draft token so far is accepted, ``expected`` the
    verified token plus each draft token's chance of being kept, ``cost`` the verifying forward
    plus paid draft tokens."""

    cdef public double survival, expected, cost

    def __init__(self, double survival=1.0, double expected=1.0, double cost=1.0):
        self.survival = survival
        self.expected = expected
        self.cost = cost

    cpdef void add(self, Py_ssize_t count, double acceptance, double price, double upfront=0.0):
        """Count in ``count`` draft tokens accepted with probability ``acceptance`` each, at
        ``price`` each after ``upfront`` for the first."""
        cdef Py_ssize_t k
        if count > 0:
            self.cost += upfront
        for k in range(count):
            self.survival *= acceptance
            self.expected += self.survival
            self.cost += price

    cpdef bint branch(self, double chance, Py_ssize_t count, double price):
        """Whether a branch of ``count`` tokens at ``price`` each, all kept with probability
        ``chance``, raises expected tokens per cost; counts it in when it does."""
        cdef double gain = chance * count
        if gain * self.cost <= self.expected * price * count:
            return False
        self.expected += gain
        self.cost += price * count
        return True

    cpdef Py_ssize_t worth(self, double acceptance, double price, Py_ssize_t most=64, double upfront=0.0):
        """How many tokens at ``price`` each, after paying ``upfront`` for the first, raise
        expected tokens per cost, drafted next (at most ``most``: counted no further than the
        room the caller has); 0 when no count pays for the upfront cost."""
        cdef double survival = self.survival, expected = self.expected, cost = self.cost + upfront, gain
        cdef Py_ssize_t count = 0
        while count < most:
            gain = survival * acceptance
            if gain * cost <= expected * price:
                break
            survival, expected, cost, count = gain, expected + gain, cost + price, count + 1
        return count if expected * self.cost > self.expected * cost else 0


cdef int _fits(list parents, list tokens, list line, Py_ssize_t fork, list branch, Py_ssize_t limit) except -1:
    """Whether a branch of ``branch`` may hang off the main line after its first ``fork`` nodes:
    within ``limit`` tokens deep, not starting with a token already drafted there."""
    cdef Py_ssize_t k, parent
    if not branch or fork + len(branch) > limit:
        return False
    parent = line[fork - 1] if fork else -1
    first = branch[0]
    for k in range(len(parents)):
        if parents[k] == parent and tokens[k] == first:
            return False
    return True


cdef int _extend(draft, list tokens, list qs, str name, Py_ssize_t fork, str kind) except -1:
    """``Draft.extend`` on the draft's lists (the caller checked ``qs`` against ``tokens``)."""
    cdef list all_tokens = draft.tokens, parents = draft.parents, line = draft.line
    cdef Py_ssize_t count = len(tokens), first = len(all_tokens), ahead = len(line) if fork < 0 else fork, k
    if fork < 0:
        for k in range(count):
            line.append(first + k)
    else:
        draft.forks[first] = kind
    parents.append(line[ahead - 1] if ahead else -1)
    for k in range(count - 1):
        parents.append(first + k)
    all_tokens.extend(tokens)
    draft.sources.extend([name] * count)
    draft.qs.extend(qs)
    return 0


cdef inline bint _after(bint free_a, double rank_a, bint free_b, double rank_b) noexcept:
    """Whether a source ranked ``(not free_a, rank_a)`` is asked after one ranked ``(not free_b,
    rank_b)``."""
    return (not free_a, rank_a) > (not free_b, rank_b) if free_a != free_b else rank_a > rank_b


def draft_round(chain, list context, matcher, Py_ssize_t limit, stats, draft) -> None:
    """Fill ``draft`` (empty, its ``end`` the matcher ``matcher``) as
    :meth:`~structspec.generation.chain.DraftChain.draft` describes, for the context
    ``context``, branches at most ``limit`` tokens deep; counts it into ``stats``."""
    cdef list drafters = chain.drafters
    cdef Py_ssize_t n = len(drafters), i, j, k, room, start, added_count, fork, main_count = 0
    cdef Py_ssize_t order[MAX_SOURCES]
    cdef Py_ssize_t quota[MAX_SOURCES]
    cdef double acceptance[MAX_SOURCES]
    cdef double rank[MAX_SOURCES]
    cdef bint free[MAX_SOURCES]
    cdef bint idle[MAX_SOURCES]
    cdef double price, upfront, reach, chance, free_price
    cdef bint progress = True
    cdef RoundValue value = RoundValue()
    if n > MAX_SOURCES:
        raise ValueError(f"at most {MAX_SOURCES} draft sources, got {n}")
    estimates = chain.acceptance
    taken = {kind: found.probability for kind, found in chain.branch_taken.items()}
    names = []
    for i in range(n):
        drafter = drafters[i]
        names.append(drafter.name)
        free[i] = drafter.free
        idle[i] = False
        acceptance[i] = estimates[drafter.name].probability
        quota[i] = -1 if drafter.name == "forced" else chain.config.max_per_source
        # free ones first, then by estimated acceptance; forced tokens, taken whole, first unless clearly less accepted
        rank[i] = -(acceptance[i] + (0.2 if drafter.name == "forced" else 0.0))
        j = i
        while j > 0 and _after(free[order[j - 1]], rank[order[j - 1]], free[i], rank[i]):  # a stable insertion sort
            order[j] = order[j - 1]
            j -= 1
        order[j] = i
    free_price = chain._forward_price()
    branching = chain.branching
    main = []  # the main line's tokens
    sequence = context  # the context and the main line (the sources only read it)
    while progress and main_count < limit and not matcher.is_finished():
        progress = False
        for j in range(n):
            i = order[j]
            if idle[i]:  # asked again on the same text and state, it would propose nothing again
                continue
            drafter = drafters[i]
            if free[i]:
                price, upfront = free_price, 0.0
            else:  # a model's price changes as it drafts
                price, upfront = chain._price(drafter), chain._upfront(drafter, sequence)
            room = limit - main_count
            if quota[i] >= 0:
                room = value.worth(acceptance[i], price, min(room, quota[i]), upfront)
            if room <= 0 or matcher.is_finished():
                continue
            proposal = drafter.propose(sequence, matcher, room, stats)
            added = proposal.tokens
            branches = proposal.branches
            start, reach = main_count, value.survival
            added_count = len(added)
            if added_count:
                for k in range(n):
                    idle[k] = False
                if quota[i] >= 0:
                    quota[i] -= added_count
                value.add(added_count, acceptance[i], price, upfront)
                qs = proposal.qs
                if len(qs) != added_count:
                    raise ValueError(f"{added_count} tokens but {len(qs)} draft distributions")
                _extend(draft, added, qs, names[i], -1, "")
                main += added
                main_count += added_count
                sequence = context + main
                progress = True
            elif not branches:
                if free[i]:
                    idle[i] = True
                continue
            for branch in branches:  # reached when the proposal's tokens before it pass
                fork = start + branch.fork
                tokens = branch.tokens
                chance = reach * pow(acceptance[i], branch.fork) * taken[branch.kind]
                if (branching and _fits(draft.parents, draft.tokens, draft.line, fork, tokens, limit)
                        and value.branch(chance, len(tokens), price)):
                    _extend(draft, tokens, [None] * len(tokens), names[i], fork, branch.kind)
    draft.count_into(stats)
