"""Exception handlers: every failure leaves the server in the error format of :mod:`structspec.server.errors`.

Unknown routes become 404, wrong methods 405, and anything unexpected a bare 500 whose body
never carries a traceback (the traceback goes to the server log).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from structspec.server.errors import APIError, validation_error

LOG = logging.getLogger("structspec.server")


def install_handlers(app: FastAPI) -> None:
    """Route every exception through the error format."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return _response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _response(validation_error(exc.errors()))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return _response(APIError(str(exc.detail), status=exc.status_code, type=kind))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        LOG.exception("unexpected error on %s %s", request.method, request.url.path)
        return _response(APIError("internal server error", status=500, type="server_error"))


def _response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)
