"""The FastAPI application: OpenAI-compatible chat completions, extraction, models and health.

Handlers validate and convert the request on the event loop (grammars are compiled in child
processes, waited for in the thread pool, and cached by :class:`ConstraintCache`), then hand
generation to the :class:`GenerationWorker`, whose one thread decodes a batch of requests
together; see :mod:`structspec.server.worker` for the concurrency design.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from structspec.generation.sampling import Sampling
from structspec.masks.compiled import CompiledGrammar
from structspec.server.body import parse, read_json
from structspec.server.collector import CollectionPauses, settle
from structspec.server.constraints import JSON_OBJECT_SCHEMA, ConstraintCache
from structspec.server.engine import Completion, Engine
from structspec.server.errors import APIError
from structspec.server.handlers import install_handlers
from structspec.server.limits import Limits
from structspec.server.openai_format import TextReply, chat_body, first_event, sse_chunks
from structspec.server.protocol import ChatRequest, ExtractRequest
from structspec.server.tool_replies import ToolReply
from structspec.server.tools import tool_calling
from structspec.server.worker import GenerationWorker

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def create_app(engine: Engine, limits: Limits | None = None) -> FastAPI:
    """The server application for one loaded model."""
    limits = limits or Limits()
    cache = ConstraintCache(limits, engine.vocabulary)
    worker = GenerationWorker(engine.batch, limits.max_queue, limits.max_batch)
    pauses = CollectionPauses()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        settle()
        pauses.install()
        threading.Thread(target=cache.warm, name="structspec-compile-warm", daemon=True).start()
        yield
        pauses.remove()
        worker.close()
        cache.close()

    app = FastAPI(title="structspec", summary="Grammar-constrained generation over HTTP", lifespan=lifespan)
    install_handlers(app)
    app.state.engine = engine
    app.state.cache = cache
    app.state.worker = worker

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": engine.model_id,
            "queued": worker.active,
            "batch": worker.rows,
            "cancelled": worker.cancelled,
            "grammar_cache": cache.stats(),
            "gc": pauses.stats(),
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": engine.model_id, "object": "model", "created": engine.created, "owned_by": "structspec"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> JSONResponse | StreamingResponse:
        chat = parse(ChatRequest, await read_json(request, limits.max_body_bytes))
        engine.check_model(chat.model)
        sampling = _sampling(chat, engine, limits)
        constrained = chat.grammar is not None or (chat.response_format is not None
                                                   and chat.response_format.type != "text")
        calling = await run_in_threadpool(
            tool_calling, chat.tools, chat.tool_choice, chat.parallel_tool_calls, constrained, cache, limits
        )
        grammar = calling.compiled if calling else await run_in_threadpool(_chat_grammar, chat, cache)
        reply = ToolReply(calling) if calling else TextReply()
        messages = [m.for_template() for m in chat.messages]
        tools = [tool.model_dump(exclude_none=True) for tool in chat.tools] if chat.tools else None
        events = worker.submit(engine.job(messages, grammar, sampling, tools=tools))
        reply_id = f"chatcmpl-{uuid.uuid4().hex}"
        if chat.stream:
            usage = chat.stream_options is not None and chat.stream_options.include_usage
            first = await first_event(events)  # problems found before the first token still get a 400
            chunks = sse_chunks(first, events, reply_id, engine.model_id, usage, reply)
            return StreamingResponse(chunks, media_type="text/event-stream", headers=SSE_HEADERS)
        completion = await _complete(request, events)
        return JSONResponse(chat_body(completion, reply_id, engine.model_id, reply))

    @app.post("/v1/extract")
    async def extract(request: Request) -> dict[str, Any]:
        job = parse(ExtractRequest, await read_json(request, limits.max_body_bytes))
        engine.check_model(job.model)
        sampling = _sampling(job, engine, limits)
        try:
            messages = engine.extraction_messages(job.text, job.schema_, job.instructions)
        except ValueError as exc:
            raise APIError(f"text: {exc}", param="text", code="invalid_value") from None
        grammar = await run_in_threadpool(
            cache.from_schema, job.schema_, "schema", source=job.text, grounded=job.grounded
        )
        completion = await _complete(request, worker.submit(engine.job(messages, grammar, sampling, "text")))
        try:
            data = json.loads(completion.text)
        except json.JSONDecodeError:
            raise APIError(
                f"max_tokens: generation stopped after {completion.completion_tokens} tokens, before the JSON "
                "was complete; allow more tokens",
                param="max_tokens",
                code="incomplete_output",
            ) from None
        return {"data": data, "stats": completion.stats}

    return app


def _sampling(request: ChatRequest | ExtractRequest, engine: Engine, limits: Limits) -> Sampling:
    """The request's sampling options over the server's defaults, its token count within the limits."""
    requested, field = request.token_budget()
    return request.sampling(engine.defaults, limits.tokens(requested, field), field)


def _chat_grammar(chat: ChatRequest, cache: ConstraintCache) -> CompiledGrammar | None:
    """The grammar a chat request asks for (None for free text)."""
    response_format = chat.response_format
    wants_json = response_format is not None and response_format.type != "text"
    if chat.grammar is not None and wants_json:
        raise APIError("give either grammar or a JSON response_format, not both", param="grammar",
                       code="conflicting_constraints")
    if chat.grammar is not None:
        return cache.from_gbnf(chat.grammar, "grammar")
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return cache.from_schema(JSON_OBJECT_SCHEMA, "response_format")
    spec = response_format.json_schema
    if spec is None:
        raise APIError("response_format.json_schema is required when type is json_schema",
                       param="response_format.json_schema", code="missing_field")
    return cache.from_schema(spec.schema_, "response_format.json_schema.schema", strict=spec.strict is not False)


async def _complete(request: Request, events: AsyncIterator[str | Completion]) -> Completion:
    """The finished generation; if the client disconnects first, the job is cancelled."""

    async def result() -> Completion:
        async for event in events:
            if isinstance(event, Completion):
                return event
        raise RuntimeError("generation ended without a result")

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    finished, watcher = asyncio.create_task(result()), asyncio.create_task(disconnected())
    try:
        await asyncio.wait((finished, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        finished.cancel()  # no-op once it is done; otherwise it stops the job (client gone)
    if not finished.done() or finished.cancelled():
        raise APIError("client disconnected", code="client_disconnected")
    return finished.result()
