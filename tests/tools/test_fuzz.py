"""A fixed-seed sample of tools/fuzz.py (seconds; the ten-minute run is in docs/robustness.md),
and the harness's own judgement of hangs and HTTP responses."""

from __future__ import annotations

import sys

import httpx
import jsonschema
import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))

import fuzz
from fuzzing.http import judge
from fuzzing.worker import Worker


def test_fixed_seed_sample_of_the_front_ends_finds_nothing() -> None:
    tally = fuzz.fuzz(["gbnf", "regex", "schema"], batches=1, batch_size=12, base_seed=0, case_timeout=60)
    assert {target: sum(counts.values()) for target, counts in tally.outcomes.items()} == {
        "gbnf": 12, "regex": 12, "schema": 12,
    }
    assert [f"{f.target} {f.kind}: {f.signature}" for f in tally.findings.values()] == []


def test_fixed_seed_sample_of_the_server_finds_nothing() -> None:
    pytest.importorskip("fastapi", reason="the server extra is not installed")
    tally = fuzz.fuzz(["http"], batches=1, batch_size=12, base_seed=0, case_timeout=60)
    assert sum(tally.outcomes["http"].values()) == 12
    assert [f"{f.kind}: {f.signature}" for f in tally.findings.values()] == []


def test_a_case_past_the_time_limit_is_a_hang_and_the_worker_recovers() -> None:
    worker = Worker()
    try:
        slow = ({"enum": [f"v{i}" for i in range(50_000)]}, True, "compact", "schema", 0)
        assert worker.run("schema", slow, timeout=0.01).kind == "hang"
        assert worker.run("regex", ("[a-c]+x", ["abx", "x"]), timeout=60).detail == "converted"
    finally:
        worker.close()


def test_a_worker_case_that_raises_is_a_traceback() -> None:
    worker = Worker()
    try:
        outcome = worker.run("regex", (None, []), timeout=60)  # not a string: a TypeError inside
    finally:
        worker.close()
    assert outcome.kind == "traceback" and "TypeError" in outcome.detail


def test_a_format_the_reference_cannot_check_is_not_judged() -> None:
    """Without the optional fqdn package jsonschema passes every string as a hostname, so the
    strings a `not` of one produces (found by the seed-4 run) are left unjudged."""
    from fuzzing.targets import schema

    unchecked = "hostname" not in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers
    outcome = schema({"not": {"format": "hostname", "type": "string"}}, True, "compact", "any", 8)
    assert outcome == ("converted, a format the reference does not check" if unchecked else "converted")
    assert schema({"not": {"format": "date", "type": "string"}}, True, "compact", "any", 8) == "converted"


@pytest.mark.parametrize(
    "dead",
    [
        {"if": {"$ref": "https://example.com/elsewhere"}},  # an if without then or else decides nothing
        {"allOf": [{"type": "integer"}, {"type": "string", "pattern": "[a--b]"}]},  # types in conflict
    ],
)
def test_a_schema_the_reference_cannot_evaluate_is_not_judged(dead: dict) -> None:
    """Found by the seed-1129 run: jsonschema evaluates every subschema it meets and raises on a
    pattern Python's re rejects or a reference that leaves the document, where the converter
    drops them because they decide nothing; the same pattern or reference where it decides
    something is refused by the converter."""
    from fuzzing.targets import schema

    live = {"type": "string", "maxLength": 3}  # the reference meets the dead branch on every string
    assert schema({"anyOf": [dead, live]}, True, "compact", "any", 8) == (
        "converted, a schema the reference cannot evaluate")
    assert schema({"type": "string", "pattern": "[a--b]"}, True, "compact", "any", 8) == "refused S001"
    assert schema({"$ref": "https://example.com/elsewhere"}, True, "compact", "any", 8) == "refused S001"


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (200, {"choices": []}, "ok"),
        (400, {"error": {"message": "m", "type": "invalid_request_error", "param": None, "code": "x"}}, "ok"),
        (500, {"error": {"message": "internal server error", "type": "server_error", "param": None, "code": None}},
         "http 500"),
        (404, {"detail": "Not Found"}, "bad error body"),
        (400, {"error": "text"}, "bad error body"),
    ],
)
def test_responses_are_judged(status: int, body: object, kind: str) -> None:
    assert judge(httpx.Response(status, json=body)).kind == kind
