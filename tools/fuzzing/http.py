"""The HTTP target: a real ``structspec serve`` process with the bundled demo models, and the
checks every response must pass.

Findings: an HTTP 500, an error response without the OpenAI-style ``{"error": {...}}`` body, a
traceback in the server's log, no response within the time limit (a hang), a connection the
server reset, and a server process that died (it is restarted).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from fuzzing.worker import Outcome

ERROR_FIELDS = {"message", "type", "param", "code"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """``structspec serve`` in a child process, its log in ``log_path``."""

    def __init__(self, log_path: Path, max_tokens: int = 16, start_timeout: float = 180.0,
                 compile_timeout: float = 20.0) -> None:
        self.log_path = log_path
        self.max_tokens = max_tokens
        self.compile_timeout = compile_timeout  # below the case time-out: a slow compile is the server's 400
        self.start_timeout = start_timeout
        self._log_seen = 0
        self._start()

    def _start(self) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "structspec.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                   "--max-tokens", str(self.max_tokens), "--default-max-tokens", str(self.max_tokens),
                   "--compile-timeout", f"{self.compile_timeout:g}", "--log-level", "warning"]
        self._log = self.log_path.open("ab")
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}")
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"structspec serve exited with {self._process.returncode}; see {self.log_path}")
            try:
                if self.client.get("/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"structspec serve did not answer within {self.start_timeout:g} s")

    def restart(self) -> None:
        self.close()
        self._start()

    def close(self) -> None:
        self.client.close()
        self._process.kill()
        self._process.wait()
        self._log.close()

    def new_log(self) -> str:
        """The server's log written since the last call."""
        text = self.log_path.read_bytes()[self._log_seen :].decode("utf-8", "replace")
        self._log_seen += len(text.encode())
        return text

    def run(self, route: tuple[str, str], body: bytes, headers: dict[str, str], timeout: float) -> Outcome:
        """Send one request and judge the response."""
        method, path = route
        try:
            response = self.client.request(method, path, content=body, headers=headers, timeout=timeout)
        except httpx.TimeoutException:
            self.restart()  # the server may still be working on it
            return Outcome("hang", f"no response within {timeout:g} s")
        except httpx.TransportError as exc:
            if self._process.poll() is not None:
                self.restart()
                return Outcome("crash", f"the server died (exit code {self._process.returncode}): {exc!r}")
            return Outcome("reset", f"the connection failed: {exc!r}")
        outcome = judge(response)
        if outcome.kind != "ok":
            time.sleep(0.2)  # the server logs after it answers
        log = self.new_log()
        if "Traceback" not in log:
            return outcome
        if outcome.kind == "ok":
            return Outcome("traceback", f"logged around this request:\n{log[-4000:]}")
        return Outcome(outcome.kind, f"{outcome.detail}\nserver log:\n{log[-3000:]}")


def judge(response: httpx.Response) -> Outcome:
    """``ok`` with the status and error code, or the finding the response is."""
    if response.status_code >= 500:
        return Outcome("http 500", f"{response.status_code}: {response.text[:2000]}")
    if response.status_code < 400:
        return Outcome("ok", str(response.status_code))
    try:
        error = response.json()["error"]
        assert isinstance(error, dict) and set(error) == ERROR_FIELDS and isinstance(error["message"], str)
    except (ValueError, KeyError, TypeError, AssertionError):
        return Outcome("bad error body", f"{response.status_code}: {response.text[:2000]}")
    return Outcome("ok", f"{response.status_code} {error['code']}")


def describe(route: tuple[str, str], body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """A reproducer: the request as JSON-friendly fields."""
    try:
        shown: Any = json.loads(body)
    except ValueError:
        shown = body.decode("utf-8", "backslashreplace")
    return {"method": route[0], "path": route[1], "headers": headers, "body": shown}
