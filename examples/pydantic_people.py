"""Pydantic models in, validated instances out: a Person from each of two contact cards.

    python examples/pydantic_people.py                 # the bundled demo model and its draft
    python examples/pydantic_people.py --model PATH    # any local folder or hub id

``structspec.generate`` constrains the output to the model's JSON Schema (here with an optional
field and a bounded integer) and returns a validated ``Person`` instance. Exits 1 if the token
limit ran out before an output was complete, 2 if a card does not fit the model's context.
"""

from __future__ import annotations

import argparse
import sys

from pydantic import BaseModel, ConfigDict, Field

import structspec
from structspec.generation import ContextLengthError, GenerationError
from structspec.jsonschema.pydantic_models import model_schema
from structspec.models import load
from structspec.models.prompt import extraction_messages


class Person(BaseModel):
    """A contact: required and optional fields; extra members are not allowed."""

    model_config = ConfigDict(extra="forbid")

    name: str
    email: str | None = None
    company: str
    city: str
    age: int = Field(ge=0, le=130)


CARDS = [
    "Contact card\nName: Ken Ito\nCompany: Copper Pine Ltd\nCity: Osaka\nAge: 28\nEmail: ken.ito@example.jp",
    "New contact\nMy name is Ada Byrne. I work at Northwind Labs. I live in Dublin. I am 41 years old.",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="target model (default: the bundled demo model)")
    parser.add_argument("--draft-model", help="draft model (default: the bundled draft, with the default model)")
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()

    model, tokenizer = load(args.model or "demo")
    draft_name = args.draft_model or (None if args.model else "demo-draft")
    draft = load(draft_name)[0] if draft_name else None

    schema = model_schema(Person)
    for card in CARDS:
        try:
            person = structspec.generate(
                model, tokenizer, Person, extraction_messages(card, schema),
                draft_model=draft, max_new_tokens=args.max_tokens, speculative=structspec.SpecConfig(),
            )
        except GenerationError as exc:
            print(f"stopped at --max-tokens {args.max_tokens} before the output was complete: {exc}", file=sys.stderr)
            return 1
        except ContextLengthError as exc:  # checked before decoding
            print(f"the card is too long for this model: {exc}", file=sys.stderr)
            return 2
        print(repr(person))  # a validated Person instance
    return 0


if __name__ == "__main__":
    sys.exit(main())
