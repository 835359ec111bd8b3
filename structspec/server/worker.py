"""One model, one worker: every generation runs on a single dedicated thread, in arrival order.

A language model's forward passes gain nothing from running side by side on the same weights
(and the KV caches of concurrent requests would compete for memory), so requests queue for
one worker thread instead. The event loop stays free: it only moves finished pieces from the
worker to the HTTP responses.

A job is a function returning an iterator (a generator that produces text pieces as it
decodes). The worker pulls items one at a time and hands each to the waiting request through
an ``asyncio.Queue``. When the request goes away — the client disconnected mid-stream, or the
handler was cancelled — a cancel flag is set; the worker checks it before each next item and
closes the iterator, which stops decoding, so the slot frees within one decoding step. A job
still waiting in the queue when its request goes away never starts. At most ``max_queue`` jobs
wait or run at once; more get HTTP 503 rather than an unbounded backlog. When a job ends with
nothing queued behind it, the worker runs the cycle collector and freezes what survives
(:func:`~structspec.server.collector.settle`), so that later full collections only walk what
newer requests created.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from structspec.server.collector import settle
from structspec.server.errors import APIError

ItemT = TypeVar("ItemT")

_ITEM, _ERROR, _DONE = "item", "error", "done"


class GenerationWorker:
    """Serializes jobs through one thread; see the module docstring for the design."""

    def __init__(self, max_queue: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="structspec-generate")
        self._max_queue = max_queue
        self.active = 0
        """Jobs queued or running (touched only from the event loop thread)."""
        self.cancelled = 0
        """Jobs stopped early because their request went away (written only by the worker thread)."""

    def submit(self, job: Callable[[], Iterator[ItemT]]) -> AsyncIterator[ItemT]:
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
        cancelled = threading.Event()

        def post(kind: str, value: Any) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
            except RuntimeError:  # the event loop closed (server shutting down): nobody is listening
                cancelled.set()

        def run() -> None:
            try:
                if cancelled.is_set() or not _drain(job(), cancelled, lambda item: post(_ITEM, item)):
                    self.cancelled += 1
            except Exception as exc:
                post(_ERROR, exc)
            finally:
                post(_DONE, None)
                if self.active <= 1:  # nothing queued behind: a good moment for the collector
                    settle()

        self.active += 1
        future = loop.run_in_executor(self._executor, run)
        future.add_done_callback(lambda _: self._finished())
        return _consume(queue, cancelled)

    def close(self) -> None:
        """Stop accepting jobs; the running one is left to finish."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _finished(self) -> None:
        self.active -= 1


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


def _drain(iterator: Iterator[ItemT], cancelled: threading.Event, emit: Callable[[ItemT], None]) -> bool:
    """Feed items to ``emit`` until the iterator ends (True) or ``cancelled`` is set (False), then close it."""
    try:
        for item in iterator:
            if cancelled.is_set():
                return False
            emit(item)
        return True
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
