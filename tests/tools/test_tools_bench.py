"""The benchmark tools' own logic, on tiny inputs (the benchmarks themselves run on demand)."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, tokenizer_dir

sys.path.insert(0, str(REPO / "tools"))

import bench_ttfm

from structspec import SchemaError, Vocabulary


def _byte_vocabulary() -> Vocabulary:
    return Vocabulary.from_token_bytes([bytes([b]) for b in range(256)] + [None], [256])


def test_ttfm_steps_cover_the_whole_time() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 3}}, "required": ["a"]}
    *steps, total = bench_ttfm.time_schema(schema, _byte_vocabulary())
    assert len(steps) == len(bench_ttfm.STEPS) - 1
    assert all(step >= 0 for step in steps)
    assert sum(steps) == pytest.approx(total, abs=1e-3)


def test_ttfm_refused_schema_raises_the_schema_error() -> None:
    with pytest.raises(SchemaError):
        bench_ttfm.time_schema({"type": "strin"}, _byte_vocabulary())


def test_mask_times_keep_the_collector_apart() -> None:
    import gc

    import bench_masks

    times = bench_masks.MaskTimes()
    times.timed(lambda: None)
    times.timed(gc.collect)
    quiet, collected = times.collector_s
    assert quiet == 0.0
    assert 0.0 < collected <= times.seconds[1]
    summary = bench_masks.summarize(bench_masks.EngineResult("e", masks=times))
    assert summary["masks_collected"] == 1
    assert summary["mask_max_engine"] == pytest.approx(max(times.seconds[0], times.seconds[1] - collected))


def test_engine_results_come_back_whole_from_their_process() -> None:
    """What ``run_engine`` returns from its process (``asdict``) is read back by the mask and
    free-text benchmarks alike."""
    from dataclasses import asdict

    import bench_masks

    result = bench_masks.EngineResult("e", [bench_masks.SchemaResult("s", True, 0.5, 0.1, {"pass": 2})],
                                      bench_masks.MaskTimes([1e-5, 2e-5], [0.0, 1e-6]), 1024.0, 0.25, "n")
    assert bench_masks.EngineResult.from_dict(asdict(result)) == result


class _ByteTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode())


def test_mask_profile_classifies_each_mask_by_its_work() -> None:
    import profile_masks

    import structspec
    from structspec import Grammar

    compiled = structspec.compile(Grammar.from_gbnf('root ::= "[" [a-z]+ ("," [a-z]+)* "]"'), _byte_vocabulary())
    first = profile_masks._replay_text(compiled, "s", "[ab,cd]", _ByteTokenizer(), 400)
    again = profile_masks._replay_text(compiled, "s", "[ab,cd]", _ByteTokenizer(), 400)
    assert len(first) == len(again) == len("[ab,cd]")
    assert first[0].kind == "sweep, new run states" and first[0].expanded >= 1 and first[0].created >= 1
    assert all(call.kind == "whole-state cache hit" for call in again)  # the same states, all cached
    assert [call.before for call in first[:3]] == ["", "[", "[a"]
    text = profile_masks.report(first + again, top=2)
    assert text.startswith(f"{2 * len(first)} masks:") and "whole-state cache hit" in text
    kinds = {call.kind for call in first + again}
    assert "CPU time: p50" in text.splitlines()[1]
    assert len(text.splitlines()) == 2 + len(kinds) + 1 + 2  # summary, CPU time, one line a kind, heading, slowest


def test_counted_replay_times_every_mask_and_refuses_a_text_off_the_grammar() -> None:
    import bench_counted

    import structspec
    from structspec import Grammar

    vocab = Vocabulary.from_token_bytes([b'"', b"a", b"ab", b'b"', None], eos_ids=[4])
    compiled = structspec.compile(Grammar.from_gbnf('root ::= "\\"" [ab]{0,5} "\\""'), vocab)
    computed, used = bench_counted.replay(compiled, [[0, 2, 1, 3], [0, 3]])
    assert len(computed) == len(used) == 6
    with pytest.raises(SystemExit, match="refused"):
        bench_counted.replay(compiled, [[0, 2, 2, 2]])  # six letters


def test_grounded_bench_reaches_the_first_value_and_sums_its_steps() -> None:
    import json

    import bench_grounded

    text = bench_grounded.source_text(600, 0)
    assert len(text) == 600 and "\n\n" in text
    schema = json.loads((REPO / "examples" / "invoice.schema.json").read_text())
    steps, sizes = bench_grounded.time_once(schema, text, _byte_vocabulary())
    named = dict(zip(bench_grounded.STEPS, steps, strict=True))
    assert named["total"] == pytest.approx(sum(steps[1:5]), abs=1e-3)
    assert sizes["source-span"] > 600 and sizes["rule set"] > sizes["source-span"]


def test_demo_evaluation_sorts_fields_by_kind_and_marks_copied_strings() -> None:
    import eval_demo_models as ev

    text = "Bill no. INV-7, 3 items, due 8 May 2024"
    assert [ev.field_kind(v, text) for v in ("INV-7", "2024-05-08", 3, True, ["a"])] == [
        "verbatim string", "other string", "number", "boolean", "list"]
    schema = {"type": "object", "properties": {"id": {"type": "string"}, "due": {"type": "string", "format": "date"},
                                               "mail": {"type": "string", "format": "email"},
                                               "cur": {"type": "string", "enum": ["EUR"]}, "n": {"type": "integer"}}}
    flagged = {k for k, v in ev.marked(schema)["properties"].items() if v.get("x-grounded")}
    assert flagged == {"id", "mail"}
    off = {"grounding": "off", "per_kind": {"number": {"fields_right": 0.5, "fields": 2}}, "fields_right": 0.5,
           "examples_exact": 0.0, "schema_valid": 1.0}
    on = {**off, "grounding": "on", "per_kind": {"number": {"fields_right": 1.0, "fields": 2}}, "fields_right": 1.0}
    table = ev.grounding_table([off, on])
    assert "| number | 2 | 50.0% | 100.0% (+50.0) |" in table


def test_gpu_bench_saves_a_random_llama_shaped_model_the_loader_reads(tmp_path, monkeypatch) -> None:
    import bench_gpu
    import torch

    from structspec.generation import Generator
    from structspec.models import load

    tokenizer_dir("llama3")  # skips without the shared assets
    monkeypatch.setitem(bench_gpu.SHAPES, "tiny", (64, 128, 2, 4, 2))
    assert bench_gpu.main(["--save-model", str(tmp_path), "--sizes", "tiny", "--dtype", "float32"]) == 0
    model, tokenizer = load(tmp_path, device="cpu")
    assert model.config.num_hidden_layers == 2 and model.config.vocab_size == len(tokenizer) > 128_000
    assert next(model.parameters()).dtype == torch.float32
    result = Generator(model, tokenizer).generate("Say yes.", {"enum": ["yes", "no"]}, max_new_tokens=8)
    assert result.value in ("yes", "no")
    assert bench_gpu.main(["--save-model", str(tmp_path / "x"), "--sizes", "1b,8b"]) == 2


def test_gpu_bench_measures_every_method_when_pointed_at_the_cpu(monkeypatch, capsys) -> None:
    import bench_gpu

    tokenizer_dir("llama3")  # skips without the shared assets
    monkeypatch.setitem(bench_gpu.SHAPES, "tiny", (64, 128, 2, 4, 2))
    argv = ["--sizes", "tiny", "--dtype", "float32", "--device", "cpu", "--repeats", "1", "--max-new-tokens", "6"]
    assert bench_gpu.main(argv) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().endswith("x")]
    assert [row[:2] for row in rows][:3] == [["unconstrained", "model.generate"], ["structspec", "Generator"],
                                             ["structspec", "GrammarLogitsProcessor"]]
    assert rows[0][-1] == "1.00x" and all(float(row[-2]) > 0 for row in rows)
