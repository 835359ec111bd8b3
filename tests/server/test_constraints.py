"""The server's grammar cache: compiled off the worker within a time limit, one compilation per
constraint however many requests ask at once, and bounded in bytes as masks accumulate."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from tiny_models import tokenizer

from structspec.server.compile_pool import CompilePool
from structspec.server.constraints import ConstraintCache
from structspec.server.errors import APIError
from structspec.server.limits import Limits
from structspec.tokens.vocabulary import Vocabulary


def _vocab() -> Vocabulary:
    return Vocabulary.from_tokenizer(tokenizer("stories260K"))


class InProcess:
    """A pool that runs jobs here, slowly, counting them."""

    timeouts = 0
    retired = 0

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.runs = 0
        self._lock = threading.Lock()

    def run(self, function: Any, *args: Any) -> Any:
        with self._lock:
            self.runs += 1
        time.sleep(self.delay)
        return function(*args)

    def close(self) -> None:
        pass


def _schema(i: int) -> dict[str, Any]:
    return {"type": "object", "properties": {f"key{i}": {"type": "string"}, "n": {"type": "integer"}},
            "required": [f"key{i}"]}


def test_concurrent_first_requests_compile_a_schema_once() -> None:
    pool = InProcess(delay=0.3)
    cache = ConstraintCache(Limits(), _vocab(), pool)
    with ThreadPoolExecutor(6) as threads:
        results = list(threads.map(lambda _: cache.from_schema(_schema(1), "schema"), range(6)))
    assert pool.runs == 1
    assert all(result is results[0] for result in results)
    assert cache.stats()["shared"] == 5


def test_a_failed_compilation_fails_every_waiter_and_is_not_cached() -> None:
    pool = InProcess(delay=0.2)
    cache = ConstraintCache(Limits(), _vocab(), pool)
    with ThreadPoolExecutor(3) as threads:
        futures = [threads.submit(cache.from_gbnf, "root ::= (", "grammar") for _ in range(3)]
    for future in futures:
        with pytest.raises(APIError) as caught:
            future.result()
        assert caught.value.code.startswith("grammar_E")
    assert pool.runs == 1 and len(cache) == 0


def test_cache_holds_to_its_byte_budget_as_masks_accumulate() -> None:
    vocab = Vocabulary.from_tokenizer(tokenizer("gpt2"))  # 50k ids: a mask is 6 KB
    first = ConstraintCache(Limits(), vocab, InProcess()).from_schema(_schema(0), "schema")
    budget = int(first.nbytes * 2.2)
    cache = ConstraintCache(Limits(cache_bytes=budget), vocab, InProcess())
    compiled = [cache.from_schema(_schema(i), "schema") for i in range(4)]
    assert len(cache) == 2 and cache.stats()["bytes"] <= budget
    newest = compiled[-1]
    matcher = newest.matcher()
    for token in vocab.encode_bytes(b'{"key3":"once upon a time","n":12}'):
        matcher.mask_words()
        assert matcher.accept_token(token)
    assert newest.nbytes + first.nbytes > budget  # its masks now outweigh the room left beside it
    assert cache.from_schema(_schema(3), "schema") is newest  # a hit, measured again
    assert len(cache) == 1 and cache.stats()["evictions"] == 3


def test_compilation_past_the_time_limit_is_a_400_and_the_pool_recovers() -> None:
    pool = CompilePool(processes=1, timeout=0.01)  # less than a child process takes to start
    cache = ConstraintCache(Limits(compile_timeout=0.01), _vocab(), pool)
    try:
        with pytest.raises(APIError) as caught:
            cache.from_schema(_schema(5), "response_format.json_schema.schema")
        error = caught.value
        assert (error.status, error.code, error.param) == (400, "compile_timeout", "response_format.json_schema.schema")
        assert "0.01 s" in error.message
        assert cache.stats()["timeouts"] == 1
        pool.timeout = 60.0
        compiled = cache.from_schema(_schema(5), "schema")
        assert compiled.grammar.matches('{"key5":"a","n":1}')
    finally:
        cache.close()


def test_errors_raised_in_the_compile_process_come_back_as_they_are() -> None:
    cache = ConstraintCache(Limits(), _vocab(), CompilePool(processes=1, timeout=60.0))
    try:
        with pytest.raises(APIError) as caught:
            cache.from_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=x)"}}}, "schema")
        assert caught.value.status == 400 and caught.value.code == "unsupported_schema"
        assert caught.value.param.startswith("schema#/properties/a")
    finally:
        cache.close()
