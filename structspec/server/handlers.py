"""Exception handlers: every failure leaves the server in the error format of :mod:`structspec.server.errors`.

Unknown routes become 404, wrong methods 405, and anything unexpected a bare 500 whose body
never carries a traceback (the traceback goes to the server log). The 500 is sent by a
middleware that keeps the exception to itself: Starlette's own handler for ``Exception``
re-raises after responding, and the server then drops the client's keep-alive connection.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from structspec.server.body import validation_error
from structspec.server.errors import APIError

LOG = logging.getLogger("structspec.server")


def install_handlers(app: FastAPI) -> None:
    """Route every exception through the error format."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return _response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _response(validation_error(None, list(exc.errors())))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return _response(APIError(str(exc.detail), status=exc.status_code, type=kind))

    app.add_middleware(UnexpectedErrors)


class UnexpectedErrors:
    """ASGI middleware: an exception no handler took becomes the bare 500, logged with its
    traceback; the connection stays open for the client's next request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception:
            LOG.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if started:  # too late for a status line: let the server close the response
                raise
            await _response(APIError("internal server error", status=500, type="server_error"))(scope, receive, send)


def _response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)
