"""A live uvicorn server on 127.0.0.1 (a free port) for the HTTP tests, and a keep-alive client."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields the base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def on_one_connection(url: str, requests: list[tuple[str, str, bytes | None]]) -> list[tuple[int, Any]]:
    """Send ``(method, path, body)`` requests one after another over a single keep-alive
    connection; the status and JSON body of each. A connection the server dropped raises
    (``http.client.RemoteDisconnected``) instead of quietly reconnecting."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    connection.auto_open = 0  # never reconnect behind the test's back
    connection.connect()
    replies = []
    try:
        for method, path, body in requests:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            replies.append((response.status, json.loads(response.read())))
    finally:
        connection.close()
    return replies
