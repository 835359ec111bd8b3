"""Tool calls in prompts and output: templates that take ``tools``, the fallback that writes
tools and past calls into the messages, and the structural tag of calls."""

from __future__ import annotations

import json

import pytest
from conftest import tokenizer_dir

from structspec.generation.prompt import prompt_ids
from structspec.generation.tool_calls import (
    plain_messages,
    render_call,
    template_takes_tools,
    tool_call_tag,
    tools_system_text,
)

TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time in a zone",
                                         "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                                                        "required": ["zone"], "additionalProperties": False}}}
HISTORY = [
    {"role": "user", "content": "Time in Oslo?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "CET"}}}]},
    {"role": "tool", "content": "12:00", "tool_call_id": "call_1"},
]
TOOLS_TEMPLATE = (
    "{% if tools %}[tools]{% for t in tools %}{{ t.function.name }};{% endfor %}{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<call {{ c.function.name }} {{ c.function.arguments | tojson }}>{% endfor %}"
    "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
)


def _templated(template: str | None):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir("llama2"))
    tok.chat_template = template
    return tok


def test_a_template_that_reads_tools_gets_them() -> None:
    tok = _templated(TOOLS_TEMPLATE)
    assert template_takes_tools(tok)
    text = '[tools]get_time;[user]Time in Oslo?[assistant]<call get_time {"zone": "CET"}>[tool]12:00[assistant]'
    assert prompt_ids(tok, HISTORY, [TOOL]) == tok(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("template", [None, "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"])
def test_other_templates_get_tools_written_into_the_messages(template: str | None) -> None:
    tok = _templated(template)
    assert not template_takes_tools(tok)
    plain = plain_messages(HISTORY, [TOOL])
    assert plain[0] == {"role": "system", "content": tools_system_text([TOOL])}
    assert json.dumps(TOOL) in plain[0]["content"]
    assert plain[2] == {"role": "assistant", "content": render_call("get_time", {"zone": "CET"})}
    assert plain[3] == {"role": "user", "content": "<tool_response>\n12:00\n</tool_response>"}
    assert prompt_ids(tok, HISTORY, [TOOL]) == prompt_ids(tok, plain)
    # a system message keeps its text, the tools come after it
    merged = plain_messages([{"role": "system", "content": "Be brief."}, *HISTORY[:1]], [TOOL])
    assert merged[0]["content"].startswith("Be brief.\n\n") and len(merged) == 2


def test_tools_need_messages() -> None:
    with pytest.raises(ValueError, match="chat messages"):
        prompt_ids(_templated(None), "text", [TOOL])


def test_the_call_tag_reads_what_render_call_writes() -> None:
    tag = tool_call_tag({"get_time": TOOL["function"]["parameters"], "ping": {"type": "object",
                                                                             "maxProperties": 0}})
    text = "Checking. " + render_call("get_time", '{"zone":"CET"}') + "\n" + render_call("ping", "{}")
    assert tag.grammar.matches(text)
    assert [(s.tag, s.value) for s in tag.parse(text).segments] == [(0, {"zone": "CET"}), (1, {})]
    only = tool_call_tag({"get_time": TOOL["function"]["parameters"]}, free_text=False, min_calls=1, max_calls=1)
    assert only.grammar.matches(render_call("get_time", '{"zone":"x"}'))
    assert not only.grammar.matches("x" + render_call("get_time", '{"zone":"x"}'))
