"""Generate text that follows a hand-written GBNF grammar: a one-line meeting entry.

    python examples/custom_grammar.py                 # the bundled demo model and its draft
    python examples/custom_grammar.py --model PATH    # any local folder or hub id

The grammar fixes the layout (date, 24-hour time, a duration in minutes, a short title);
the model fills in the rest, and the result always parses.
"""

from __future__ import annotations

import argparse
import sys

import structspec
from structspec import Grammar
from structspec.models import load

MEETING = Grammar.from_gbnf(r"""
root     ::= date " " time " (" minutes " min) " title
date     ::= "2025-" month "-" day
month    ::= "0" [1-9] | "1" [0-2]
day      ::= "0" [1-9] | [12] [0-9] | "3" [01]
time     ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] "0"
minutes  ::= [1-9] "0" | "1" [0-2] "0"
title    ::= [A-Z] [a-z]{2,10} (" " [a-z]{2,10}){0,3}
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="target model (default: the bundled demo model)")
    parser.add_argument("--draft-model", help="draft model (default: the bundled draft, with the default model)")
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args()

    model, tokenizer = load(args.model or "demo")
    draft_name = args.draft_model or (None if args.model else "demo-draft")
    draft = load(draft_name)[0] if draft_name else None
    generator = structspec.Generator(model, tokenizer, draft_model=draft)

    prompt = [{"role": "user", "content": "Schedule a planning meeting with the design team next week."}]
    result = generator.generate(
        prompt, MEETING, max_new_tokens=args.max_tokens, speculative=structspec.SpecConfig()
    )
    if not MEETING.matches(result.text):
        print(f"stopped at --max-tokens {args.max_tokens} before the entry was complete: {result.text}",
              file=sys.stderr)
        return 1
    print(result.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
