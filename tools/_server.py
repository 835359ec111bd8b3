"""A `structspec serve` process for the server tools: start it, wait for it, read its memory.

The server runs as a child process with the demo model (what `structspec serve` serves by
default). `compile_in="thread"` swaps the server's compile processes for compilation on a
thread of the server itself, the design they replaced, for side-by-side measurements.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]

_LAUNCH = """
import sys, uvicorn
from structspec.commands.options import load_generator
from structspec.generation import SpecConfig
from structspec.server.app import create_app
from structspec.server.engine import Engine
from structspec.server.limits import Limits
import argparse

port, compile_in, cache_bytes, timeout = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
options = argparse.Namespace(model=None, draft_model=None, no_draft=False, device="cpu", dtype="float32")
generator = load_generator(options)
limits = Limits(cache_bytes=cache_bytes, compile_timeout=timeout)
if compile_in == "thread":
    import structspec.server.constraints as constraints

    class InThread:
        timeouts = 0
        def __init__(self, *_): pass
        def run(self, function, *args): return function(*args)
        def warm(self): pass
        def close(self): pass

    constraints.CompilePool = InThread
app = create_app(Engine(generator, "structspec-demo", SpecConfig()), limits)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


class Server:
    """A server process on a free local port; use as a context manager."""

    def __init__(
        self, compile_in: str = "process", cache_bytes: int = 512 << 20, compile_timeout: float = 60.0
    ) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCH, str(self.port), compile_in, str(cache_bytes), str(compile_timeout)],
            env=env,
            cwd=REPO,
        )

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited with status {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise SystemExit("the server did not start within 120 s")

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def rss(self) -> tuple[int, int]:
        """Resident bytes of the server process and of its children (the compile processes)."""
        own = _rss(self.process.pid)
        kids = set()  # children started by any thread of the server
        for children in Path(f"/proc/{self.process.pid}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                kids.update(children.read_text().split())
        return own, sum(_rss(int(pid)) for pid in kids)


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
