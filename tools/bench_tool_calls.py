"""Tool calls over many function definitions: do the arguments validate, how much of each call
the grammar forces, and how many tokens a target forward yields.

    python tools/bench_tool_calls.py [--model demo --draft-model demo-draft] [--maskbench 40]
                                     [--seed 0] [--max-new-tokens 320] [--threads 2] [--json out.json]

Definitions: the BFCL-style functions of ``tools/tool_definitions.json`` (32, each with a user
request that gives the argument values) plus ``--maskbench`` MaskBench object schemas used as
``parameters`` (a stratified sample of those that convert exactly, have a valid instance -- the
request passes it as data --, whose prompt fits the model's context and whose shortest call fits
in ``--max-new-tokens``). Each function is called alone, as ``tool_choice`` names
it: the user message is the request, the tool goes through the chat template (the bundled
models' has none: the fallback format), and the reply is decoded greedily, speculatively, under
the tool-call structural tag. Reported: calls whose arguments validate
(``jsonschema``, the schema's own draft), the share of the call's tokens the grammar forced (the
generated token was the first of the forced continuation's tokens), tokens per target forward
(median and spread), and seconds per call -- for all calls, for each source of definitions, and
for the calls the model ended itself (the others ran into ``--max-new-tokens``, where the budget
guard closed the call).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFINITIONS = Path(__file__).resolve().parent / "tool_definitions.json"


@dataclass(frozen=True)
class Outcome:
    """One call: its function, whether the arguments validate, and how it was decoded."""

    name: str
    valid: bool
    complete: bool
    tokens: int
    forced: int
    forwards: int
    seconds: float
    arguments: str
    stop_reason: str


def handwritten() -> list[dict[str, Any]]:
    """The BFCL-style function definitions (``{"name", "description", "parameters"}``)."""
    return json.loads(DEFINITIONS.read_text(encoding="utf-8"))


def maskbench_functions(count: int, seed: int, fits: Any = None) -> list[dict[str, Any]]:
    """``count`` MaskBench object schemas with a valid instance, as function definitions whose
    request carries that instance (stratified, reproducible); ``fits(definition)`` may pass over
    one (a prompt too long for the model)."""
    from _assets import maskbench_files, stratified_sample

    from structspec import Grammar, SchemaError

    def usable(path: Path) -> bool:
        function = _as_function(path)
        if function is None:
            return False
        try:
            Grammar.from_json_schema(function["parameters"])
        except (SchemaError, ValueError):
            return False
        return fits is None or fits(function)

    return [_as_function(path) for path in stratified_sample(maskbench_files(), count, seed, usable)]


def _as_function(path: Path) -> dict[str, Any] | None:
    """A MaskBench object schema as a function, asked for with its first valid instance."""
    from _assets import compact_json, load_case

    case = load_case(path)
    schema = case.schema
    valid = [instance.data for instance in case.instances if instance.valid and isinstance(instance.data, dict)]
    if not isinstance(schema, dict) or schema.get("type") != "object" or not valid:
        return None
    name = re.sub(r"[^A-Za-z0-9_-]", "_", path.stem.replace("---", "_"))[:64]
    description = str(schema.get("description") or schema.get("title") or f"MaskBench {path.stem}")[:200]
    request = f"Call {name} with this data: {compact_json(valid[0])}"
    return {"name": name, "description": description, "parameters": schema, "request": request}


def tool_of(function: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI tool of a function definition (its request aside)."""
    return {"type": "function", "function": {k: v for k, v in function.items() if k != "request"}}


def messages_for(function: dict[str, Any]) -> list[dict[str, str]]:
    """The user's request that the call answers."""
    return [{"role": "user", "content": function["request"]}]


def call(generator: Any, function: dict[str, Any], max_new_tokens: int, speculative: Any) -> Outcome:
    """Decode one call of ``function`` and check it."""
    import jsonschema

    schema = parameters(function)
    tag = call_tag(function)
    start = time.perf_counter()
    result = generator.generate(messages_for(function), tag, max_new_tokens=max_new_tokens,
                                speculative=speculative, tools=[tool_of(function)])
    seconds = time.perf_counter() - start
    complete = result.value is not None
    arguments = result.value.segments[0].content if complete else ""
    valid = False
    if complete:
        validator = jsonschema.validators.validator_for(schema)
        valid = validator(schema, format_checker=validator.FORMAT_CHECKER).is_valid(json.loads(arguments))
    tokens, forced = forced_share(generator, tag, result.token_ids)
    return Outcome(function["name"], valid, complete, tokens, forced, result.stats.target_forwards, seconds,
                   arguments, result.stats.stop_reason)


def parameters(function: dict[str, Any]) -> dict[str, Any]:
    """A function's parameters schema (none: no arguments)."""
    return function.get("parameters", {"type": "object", "properties": {}, "additionalProperties": False})


def call_tag(function: dict[str, Any]) -> Any:
    """The structural tag of exactly one call of ``function``."""
    from structspec.generation.tool_calls import tool_call_tag

    return tool_call_tag({function["name"]: parameters(function)}, free_text=False, min_calls=1, max_calls=1)


def fitting(generator: Any, max_new_tokens: int) -> Any:
    """A test of whether a call of a function fits the model: its prompt plus ``max_new_tokens``
    in the context, and its shortest call (one byte per token) in ``max_new_tokens`` (else no
    decoding is sure to complete it)."""
    from structspec.generation.prompt import prompt_ids

    context = getattr(generator.model.config, "max_position_embeddings", 1 << 30)

    def fits(function: dict[str, Any]) -> bool:
        prompt = prompt_ids(generator.tokenizer, messages_for(function), [tool_of(function)])
        if len(prompt) + max_new_tokens > context:
            return False
        _, compiled = generator.compile(call_tag(function))
        return compiled.matcher().tokens_to_finish() <= max_new_tokens

    return fits


def forced_share(generator: Any, tag: Any, token_ids: tuple[int, ...]) -> tuple[int, int]:
    """The call's tokens (end of sequence aside) and how many of them the grammar forced: the
    token is the first of the canonical tokens of the bytes every continuation starts with."""
    _, compiled = generator.compile(tag)
    matcher = compiled.matcher()
    eos = compiled.vocabulary.eos_ids
    tokens = forced = 0
    for token in token_ids:
        if token in eos:
            break
        tokens += 1
        forced += matcher.forced_tokens()[:1] == [token]
        matcher.accept_token(token)
    return tokens, forced


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    per_forward = [o.tokens / o.forwards for o in outcomes if o.forwards]
    tokens = sum(o.tokens for o in outcomes)
    return {
        "calls": len(outcomes),
        "complete": sum(o.complete for o in outcomes),
        "valid": sum(o.valid for o in outcomes),
        "forced_share": sum(o.forced for o in outcomes) / tokens if tokens else 0.0,
        "tokens_per_forward_median": statistics.median(per_forward) if per_forward else 0.0,
        "tokens_per_forward_p10_p90": _deciles(per_forward),
        "seconds_per_call_median": statistics.median(o.seconds for o in outcomes) if outcomes else 0.0,
    }


def _deciles(values: list[float]) -> list[float]:
    if len(values) < 2:
        return values * 2
    cuts = statistics.quantiles(values, n=10)
    return [round(cuts[0], 2), round(cuts[-1], 2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--draft-model", default="demo-draft")
    parser.add_argument("--maskbench", type=int, default=40, help="MaskBench schemas added to the 32 functions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=320)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write every outcome and the summary here")
    args = parser.parse_args(argv)

    import torch

    from structspec.generation import Generator, SpecConfig
    from structspec.models import load

    torch.set_num_threads(args.threads)
    model, tokenizer = load(args.model)
    draft = load(args.draft_model)[0] if args.draft_model else None
    generator = Generator(model, tokenizer, draft_model=draft)
    fits = fitting(generator, args.max_new_tokens)
    bfcl = [f for f in handwritten() if fits(f)]
    functions = bfcl + maskbench_functions(args.maskbench, args.seed, fits)
    outcomes = []
    for function in functions:
        outcome = call(generator, function, args.max_new_tokens, SpecConfig())
        outcomes.append(outcome)
        mark = "ok" if outcome.valid else "INVALID" if outcome.complete else "incomplete"
        print(f"{mark:10} {outcome.forced:3}/{outcome.tokens:3} forced  {outcome.tokens / outcome.forwards:5.2f} "
              f"tok/fwd  {outcome.seconds:5.1f}s  {outcome.name}", file=sys.stderr)
    result = summary(outcomes)
    groups = {"all": result, "bfcl": summary(outcomes[:len(bfcl)]), "maskbench": summary(outcomes[len(bfcl):]),
              "ended_by_model": summary([o for o in outcomes if o.stop_reason != "max_new_tokens"])}
    print(json.dumps(groups, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": groups, "calls": [asdict(o) for o in outcomes]}, indent=1))
    return 0 if result["valid"] == result["complete"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
