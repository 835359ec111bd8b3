"""Grammar compilation in child processes, with a wall-clock limit per job.

Converting a schema and compiling its grammar is pure Python: on a thread of the server it
would hold the interpreter lock for seconds at a time, and the generation worker (whose
forward passes release and retake the lock hundreds of times per token) would crawl beside
it. Measured in docs/server.md: a 1,400-property schema compiled on a thread made small
requests several times slower. So jobs run in separate processes, started with ``spawn``
(never ``fork``: the server process runs torch threads) and reused across jobs; the result
comes back pickled. A job that runs past the time limit has its process killed (a new one
starts for the next job) and raises :class:`CompileTimeout`. A process whose resident memory
has grown past the pool's bound after a job (its caches of rule automata and whatever the
allocator kept from a big grammar) is retired, and a fresh one serves the next job: the bound
caps what the compile processes hold between jobs, not what one job may use.

The parent only waits on a pipe (the lock is free meanwhile) and then unpickles the result
with the cycle collector paused: a big grammar is hundreds of thousands of new objects, and
collections triggered halfway through them would triple the time the lock is held. The
objects that arrive are frozen at once (:func:`gc.freeze`, after a collection of what came
before them, see :mod:`structspec.server.collector`): a compiled grammar lives as long as its
cache entry and has no reference cycles, so later full collections need not walk it, and
freeing it on eviction is reference counting's job.
"""

from __future__ import annotations

import gc
import multiprocessing
import resource
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from structspec.gcpause import paused_collection
from structspec.server.collector import settle

_UNPICKLE_LOCK = threading.Lock()  # one unpickling at a time: the collector is paused process-wide meanwhile


class CompileTimeout(Exception):
    """A job ran past the pool's time limit; its process was killed."""


class CompilePool:
    """At most ``processes`` jobs at once, each in a child process, each within ``timeout`` seconds.

    :meth:`run` blocks its calling thread (call it from a thread pool, not the event loop). A
    job is a picklable function and arguments; its return value, or the exception it raised,
    comes back to the caller. A child whose resident set is over ``memory`` bytes after a job
    is stopped instead of kept for the next one.
    """

    def __init__(self, processes: int, timeout: float, memory: int = 256 << 20) -> None:
        self.timeout = timeout
        self.memory = memory
        self._context = multiprocessing.get_context("spawn")
        self._slots = threading.BoundedSemaphore(processes)
        self._idle: list[_Child] = []
        self._lock = threading.Lock()
        self.timeouts = 0
        self.retired = 0

    def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` in a child process; raises :class:`CompileTimeout` past the limit
        (counted from when the job is sent, so a first job also pays for starting its process)."""
        with self._slots:
            child = self._take()
            try:
                ok, value, resident = child.call(function, args, self.timeout)
            except CompileTimeout:
                self.timeouts += 1
                child.stop()
                raise
            except BaseException:
                child.stop()
                raise
            if resident > self.memory:
                self.retired += 1
                child.stop()
            else:
                self._give(child)
        if not ok:
            raise value
        return value

    def warm(self) -> None:
        """Start one child process now, so that the first job does not wait for it."""
        with self._slots:
            self._give(self._take())

    def close(self) -> None:
        """Stop the idle processes (one still running a job is a daemon: it ends with the server)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for child in idle:
            child.stop()

    def _take(self) -> _Child:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Child(self._context)

    def _give(self, child: _Child) -> None:
        with self._lock:
            self._idle.append(child)


class _Child:
    """One child process serving jobs over a pipe."""

    def __init__(self, context: Any) -> None:
        self._conn, child_end = context.Pipe()
        self._process = context.Process(target=_serve, args=(child_end,), daemon=True, name="structspec-compile")
        self._process.start()
        child_end.close()

    def call(self, function: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> tuple[bool, Any, int]:
        """``(ok, result or exception, the child's resident bytes after the job)``."""
        self._conn.send((function, args))
        if not self._conn.poll(timeout):
            raise CompileTimeout(f"compilation took longer than {timeout:g} s")
        with _UNPICKLE_LOCK:
            settle()  # what exists now, collected and frozen: the next freeze takes only the result
            with paused_collection():
                try:
                    return self._conn.recv()
                except EOFError:
                    raise RuntimeError(f"the compile process died (exit code {self._process.exitcode})") from None
                finally:
                    gc.freeze()

    def stop(self) -> None:
        self._process.kill()
        self._process.join()
        self._conn.close()


def resident_bytes() -> int:
    """This process's resident set size: current where ``/proc`` has it, else the peak."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


def _serve(conn: Connection) -> None:
    """The child's loop: run each job, send back ``(True, result, rss)`` or ``(False, exception, rss)``."""
    while True:
        try:
            function, args = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        try:
            ok, value = True, function(*args)
        except Exception as exc:
            ok, value = False, exc
        try:
            conn.send((ok, value, resident_bytes()))
        except Exception as exc:  # a result or an exception that does not pickle
            error = RuntimeError(f"the compile process could not send its result back: {exc!r}")
            conn.send((False, error, resident_bytes()))
