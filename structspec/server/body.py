"""Reading a request body: a size limit enforced while reading, JSON errors located by line:column,
and validation errors named by the field path the client wrote (``messages[0].content``)."""

from __future__ import annotations

import json
import types
import typing
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from structspec.server.errors import APIError

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
        body = json.loads(raw.decode("utf-8"))
        if b"\\u" in raw:  # only a \u escape can make a lone surrogate, which no tokenizer takes
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        return body
    except UnicodeEncodeError as exc:
        raise APIError(f"body: a \\u escape makes a lone surrogate (U+{ord(exc.object[exc.start]):04X}), which is not "
                       "a Unicode character", code="invalid_json") from None
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
        raise validation_error(model, exc.errors(include_url=False)) from None


def validation_error(model: type[BaseModel] | None, errors: list[Any]) -> APIError:
    """The most specific problem Pydantic found in a body of type ``model``.

    Among the errors, the one deepest in the body wins (of a union's branches, the one the
    input got furthest into). Unknown fields are ``unknown_parameter``, known but unsupported
    OpenAI fields ``unsupported_parameter``, anything else ``invalid_value``.
    """
    if not errors:
        return APIError("body: invalid request", code="invalid_value")
    located = [(_path(model, error), error) for error in errors]
    (path, owner), error = max(located, key=lambda pair: len(pair[1].get("loc", ())))
    kind = error.get("type")
    if kind == "extra_forbidden":
        accepted = ", ".join(sorted(_fields(owner))) if owner is not None else ""
        message = "unknown field" + (f" (this object takes: {accepted})" if accepted else "")
        return APIError(f"{path}: {message}", param=path, code="unknown_parameter")
    if kind == "unsupported_parameter":
        return APIError(f"{path}: not supported: {error['msg']}", param=path, code="unsupported_parameter")
    # A union whose every branch failed here: "Input should be a valid string or a valid list".
    problems = list(dict.fromkeys(other["msg"] for (where, _), other in located if where == path))
    if len(problems) > 1 and all(problem.startswith(_SHOULD) for problem in problems):
        problems = [_SHOULD + " or ".join(problem.removeprefix(_SHOULD) for problem in problems)]
    code = "unsupported_value" if kind == "unsupported_value" else "invalid_value"
    return APIError(f"{path or 'body'}: {problems[0]}", param=path or None, code=code)


_SHOULD = "Input should be "


def _path(model: type[BaseModel] | None, error: Any) -> tuple[str, type[BaseModel] | None]:
    """The field path of one Pydantic error (an unsupported field's name comes in its context)."""
    loc = tuple(part for part in error.get("loc", ()) if part != "body")
    if error.get("type") == "unsupported_parameter":
        loc += (error["ctx"]["field"],)
    return field_path(model, loc)


def field_path(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> tuple[str, type[BaseModel] | None]:
    """``loc`` written as the client wrote the field (``messages[0].content``), without the
    branch labels Pydantic adds inside unions (``content.str``); also the model that holds (or
    would hold) the last field."""
    path = ""
    options = _options(model)  # the types the value reached so far may have
    owner: type[BaseModel] | None = None
    labelled = False
    for part in loc:
        if isinstance(part, str) and len(options) > 1 and not labelled:
            labelled = True  # a union's branch label, not a field
            continue
        labelled = False
        if isinstance(part, int):
            path += f"[{part}]"
            items = [_item(option) for option in options if _item(option) is not None]
            options = _options(items[0]) if items else [Any]
            continue
        models = [option for option in options if isinstance(option, type) and issubclass(option, BaseModel)]
        owner = next((holder for holder in models if part in _fields(holder)), models[0] if models else None)
        path += f".{part}" if path else str(part)
        field = _fields(owner).get(part) if owner is not None else None
        options = _options(field.annotation) if field is not None else [Any]
    return path, owner


def _options(kind: Any) -> list[Any]:
    """The types a value of ``kind`` may have (a union's members, ``None`` left out)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return [option for option in typing.get_args(kind) if option is not type(None)]
    return [kind]


def _item(kind: Any) -> Any:
    """The element type of a list type, else None."""
    if typing.get_origin(kind) is list:
        return (typing.get_args(kind) or (Any,))[0]
    return None


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """A model's fields by the name the client writes (the alias where there is one)."""
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _too_large(size: int, limit: int) -> APIError:
    return APIError(f"body: {size} bytes or more, over the limit of {limit}", code="body_too_large")
