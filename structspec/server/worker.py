"""One model, one worker thread, continuous batching: requests join the running batch at its
next step and leave it when done.

Forward passes over one set of weights gain nothing from running side by side (on a CPU they
share the cores; on a GPU they compete for memory), but one forward over many rows costs far
less than a forward per row. So a single thread owns the model and steps a batch
(:class:`Stepper`, the engine's side): each step decodes one round for every row -- a token,
or a draft and its verification -- in one target forward. Between steps the thread lets
waiting requests join, up to ``max_batch`` rows, and drops rows whose request went away. The
event loop never decodes: it only moves items from the worker to the HTTP responses.

Each request gets its items through an ``asyncio.Queue`` that the worker fills as it decodes;
the worker never waits for a slow reader. A step's items reach the event loop in one hand-over
(one wake-up of the loop, not one per row: each is a write to the loop's self-pipe, and with a
wake-up per piece the worker spent 3-6% of its time on them). When the request goes away -- the client
disconnected mid-stream, or the handler was cancelled -- a cancel flag is set, and the worker
drops its row before the next step, which frees the row within one step; a request that goes
away while still waiting never joins. At most ``max_queue`` requests wait or decode at once;
more get HTTP 503 rather than an unbounded backlog.
When the batch empties with nothing waiting, the worker runs the cycle collector and freezes
what survives (:func:`~structspec.server.collector.settle`), so that later full collections
only walk what newer requests created.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from structspec.server.collector import settle
from structspec.server.errors import APIError

_ITEM, _ERROR, _DONE = "item", "error", "done"
log = logging.getLogger("structspec.server")


class Stepper(Protocol):
    """What the worker steps: a batch of rows, each started from a request's job."""

    def __len__(self) -> int: ...

    def join(self, job: Any) -> Any:
        """Start ``job`` as a row of the batch (at the next step); returns its handle. May raise
        (the request's own error)."""

    def step(self) -> list[tuple[Any, Any, bool]]:
        """One round for every row: ``(handle, item, last)`` per item produced -- a text piece,
        the final result, or an exception for that row; ``last`` when the row is done and gone."""

    def cancel(self, handle: Any) -> None:
        """Drop a row now."""


@dataclass
class _Request:
    job: Any
    loop: asyncio.AbstractEventLoop
    put: Callable[[tuple[str, Any]], None]  # on the loop's thread
    cancelled: threading.Event = field(default_factory=threading.Event)


Outbox = list[tuple[_Request, str, Any]]
"""Items for the requests' queues, handed to the event loop together (:func:`_send`)."""


class GenerationWorker:
    """Steps one batch on one thread; see the module docstring for the design."""

    def __init__(self, stepper: Callable[[], Stepper], max_queue: int, max_batch: int = 8) -> None:
        """``stepper`` makes the batch (on the worker thread, at the first request)."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self._make_stepper = stepper
        self._max_queue = max_queue
        self._max_batch = max_batch
        self._waiting: collections.deque[_Request] = collections.deque()
        self._wake = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self.active = 0
        """Requests waiting or decoding (touched only from the event loop thread)."""
        self.cancelled = 0
        """Requests stopped early because they went away (written only by the worker thread)."""
        self.rows = 0
        """Rows in the batch at its last step (written only by the worker thread)."""

    def submit(self, job: Any) -> AsyncIterator[Any]:
        """Queue ``job`` now (HTTP 503 when the queue is full); iterate the result for its items.

        Leaving the iteration once started (closing it, or the task being cancelled) cancels the job.
        """
        if self.active >= self._max_queue:
            raise APIError(
                f"server busy: {self.active} requests are queued (limit {self._max_queue}); retry later",
                status=503,
                type="server_busy",
                code="queue_full",
            )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def put(item: tuple[str, Any]) -> None:
            queue.put_nowait(item)
            if item[0] == _DONE:
                self.active -= 1

        request = _Request(job, loop, put)
        self.active += 1
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="structspec-generate", daemon=True)
                self._thread.start()
            self._waiting.append(request)
            self._wake.notify()
        return _consume(queue, request.cancelled)

    def close(self) -> None:
        """Stop stepping; waiting and running requests are dropped."""
        with self._wake:
            self._closed = True
            self._wake.notify()

    def _run(self) -> None:
        stepper: Stepper | None = None
        rows: dict[int, tuple[Any, _Request]] = {}  # id(handle) -> (handle, request)
        while True:
            with self._wake:
                while not self._closed and not self._waiting and not rows:
                    self._wake.wait()
                if self._closed:
                    return
                joining = [self._waiting.popleft() for _ in range(min(len(self._waiting), self._max_batch - len(rows)))]
            outbox: Outbox = []
            try:
                stepper = stepper or self._make_stepper()
                self._cycle(stepper, rows, joining, outbox)
            except Exception as exc:  # the model cannot be set up, or a step failed: its rows cannot go on
                log.exception("decoding failed; %d requests end with an error", len(rows) + len(joining))
                for request in [*joining, *(request for _, request in rows.values())]:
                    _end(outbox, request, exc)
                rows.clear()
                stepper = None
            _send(outbox)
            if not rows and not self._waiting:  # idle: a good moment for the collector
                settle()

    def _cycle(
        self, stepper: Stepper, rows: dict[int, tuple[Any, _Request]], joining: list[_Request], outbox: Outbox
    ) -> None:
        """Let ``joining`` in, drop rows whose request went away, and step once; the items for
        the requests go to ``outbox``."""
        while joining:
            request = joining.pop(0)
            if request.cancelled.is_set():
                self.cancelled += 1
                outbox.append((request, _DONE, None))
                continue
            try:
                handle = stepper.join(request.job)
            except Exception as exc:  # the request's own problem (a prompt past the context)
                _end(outbox, request, exc)
                continue
            rows[id(handle)] = (handle, request)
        for key, (handle, request) in list(rows.items()):
            if request.cancelled.is_set():
                del rows[key]
                self.cancelled += 1
                outbox.append((request, _DONE, None))
                stepper.cancel(handle)
        self.rows = len(rows)
        if not rows:
            return
        for handle, item, last in stepper.step():
            _, request = rows.get(id(handle), (None, None))
            if request is None:
                continue
            outbox.append((request, _ERROR if isinstance(item, BaseException) else _ITEM, item))
            if last:
                del rows[id(handle)]
                outbox.append((request, _DONE, None))


def _end(outbox: Outbox, request: _Request, exc: BaseException) -> None:
    outbox += [(request, _ERROR, exc), (request, _DONE, None)]


def _send(outbox: Outbox) -> None:
    """Hand the items to their requests' event loops, one call per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, Outbox] = {}
    for entry in outbox:
        by_loop.setdefault(entry[0].loop, []).append(entry)
    for loop, entries in by_loop.items():
        try:
            loop.call_soon_threadsafe(_deliver, entries)
        except RuntimeError:  # the event loop closed (server shutting down): nobody is listening
            for request, _, _ in entries:
                request.cancelled.set()


def _deliver(entries: Outbox) -> None:
    for request, kind, value in entries:
        request.put((kind, value))


async def _consume(queue: asyncio.Queue[tuple[str, Any]], cancelled: threading.Event) -> AsyncIterator[Any]:
    try:
        while True:
            kind, value = await queue.get()
            if kind == _DONE:
                return
            if kind == _ERROR:
                raise value
            yield value
    finally:
        cancelled.set()
