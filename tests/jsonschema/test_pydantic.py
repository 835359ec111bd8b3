"""Pydantic models: their schema compiles, their dumps are accepted, accepted text validates."""

from __future__ import annotations

import enum
import json
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from structspec.grammar import Grammar
from structspec.jsonschema import schema_to_gbnf
from structspec.jsonschema.pydantic_models import InstanceValidationError, model_schema, validate_instance


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    street: str = Field(max_length=30)
    zip_code: str = Field(pattern=r"^[0-9]{5}$")


class Cat(BaseModel):
    pet_type: Literal["cat"]
    lives: int = Field(ge=0, le=9)


class Dog(BaseModel):
    pet_type: Literal["dog"]
    good: bool = True


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, lt=150)
    score: float | None = None
    color: Color = Color.RED
    address: Address | None = None
    pet: Annotated[Cat | Dog, Field(discriminator="pet_type")]
    tags: list[str] = Field(default_factory=list, max_length=3)


class Tree(BaseModel):
    label: str
    children: list[Tree] = []


def grammar_for(model: type[BaseModel]) -> Grammar:
    return Grammar.from_gbnf(schema_to_gbnf(model_schema(model)))


PEOPLE = [
    Person(name="Ann", age=31, pet=Cat(pet_type="cat", lives=3)),
    Person(
        name='Bo "B"',
        age=0,
        score=1.5,
        color=Color.GREEN,
        address=Address(street="Main 1", zip_code="12345"),
        pet=Dog(pet_type="dog"),
        tags=["x", "y"],
    ),
]


@pytest.mark.parametrize("person", PEOPLE)
def test_dumps_are_accepted_and_round_trip(person: Person) -> None:
    grammar = grammar_for(Person)
    text = person.model_dump_json()
    assert grammar.matches(text)
    assert validate_instance(Person, text) == person


@pytest.mark.parametrize(
    "text",
    [
        '{"name":"A","age":200,"pet":{"pet_type":"cat","lives":1}}',
        '{"name":"A","age":1,"pet":{"pet_type":"cat","lives":10}}',
        '{"name":"A","age":1,"pet":{"pet_type":"fish"}}',
        '{"name":"A","age":1,"pet":{"pet_type":"dog"},"tags":["a","b","c","d"]}',
        '{"name":"A","age":1,"pet":{"pet_type":"dog"},"address":{"street":"s","zip_code":"1234"}}',
        '{"name":"A","age":1,"pet":{"pet_type":"dog"},"color":"blue"}',
    ],
)
def test_invalid_texts_are_rejected_by_both(text: str) -> None:
    assert not grammar_for(Person).matches(text)
    with pytest.raises(InstanceValidationError) as info:
        validate_instance(Person, text)
    assert info.value.errors and "loc" in info.value.errors[0]


def test_recursive_model_any_depth() -> None:
    tree = Tree(label="r", children=[Tree(label="a", children=[Tree(label="b")]), Tree(label="c")])
    for _ in range(20):
        tree = Tree(label="d", children=[tree])
    grammar = grammar_for(Tree)
    assert grammar.matches(tree.model_dump_json())
    assert not grammar.matches('{"label":"x","children":[{"children":[]}]}')


def test_schema_is_plain_json_and_bad_models_are_refused() -> None:
    schema = model_schema(Person)
    assert json.loads(json.dumps(schema)) == schema
    assert "$defs" in schema and "Cat" in schema["$defs"]
    with pytest.raises(TypeError, match="BaseModel"):
        model_schema(dict)
    with pytest.raises(TypeError):
        validate_instance(int, "1")


class Loose(BaseModel, extra="allow"):
    properties: dict[str, int] = Field(default={"properties": {"a": {}}})


def test_models_are_closed_to_undeclared_keys_unless_they_allow_extras() -> None:
    person = grammar_for(Person)
    assert not person.matches('{"name":"Ann","age":3,"pet":{"pet_type":"cat","lives":1},"extra":1}')
    assert not person.matches('{"name":"Ann","age":3,"pet":{"pet_type":"cat","lives":1,"extra":1}}')
    assert person.matches('{"name":"Ann","age":3,"pet":{"pet_type":"cat","lives":1}}')
    schema = model_schema(Loose)
    assert schema["additionalProperties"] is True  # extra="allow" stays open
    assert schema["properties"]["properties"]["default"] == {"properties": {"a": {}}}  # data is not a schema
    assert "additionalProperties" not in schema["properties"]
    assert grammar_for(Loose).matches('{"properties":{"x":1},"other":[1]}')
