"""A child process that runs the in-process targets one case at a time, under a time limit.

A case that outlives the limit is a hang: the child is killed and a fresh one started, so one
stuck case costs its time limit and nothing more. A child that dies (a crash in native code, the
kernel's out-of-memory killer) is reported as such and replaced too.
"""

from __future__ import annotations

import multiprocessing
import traceback
import warnings
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Outcome:
    """What one case did: ``kind`` is ``ok``, ``traceback``, ``inconsistent``, ``hang`` or
    ``crash``; ``detail`` the outcome label, traceback or message; ``warnings`` the warnings it
    leaked (other than the documented ones)."""

    kind: str
    detail: str
    warnings: tuple[str, ...] = ()


def _serve(connection: Any) -> None:
    """The child's loop: run each ``(target, args)`` received and send back its outcome."""
    from fuzzing.targets import EXPECTED_WARNINGS, TARGETS, Inconsistent

    connection.send("ready")
    while True:
        name, args = connection.recv()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                outcome = Outcome("ok", TARGETS[name](*args))
            except Inconsistent as exc:
                outcome = Outcome("inconsistent", str(exc))
            except Exception:  # the point of the fuzzer: anything undocumented is a finding
                outcome = Outcome("traceback", traceback.format_exc())
        leaked = tuple(
            f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
            for w in caught
            if not issubclass(w.category, EXPECTED_WARNINGS)
        )
        connection.send(Outcome(outcome.kind, outcome.detail, leaked))


class Worker:
    """The child process; :meth:`run` sends it one case."""

    def __init__(self, start_timeout: float = 120.0) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._start_timeout = start_timeout
        self._start()

    def _start(self) -> None:
        self._connection, child = self._context.Pipe()
        self._process = self._context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        if not self._connection.poll(self._start_timeout) or self._connection.recv() != "ready":
            raise RuntimeError("the fuzzing worker did not start")

    def run(self, target: str, args: tuple[Any, ...], timeout: float) -> Outcome:
        """Run one case; a hang or a dead child gets a fresh child."""
        self._connection.send((target, args))
        try:
            if self._connection.poll(timeout):
                return self._connection.recv()
        except (EOFError, OSError):
            pass
        else:
            self._restart()
            return Outcome("hang", f"no answer within {timeout:g} s")
        code = self._process.exitcode
        self._restart()
        return Outcome("crash", f"the worker died (exit code {code})")

    def _restart(self) -> None:
        self.close()
        self._start()

    def close(self) -> None:
        self._process.kill()
        self._process.join()
        self._connection.close()
