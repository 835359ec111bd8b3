"""The official OpenAI client against ``structspec serve``: JSON Schema output, a GBNF grammar, streaming.

    python examples/openai_client.py                 # starts `structspec serve` on the bundled model
    python examples/openai_client.py --model PATH    # ... on any local folder or hub id

The example starts the server itself on a free local port and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time

import httpx
from openai import OpenAI

from structspec.models.prompt import extraction_messages

CONTACT_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "city": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
    },
    "required": ["name", "city", "age"],
    "additionalProperties": False,
}
CONTACT_TEXT = "Contact card\nName: Lea Martin\nCity: Lyon\nAge: 34\nCompany: Rivet & Rye"


def start_server(model_args: list[str]) -> tuple[subprocess.Popen, str]:
    """Run ``structspec serve`` on a free port; returns the process and its base URL once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "structspec.cli", "serve", "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen([*command, *model_args])
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"structspec serve exited with status {process.returncode}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.25)
    process.terminate()
    raise SystemExit("structspec serve did not start within 10 minutes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="target model (default: the bundled demo model)")
    parser.add_argument("--draft-model", help="draft model (default: the bundled draft, with the default model)")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    model_args = [flag for name in ("model", "draft_model") if getattr(args, name)
                  for flag in (f"--{name.replace('_', '-')}", getattr(args, name))]

    process, base = start_server(model_args)
    try:
        client = OpenAI(base_url=f"{base}/v1", api_key="not-needed")
        model_id = client.models.list().data[0].id

        reply = client.chat.completions.create(
            model=model_id,
            messages=extraction_messages(CONTACT_TEXT, CONTACT_SCHEMA),  # the prompt format the demo models know
            response_format={"type": "json_schema", "json_schema": {"name": "contact", "schema": CONTACT_SCHEMA}},
            max_tokens=args.max_tokens,
        )
        choice = reply.choices[0]
        print("json_schema:", choice.message.content, f"(finish_reason={choice.finish_reason})")
        if choice.finish_reason == "stop":
            print("parsed:", json.loads(choice.message.content))
        else:
            print(f"stopped at --max-tokens {args.max_tokens} before the JSON was complete", file=sys.stderr)

        print("grammar, streamed: ", end="", flush=True)
        stream = client.chat.completions.create(
            model=model_id,
            messages=[{"role": "user", "content": "Does Lea Martin live in Lyon? Answer yes or no."}],
            extra_body={"grammar": 'root ::= ("yes" | "no") ", " [a-z ]{1,30} "."'},
            max_tokens=args.max_tokens,
            stream=True,
        )
        for chunk in stream:
            print(chunk.choices[0].delta.content or "", end="", flush=True)
        print()

        # structspec's own endpoint: the extraction prompt is built server-side.
        extracted = httpx.post(f"{base}/v1/extract", json={"text": CONTACT_TEXT, "schema": CONTACT_SCHEMA,
                                                            "max_tokens": args.max_tokens}, timeout=600)
        print("/v1/extract:", extracted.json())
        return 0 if choice.finish_reason == "stop" else 1
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
