"""Extract an invoice as JSON that is guaranteed to follow a JSON Schema.

    python examples/extract_invoice.py                 # the bundled demo model and its draft
    python examples/extract_invoice.py --model PATH    # any local folder or hub id

The schema and the text are ``invoice.schema.json`` and ``invoice.txt`` beside this file (the
same as ``structspec extract --schema examples/invoice.schema.json --text examples/invoice.txt``).
The output is constrained token by token, so it always follows the schema; speculative
decoding (grammar-forced tokens, n-grams, the draft model) makes it fast. Exits 1 if the
token limit ran out before the JSON was complete, 2 if the prompt does not fit the model's context.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import structspec
from structspec.generation import ContextLengthError
from structspec.models import load
from structspec.models.prompt import extraction_messages

HERE = Path(__file__).resolve().parent
INVOICE_SCHEMA = json.loads((HERE / "invoice.schema.json").read_text(encoding="utf-8"))
INVOICE_TEXT = (HERE / "invoice.txt").read_text(encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="target model (default: the bundled demo model)")
    parser.add_argument("--draft-model", help="draft model (default: the bundled draft, with the default model)")
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()

    model, tokenizer = load(args.model or "demo")
    draft_name = args.draft_model or (None if args.model else "demo-draft")
    draft = load(draft_name)[0] if draft_name else None
    generator = structspec.Generator(model, tokenizer, draft_model=draft)

    messages = extraction_messages(INVOICE_TEXT, INVOICE_SCHEMA)
    try:
        result = generator.generate(
            messages, INVOICE_SCHEMA, max_new_tokens=args.max_tokens, speculative=structspec.SpecConfig()
        )
    except ContextLengthError as exc:  # checked before decoding
        print(f"the invoice is too long for this model: {exc}", file=sys.stderr)
        return 2
    stats = result.stats
    print(
        f"{stats.tokens} tokens in {stats.seconds['total']:.2f} s, {stats.tokens_per_forward:.2f} tokens per "
        f"forward, draft acceptance {stats.acceptance_rate:.0%}",
        file=sys.stderr,
    )
    if result.value is None:
        print(f"stopped at --max-tokens {args.max_tokens} before the JSON was complete: {result.text}", file=sys.stderr)
        return 1
    print(json.dumps(result.value, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
