"""The Generator API on the plain (non-speculative) path: results, values and stats, Pydantic
output (``structspec.generate``), streaming without split characters, prompts and chat
templates, end-of-sequence only where the grammar accepts, and clear errors on bad input.
Models are random tiny Llamas over real tokenizers, plus the real stories260K weights."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from typing import Annotated, Literal

import jsonschema
import pytest
from conftest import REPO, tokenizer_dir
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, field_validator
from tiny_models import one_thread, stories_model, tiny_llama, tokenizer

import structspec
from structspec import Grammar, GrammarError
from structspec.generation import GenerationError, Generator, SpecConfig
from structspec.generation.detokenize import TextAssembler
from structspec.generation.prompt import prompt_ids
from structspec.jsonschema.pydantic_models import InstanceValidationError

__all__ = ["one_thread"]

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "rain": {"type": "boolean"}},
    "required": ["city", "rain"],
    "additionalProperties": False,
}


def _gen(name: str = "llama2", seed: int = 0, **kwargs) -> Generator:
    tok = tokenizer(name)
    return Generator(tiny_llama(len(tok), seed), tok, **kwargs)


def test_result_value_and_stats() -> None:
    result = _gen().generate("Weather: ", SCHEMA, max_new_tokens=60)
    assert result.stats.stop_reason == "grammar"  # '}' completes the object; nothing may follow
    assert json.loads(result.text) == result.value
    jsonschema.validate(result.value, SCHEMA)
    stats = result.stats
    assert stats.tokens == len(result.token_ids) == stats.target_forwards
    assert stats.drafted == stats.accepted == 0 and stats.tokens_per_forward == 1.0
    assert set(stats.seconds) == {"mask", "draft", "target", "other", "total"}
    assert stats.seconds["total"] >= stats.seconds["target"] > 0
    assert json.loads(json.dumps(stats.to_dict()))["tokens"] == stats.tokens


def test_max_new_tokens_stops_with_no_value() -> None:
    result = _gen().generate("Weather: ", SCHEMA, max_new_tokens=3)
    assert result.stats.stop_reason == "max_new_tokens" and result.stats.tokens == 3
    assert result.value is None
    assert result.text.startswith("{")


@pytest.mark.parametrize("seed", range(6))
def test_eos_only_where_the_grammar_accepts(seed: int) -> None:
    gbnf = 'root ::= [a-z]{2,5} ("-" [0-9])?'
    gen = _gen("gpt2", seed=seed)
    result = gen.generate("word: ", gbnf, max_new_tokens=12, temperature=1.5, seed=seed)
    assert result.stats.stop_reason in ("eos", "grammar")
    assert Grammar.from_gbnf(gbnf).matches(result.text)
    if result.stats.stop_reason == "eos":
        assert result.token_ids[-1] in gen.vocabulary.eos_ids


class Closed(BaseModel):
    """No extra keys (``additionalProperties: false``), so a random model's output stays short."""

    model_config = ConfigDict(extra="forbid")


class Address(Closed):
    street: str = Field(max_length=6)
    zip: int | None = Field(default=None, ge=0, le=99)


class Cat(Closed):
    kind: Literal["cat"]
    lives: int = Field(ge=1, le=9)


class Dog(Closed):
    kind: Literal["dog"]
    good: bool


class Person(Closed):
    name: str = Field(max_length=6)
    role: Literal["admin", "user"]
    home: Address
    pets: list[Annotated[Cat | Dog, Field(discriminator="kind")]] = Field(max_length=2)
    nickname: str | None = Field(default=None, max_length=4)


def test_pydantic_generate_returns_a_validated_instance() -> None:
    tok = tokenizer("llama2")
    person = structspec.generate(tiny_llama(len(tok), 1), tok, Person, "A person: ", max_new_tokens=200)
    assert isinstance(person, Person)
    assert all(isinstance(p, (Cat, Dog)) for p in person.pets)


def test_pydantic_lists_and_speculative_path() -> None:
    tok = tokenizer("llama2")
    model = tiny_llama(len(tok), 2)
    people = structspec.generate(model, tok, list[Address], "Addresses: ", max_new_tokens=200,
                                 speculative=SpecConfig(draft_cost=0.0), draft_model=model)
    assert isinstance(people, list) and all(isinstance(a, Address) for a in people)


class Even(Closed):
    n: int = Field(ge=0, le=9)

    @field_validator("n")
    @classmethod
    def even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("n must be even")
        return value


def test_pydantic_errors_carry_detail() -> None:
    tok = tokenizer("llama2")
    model = tiny_llama(len(tok), 0)
    with pytest.raises(GenerationError, match="before the Person was complete") as info:
        structspec.generate(model, tok, Person, "A person: ", max_new_tokens=4)
    assert info.value.result.stats.stop_reason == "max_new_tokens"
    # A validator the schema cannot express: some seed produces an odd n, rejected with detail.
    failures = []
    for seed in range(8):
        try:
            structspec.generate(model, tok, Even, "n: ", max_new_tokens=20, temperature=2.0, seed=seed)
        except InstanceValidationError as exc:
            failures.append(exc)
    assert failures and all(e.errors[0]["loc"] == ("n",) and "even" in str(e) for e in failures)


LOOPING = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string"}}, "n": {"type": "integer"}},
    "required": ["tags", "n"],
    "additionalProperties": False,
}


@functools.cache
def _loop_prone() -> Generator:
    """Random weights over GPT-2's 50k ids: strings and arrays rarely close on their own."""
    tok = tokenizer("gpt2")
    return Generator(tiny_llama(len(tok), 11), tok, draft_model=tiny_llama(len(tok), 12))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), slack=st.integers(0, 40), temperature=st.sampled_from([0.0, 1.0, 2.0]),
       speculative=st.booleans())
def test_every_output_is_complete_when_max_new_tokens_holds_the_shortest(seed, slack, temperature, speculative):
    gen = _loop_prone()
    _, compiled = gen.compile(LOOPING)
    budget = int(compiled.matcher().tokens_to_finish()) + slack
    result = gen.generate("Tags: ", LOOPING, max_new_tokens=budget, temperature=temperature, seed=seed,
                          speculative=SpecConfig() if speculative else None)
    assert result.stats.tokens <= budget
    jsonschema.validate(result.value, LOOPING)
    assert json.loads(result.text) == result.value


def test_budget_guard_cuts_a_run_that_would_go_on() -> None:
    gen = _loop_prone()
    free = gen.generate("Tags: ", LOOPING, max_new_tokens=300)
    assert free.stats.tokens > 60
    tight = gen.generate("Tags: ", LOOPING, max_new_tokens=60)
    assert tight.stats.budget_cuts > 0 and tight.stats.stop_reason == "max_new_tokens"
    jsonschema.validate(tight.value, LOOPING)
    assert tight.token_ids[:40] == free.token_ids[:40]  # untouched until the budget runs short


def test_stream_pieces_join_to_the_text_and_never_split_characters() -> None:
    gbnf = 'root ::= "é中😀" [a-z]{1,3} "ü"'
    gen = _gen("llama2", seed=5)
    stream = gen.generate("x", gbnf, max_new_tokens=30, stream=True, speculative=SpecConfig())
    pieces = list(stream)
    assert stream.result is not None and "".join(pieces) == stream.result.text
    assert all("\ufffd" not in piece for piece in pieces)
    assert Grammar.from_gbnf(gbnf).matches(stream.result.text)
    assert len(stream.result.token_ids) > len(pieces)  # byte-fallback tokens were held back


def test_generations_of_a_thread_share_one_mask_worker_and_streams_may_interleave() -> None:
    """One mask worker per calling thread, kept across generations (no thread started per
    generation); two streams advanced in turn in one thread give what each gives alone, and a
    stream closed early leaves nothing running."""
    import threading

    gen = _gen("llama2", seed=3)
    alone = [gen.generate("Weather: ", SCHEMA, max_new_tokens=40, speculative=spec).token_ids
             for spec in (None, SpecConfig())]
    worker = gen._prefetch()
    threads = set(worker._pool._threads)  # the executor's worker threads
    streams = [gen.generate("Weather: ", SCHEMA, max_new_tokens=40, stream=True, speculative=spec)
               for spec in (None, SpecConfig())]
    pending = [iter(stream) for stream in streams]
    while pending:
        for piece_stream in list(pending):
            if next(piece_stream, None) is None:
                pending.remove(piece_stream)
    assert [stream.result.token_ids for stream in streams] == alone
    early = iter(gen.generate("Weather: ", SCHEMA, max_new_tokens=40, stream=True))
    next(early)
    early.close()
    assert gen._prefetch() is worker and worker._pending is None
    assert set(worker._pool._threads) == threads and len(threads) <= 1
    other: list = []
    thread = threading.Thread(target=lambda: other.append(gen._prefetch()))
    thread.start()
    thread.join()
    assert other[0] is not worker  # another thread, its own worker


def test_text_assembler_holds_back_partial_characters() -> None:
    tok = tokenizer("llama2")
    vocabulary = structspec.Vocabulary.from_tokenizer(tok)
    ids = vocabulary.encode_bytes("a😀".encode())
    assembler = TextAssembler(vocabulary, tok)
    pieces = [assembler.add([i]) for i in ids]
    assert pieces[0] == "a" and pieces[-1] == "😀" and all(p == "" for p in pieces[1:-1])


PIECES = [b"a", "é".encode()[:1], "é".encode()[1:], "😀".encode()[:3], "😀".encode()[3:], b"\xff", b" ", None]


@given(st.lists(st.integers(0, len(PIECES) - 1), max_size=24), st.data())
def test_text_comes_out_the_same_however_the_tokens_are_grouped(ids: list[int], data) -> None:
    """Rounds commit tokens in groups: any grouping gives the text of the bytes decoded whole
    (split characters held back, invalid bytes replaced, end-of-sequence adding nothing)."""
    vocabulary = structspec.Vocabulary.from_token_bytes(PIECES, eos_ids=[len(PIECES) - 1])
    assembler, at = TextAssembler(vocabulary, None), 0
    pieces = []
    while at < len(ids):
        size = data.draw(st.integers(1, len(ids) - at))
        pieces.append(assembler.add(ids[at : at + size]))
        at += size
    pieces.append(assembler.finish())
    whole = b"".join(PIECES[i] or b"" for i in ids).decode("utf-8", "replace")
    assert "".join(pieces) == assembler.text == whole


def test_prompts_and_chat_templates() -> None:
    from transformers import AutoTokenizer

    tok = tokenizer("llama2")
    messages = [{"role": "user", "content": "hi"}]
    assert prompt_ids(tok, messages) == tok("user: hi\nassistant: ")["input_ids"]
    templated = AutoTokenizer.from_pretrained(tokenizer_dir("llama2"))
    templated.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }} {% endfor %}" \
                              "{% if add_generation_prompt %}[assistant]{% endif %}"
    assert prompt_ids(templated, messages) == templated("[user] hi [assistant]", add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match="'role' and 'content'"):
        prompt_ids(tok, [{"content": "x"}])
    with pytest.raises(TypeError, match="prompt must be"):
        prompt_ids(tok, 42)


def test_bad_input_gets_clear_errors() -> None:
    gen = _gen()
    with pytest.raises(TypeError, match="constraint must be"):
        gen.generate("x", 3.5)
    with pytest.raises(GrammarError):
        gen.generate("x", "root ::= [")
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen.generate("x", SCHEMA, max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        gen.generate("x", SCHEMA, temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        gen.generate("x", SCHEMA, top_p=0)
    with pytest.raises(ValueError, match="no draft_model"):
        gen.generate("x", SCHEMA, speculative=SpecConfig(sources=("draft",)))
    with pytest.raises(ValueError, match="sources"):
        SpecConfig(sources=("magic",))


def test_draft_model_must_share_the_vocabulary() -> None:
    llama2, gpt2 = tokenizer("llama2"), tokenizer("gpt2")
    target = tiny_llama(len(llama2), 0)
    with pytest.raises(ValueError, match="does not share the target's vocabulary: token id"):
        Generator(target, llama2, draft_model=tiny_llama(len(gpt2), 0), draft_tokenizer=gpt2)
    padded = tiny_llama(len(llama2) + 64, 0)  # a wider logits row over the same tokenizer is fine
    result = Generator(target, llama2, draft_model=padded).generate("x", SCHEMA, speculative=SpecConfig())
    assert result.value is not None


def test_stories260k_person_from_a_story() -> None:
    tok = tokenizer("stories260K")
    gen = Generator(stories_model(), tok)
    result = gen.generate("Lily was happy. She had a dog.", SCHEMA, max_new_tokens=40)
    jsonschema.validate(result.value, SCHEMA)


def test_import_structspec_does_not_import_torch() -> None:
    code = "import sys, structspec; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
