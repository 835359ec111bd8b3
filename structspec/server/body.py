"""Reading a request body: a size limit enforced while reading, JSON errors located by line:column."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from structspec.server.errors import APIError, validation_error

ModelT = TypeVar("ModelT", bound=BaseModel)


async def read_json(request: Request, max_bytes: int) -> Any:
    """The request's JSON body; HTTP 400 past ``max_bytes`` or for anything but JSON."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(int(declared), max_bytes)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(size, max_bytes)
            chunks.append(chunk)
    except ClientDisconnect:
        raise APIError("client disconnected before sending the whole body", code="client_disconnected") from None
    raw = b"".join(chunks)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise APIError(f"body: not UTF-8 (byte {exc.start})", code="invalid_json") from None
    except json.JSONDecodeError as exc:
        raise APIError(f"body {exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}", code="invalid_json") from None
    except RecursionError:
        raise APIError("body: JSON nested too deeply", code="invalid_json") from None


def parse(model: type[ModelT], data: Any) -> ModelT:
    """``data`` validated as ``model``; the first problem becomes an HTTP 400 naming the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc.errors(include_url=False)) from None


def _too_large(size: int, limit: int) -> APIError:
    return APIError(f"body: {size} bytes or more, over the limit of {limit}", code="body_too_large")
