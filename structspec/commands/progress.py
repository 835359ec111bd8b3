"""A progress indicator on stderr for slow steps (model load, grammar compilation).

On a terminal a spinner with the elapsed time redraws one line while a step runs. Elsewhere (a
pipe, a log file, a test) nothing is drawn. Either way a step that took at least
``min_seconds`` leaves one short line, ``structspec: loading model demo (2.1 s)``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

_FRAMES = "|/-\\"


@contextlib.contextmanager
def step(label: str, stream: TextIO | None = None, min_seconds: float = 1.0) -> Iterator[None]:
    """Show ``label`` while the body runs; afterwards ``label (1.2 s)`` if it was slow."""
    out = stream or sys.stderr
    start = time.monotonic()
    done = threading.Event()
    spinner = threading.Thread(target=_spin, args=(out, label, start, done), daemon=True) if out.isatty() else None
    if spinner is not None:
        spinner.start()
    failed = True
    try:
        yield
        failed = False
    finally:
        done.set()
        if spinner is not None:
            spinner.join()
            out.write("\r\x1b[K")
        elapsed = time.monotonic() - start
        if not failed and elapsed >= min_seconds:
            out.write(f"structspec: {label} ({elapsed:.1f} s)\n")
        out.flush()


def _spin(out: TextIO, label: str, start: float, done: threading.Event) -> None:
    frame = 0
    while not done.wait(0.1):
        out.write(f"\r{_FRAMES[frame % len(_FRAMES)]} {label} … {time.monotonic() - start:.0f} s")
        out.flush()
        frame += 1
