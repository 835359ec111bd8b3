"""The bundled demo models: prompt format, corpus generator, tokenizer, loading and constrained output."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import jinja2
import jsonschema
import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(REPO / "tools"))

import make_extraction_corpus as corpus

from structspec import Grammar
from structspec.models import DEFAULT_DRAFT, DEFAULT_TARGET, load, resolve
from structspec.models.prompt import (
    CHAT_TEMPLATE,
    END_TOKEN,
    SPECIAL_TOKENS,
    compact_json,
    extraction_messages,
    render_answer,
    render_prompt,
)

HAS_WEIGHTS = (DEFAULT_TARGET / "model.safetensors").is_file() and (DEFAULT_DRAFT / "model.safetensors").is_file()
needs_weights = pytest.mark.skipif(not HAS_WEIGHTS, reason="demo weights absent; run tools/train_demo_models.py")

messages_strategy = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=40)}),
    min_size=1,
    max_size=4,
)


@functools.cache
def _demo_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(DEFAULT_TARGET)


TEMPLATE = jinja2.Environment().from_string(CHAT_TEMPLATE)


@settings(max_examples=40, deadline=None)
@given(messages_strategy, st.booleans())
def test_chat_template_renders_like_render_prompt(messages, add_generation_prompt):
    rendered = TEMPLATE.render(
        messages=messages, add_generation_prompt=add_generation_prompt
    )
    assert rendered == render_prompt(messages, add_generation_prompt)


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=80).filter(str.strip), st.dictionaries(st.text(max_size=8), st.integers()))
def test_extraction_prompt_carries_text_and_schema(text, schema):
    (message,) = extraction_messages(text, schema)
    assert message["role"] == "user"
    assert f"Schema: {compact_json(schema)}\n" in message["content"]
    assert message["content"].endswith("Text:\n" + text.strip())
    assert json.loads(render_answer(schema).removesuffix(END_TOKEN)) == schema


def test_extraction_messages_rejects_bad_input():
    with pytest.raises(TypeError, match="schema must be a JSON object"):
        extraction_messages("text", ["not", "a", "schema"])
    with pytest.raises(TypeError, match="text must be a str"):
        extraction_messages(b"bytes", {})


def test_corpus_is_deterministic_per_seed():
    first = [e.record() for e in corpus.generate(40, seed=7, heldout=False)]
    assert first == [e.record() for e in corpus.generate(40, seed=7, heldout=False)]
    assert first != [e.record() for e in corpus.generate(40, seed=8, heldout=False)]


def test_heldout_shares_no_template_with_training():
    train = corpus.generate(1500, seed=0, heldout=False)
    heldout = corpus.generate(300, seed=0, heldout=True)
    train_templates = {t for e in train for t in e.templates}
    heldout_templates = {t for e in heldout for t in e.templates}
    assert not train_templates & heldout_templates
    assert {e.domain for e in heldout} - {e.domain for e in train} == set(corpus.HELDOUT_DOMAINS)
    assert {e.layout for e in heldout}.isdisjoint(e.layout for e in train)


@pytest.mark.parametrize("heldout", [False, True])
def test_gold_answers_follow_their_schema(heldout):
    for example in corpus.generate(300, seed=1, heldout=heldout):
        jsonschema.Draft202012Validator(example.schema).validate(example.answer)
        assert list(example.answer) == list(example.schema["properties"])


@pytest.mark.parametrize("heldout", [False, True])
def test_gold_answers_match_the_schema_grammar(heldout):
    # Schema compilation is the slow part (formats such as email), so a few examples suffice.
    for example in corpus.generate(3, seed=4, heldout=heldout):
        assert Grammar.from_json_schema(example.schema).matches(compact_json(example.answer))


def test_gold_strings_are_copied_from_the_text():
    for example in corpus.generate(300, seed=2, heldout=False):
        for key, value in example.answer.items():
            spec = example.schema["properties"][key]
            if spec == {"type": "string"} and key != "start_time":  # times are normalised to 24-hour HH:MM
                assert value in example.text, (key, value, example.text)


@pytest.mark.skipif(not (DEFAULT_TARGET / "tokenizer.json").is_file(), reason="demo tokenizer absent")
@pytest.mark.parametrize("folder", [DEFAULT_TARGET, DEFAULT_DRAFT])
def test_bundled_tokenizer_loads_with_chat_template(folder):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token == END_TOKEN
    for token in SPECIAL_TOKENS:
        assert tokenizer(token, add_special_tokens=False)["input_ids"] == [tokenizer.convert_tokens_to_ids(token)]
    messages = extraction_messages("Zoë Łukasiewicz, 田中 太郎: €1.234,50", {"type": "object"})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == render_prompt(messages)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


@pytest.mark.skipif(not (DEFAULT_TARGET / "tokenizer.json").is_file(), reason="demo tokenizer absent")
@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12), st.sampled_from([" ", "\n", '"', ":"]))
def test_bundled_tokenizer_spells_a_word_alike_wherever_it_stands(word, before):
    """Copying a value from the text into the JSON is copying its token ids."""
    tokenizer = _demo_tokenizer()
    assert tokenizer.tokenize(before + word) == tokenizer.tokenize(before) + tokenizer.tokenize(word)


def test_import_structspec_does_not_import_torch():
    code = "import sys, structspec, structspec.models.prompt; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def test_resolve_aliases_and_bad_names(tmp_path):
    assert resolve("demo") == DEFAULT_TARGET
    assert resolve("demo-draft") == DEFAULT_DRAFT
    assert resolve(tmp_path) == tmp_path
    assert resolve("owner/model") == "owner/model"
    with pytest.raises(OSError, match="neither a local folder nor a hub id"):
        load(str(tmp_path / "missing"))


def test_an_unreachable_hub_fails_at_once_for_an_id_not_cached(monkeypatch):
    import structspec.models as models

    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    with pytest.raises(OSError, match="'owner/not-cached' is not in the local Hugging Face cache, and the hub "
                                      "cannot be reached"):
        load("owner/not-cached")


def test_hub_reachable_is_false_offline_or_when_nothing_answers(monkeypatch):
    from huggingface_hub import constants

    from structspec.models import hub_reachable

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert not hub_reachable()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused here
    assert not hub_reachable(timeout_s=1.0)


@needs_weights
def test_demo_models_load_as_one_family():
    import torch

    target, tokenizer = load("demo")
    draft, draft_tokenizer = load("demo-draft", dtype=torch.float32)
    assert tokenizer.get_vocab() == draft_tokenizer.get_vocab()
    assert target.config.vocab_size == draft.config.vocab_size
    assert next(target.parameters()).dtype == torch.float32
    assert sum(p.numel() for p in draft.parameters()) < sum(p.numel() for p in target.parameters())


HELD_OUT_STYLE = [
    (
        "Job ad\nHello,\n\nVacancy for a Data Engineer. Employer: Zenith Labs. Wage €72.000,00. Advertised 3 May 2026."
        "\n\nKind regards",
        {"type": "object", "properties": {"job_title": {"type": "string"}, "salary": {"type": "number"},
         "posted": {"type": "string", "format": "date"}}, "required": ["job_title", "salary", "posted"],
         "additionalProperties": False},
    ),
    (
        "Postal details\n• Addressee — Søren Núñez\n• Post code — 8001\n• Country/region — Switzerland",
        {"type": "object", "properties": {"recipient": {"type": "string"}, "postal_code": {"type": "string"},
         "country": {"type": "string"}}, "required": ["recipient", "postal_code", "country"],
         "additionalProperties": False},
    ),
]


@needs_weights
@pytest.mark.parametrize(("text", "schema"), HELD_OUT_STYLE)
def test_constrained_greedy_output_is_schema_valid(text, schema):
    from structspec.generation import Generator

    model, tokenizer = load("demo")
    generator = Generator(model, tokenizer)
    result = generator.generate(extraction_messages(text, schema), schema, max_new_tokens=160)
    assert result.stats.stop_reason in ("eos", "grammar")
    jsonschema.Draft202012Validator(schema).validate(json.loads(result.text))
    shortest = int(generator.compile(schema)[1].matcher().tokens_to_finish())
    cut = generator.generate(extraction_messages(text, schema), schema, max_new_tokens=shortest)
    assert cut.stats.tokens <= shortest
    jsonschema.Draft202012Validator(schema).validate(json.loads(cut.text))
