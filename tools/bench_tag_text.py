"""What free text costs under a structural tag, next to unconstrained text.

    python tools/bench_free_text.py [--tokenizer llama3] [--repeats 7] [--calls 3] [--json out.json]

A text of prose with ``--calls`` tool calls in it is tokenized and walked token by token, as a
decoding loop walks it: the token's mask bit (``Matcher.allows``), the whole mask
(``mask_words``, what sampling reads) and the step (``accept_token``). Two grammars walk the
prose alone: the server's grammar of unconstrained text (``[^\\x00]*``) and the tool-call
structural tag (3 tools); the tag then also walks the text with its calls. Each walk is timed
cold (fresh compiled grammar: masks computed on first sight) and warm (masks cached), the
methods interleaved ``--repeats`` times; reported are medians of the per-token time over the
repeats, its p99, the ratio to unconstrained text, and the masks each walk computed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PROSE = (
    "The committee met on a grey Tuesday to settle the budget; nobody expected <em>agreement</em>, "
    "least of all the chair, who had drafted three versions of the plan (one for each mood). "
    "By noon the numbers were close: 4.2% for parks, a little less for roads, and a promise to "
    "revisit the <to-do> list in spring. Then someone asked about the weather. "
)
ARGS = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}
FUNCTIONS = {"get_weather": ARGS, "get_time": {"type": "object", "properties": {"zone": {"type": "string"}},
                                               "required": ["zone"], "additionalProperties": False},
             "search": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"],
                        "additionalProperties": False}}


def walk(compiled: Any, ids: list[int]) -> tuple[list[float], int]:
    """Per-token seconds of the decoding loop's grammar work, and the masks computed."""
    matcher = compiled.matcher()
    times, computed = [], 0
    for token in ids:
        start = time.perf_counter()
        computed += compiled.known_mask_words(matcher.state) is None
        matcher.allows(token)
        matcher.mask_words()
        if not matcher.accept_token(token):
            raise ValueError(f"token {token} refused")
        times.append(time.perf_counter() - start)
    return times, computed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", default="llama3")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--paragraphs", type=int, default=4, help="prose paragraphs around each call")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from _assets import load_tokenizer

    from structspec import Grammar, Vocabulary
    from structspec.generation.tool_calls import render_call, tool_call_tag
    from structspec.masks.compiled import CompiledGrammar

    tokenizer = load_tokenizer(args.tokenizer)
    vocabulary = Vocabulary.from_tokenizer(tokenizer)
    prose = PROSE * args.paragraphs * (args.calls + 1)
    call = render_call("get_weather", '{"city":"Paris","unit":"celsius"}')
    with_calls = (PROSE * args.paragraphs + call + "\n") * args.calls + PROSE * args.paragraphs
    free = Grammar.from_gbnf(r"root ::= [^\x00]*")
    tag = tool_call_tag(FUNCTIONS)
    methods = {
        "unconstrained text, prose": (free, prose),
        "structural tag, prose": (tag.grammar, prose),
        f"structural tag, prose + {args.calls} calls": (tag.grammar, with_calls),
    }
    runs: dict[str, dict[str, list]] = {name: {"cold": [], "warm": [], "computed": []} for name in methods}
    for _ in range(args.repeats):
        for name, (grammar, text) in methods.items():
            ids = tokenizer.encode(text, add_special_tokens=False)
            compiled = CompiledGrammar(grammar, vocabulary)  # fresh: nothing cached
            cold, computed = walk(compiled, ids)
            warm, _ = walk(compiled, ids)
            runs[name]["cold"].append(sum(cold) / len(ids))
            runs[name]["warm"].append(warm)
            runs[name]["computed"].append(computed)
            runs[name]["tokens"] = len(ids)
    base = statistics.median(statistics.median(w) for w in runs["unconstrained text, prose"]["warm"])
    report = {}
    print(f"{'walk':38} {'tokens':>6} {'masks':>5} {'cold us/tok':>11} {'warm us/tok':>11} {'warm p99':>8} "
          f"{'warm vs unconstrained':>21}")
    for name, run in runs.items():
        warm = statistics.median(statistics.median(w) for w in run["warm"])
        p99 = statistics.median(statistics.quantiles(w, n=100)[-1] for w in run["warm"])
        row = {"tokens": run["tokens"], "masks_computed": statistics.median(run["computed"]),
               "cold_us_per_token": statistics.median(run["cold"]) * 1e6, "warm_us_per_token": warm * 1e6,
               "warm_p99_us": p99 * 1e6, "warm_ratio": warm / base}
        report[name] = row
        print(f"{name:38} {row['tokens']:6} {row['masks_computed']:5.0f} {row['cold_us_per_token']:11.1f} "
              f"{row['warm_us_per_token']:11.2f} {row['warm_p99_us']:8.1f} {row['warm_ratio']:20.2f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
