"""The server's schema depth limit measures what the converter measures, once per subschema."""

from __future__ import annotations

from typing import Any

import pytest

from structspec.budget import MAX_NESTING
from structspec.errors import SchemaError
from structspec.jsonschema import schema_to_gbnf
from structspec.server.errors import APIError
from structspec.server.limits import Limits


def objects(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_each_object_counts_once() -> None:
    limits = Limits(max_schema_depth=12)
    limits.check_schema(objects(11), "schema")  # 12 levels: 23 nested JSON objects
    with pytest.raises(APIError) as caught:
        limits.check_schema(objects(12), "schema")
    assert caught.value.code == "schema_too_deep" and "#" + "/properties/a" * 12 in caught.value.message


@pytest.mark.parametrize("levels", [MAX_NESTING - 2, MAX_NESTING - 1, MAX_NESTING, MAX_NESTING + 1])
def test_default_agrees_with_the_converter(levels: int) -> None:
    schema = objects(levels)
    try:
        Limits().check_schema(schema, "schema")
        server_accepts = True
    except APIError:
        server_accepts = False
    try:
        schema_to_gbnf(schema)
        converter_accepts = True
    except SchemaError:
        converter_accepts = False
    assert server_accepts == converter_accepts == (levels < MAX_NESTING)


def test_limit_above_the_converters_is_refused() -> None:
    with pytest.raises(ValueError, match=f"nesting limit of {MAX_NESTING}"):
        Limits(max_schema_depth=MAX_NESTING + 1)


def test_non_finite_numbers_are_an_invalid_schema() -> None:
    with pytest.raises(APIError) as caught:  # the converter's OverflowError became an HTTP 500 before
        Limits().check_schema({"type": "number", "maximum": float("inf")}, "schema")
    assert caught.value.code == "invalid_schema" and "#/maximum" in caught.value.message


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-tokens", "0"], "argument --max-tokens: must be at least 1, got 0"),
        (["--default-max-tokens", "0"], "argument --default-max-tokens: must be at least 1, got 0"),
        (["--default-max-tokens", "4000"],
         "argument --default-max-tokens: must not exceed the most a request may ask for (2048), got 4000"),
        (["--max-schema-depth", "100"],
         f"argument --max-schema-depth: must be at most the converter's nesting limit of {MAX_NESTING}, got 100"),
        (["--compile-timeout", "0"], "argument --compile-timeout: must be at least 0.001, got 0.0"),
    ],
)
def test_serve_names_a_bad_limit_by_its_flag(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("uvicorn", reason="the server extra is not installed")
    from structspec.cli import main

    assert main(["serve", *flags]) == 2  # refused before the model loads
    assert capsys.readouterr().err == f"structspec: error: {message}\n"
