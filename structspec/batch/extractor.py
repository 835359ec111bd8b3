"""Extraction over many records with batched decoding: the model loaded once, records decoded
together (a finished record's row goes to the next one), one output row per record."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from structspec.batch.records import Record


def grounds(schema: dict[str, Any], grounded: bool) -> bool:
    """Whether ``schema`` may ground strings in the record's text: ``grounded`` asks for it, or
    the schema names ``"x-grounded"`` (anywhere: at worst a schema is compiled once per record
    for nothing)."""
    return grounded or '"x-grounded"' in json.dumps(schema)


class Extractor:
    """Loads a model once and extracts JSON following ``schema`` from records, ``max_batch`` at
    a time (see :meth:`run`). The arguments are plain data, so that a Ray actor can build one.

    Grounded strings (``"x-grounded": true``, or with ``grounded`` every plain string) copy spans
    of each record's own text, so such a schema is compiled once per record."""

    def __init__(
        self,
        schema: dict[str, Any],
        *,
        model: str | None = None,
        draft_model: str | None = None,
        no_draft: bool = False,
        device: str = "auto",
        dtype: str = "auto",
        max_tokens: int = 512,
        max_batch: int = 16,
        speculative: bool = True,
        instructions: str | None = None,
        grounded: bool = False,
    ) -> None:
        from structspec.generation import Generator, SpecConfig
        from structspec.models import load

        target, tokenizer = load(model or "demo", device=device, dtype=dtype)
        draft_name = None if no_draft else draft_model or (None if model else "demo-draft")
        draft = load(draft_name, device=device, dtype=dtype)[0] if draft_name else None
        self.generator = Generator(target, tokenizer, draft_model=draft)
        self.schema = schema
        self.grounded = grounded
        self._grounds = grounds(schema, grounded)
        if not self._grounds:
            self.generator.compile(schema)  # now, rather than at the first record
        self.max_tokens = max_tokens
        self.max_batch = max_batch
        self.speculative = SpecConfig() if speculative else None
        self.instructions = instructions

    def run(self, records: Iterable[Record]) -> Iterator[dict[str, Any]]:
        """One output row per record, as each finishes: ``{"id", "data"}``, or ``{"id",
        "error"}`` for a bad document, a prompt past the model's context, or an output the
        token limit cut short."""
        from structspec.errors import SchemaError
        from structspec.generation.prompt import ContextLengthError
        from structspec.generation.sequence import Request
        from structspec.models.prompt import extraction_messages

        batch = self.generator.batch()
        waiting = iter(records)
        rows: dict[Any, Record] = {}
        exhausted = False
        while True:
            while not exhausted and len(batch) < self.max_batch:
                record = next(waiting, None)
                if record is None:
                    exhausted = True
                    break
                if record.problem is not None:
                    yield {"id": record.id, "error": f"bad document: {record.problem}"}
                    continue
                messages = extraction_messages(record.text, self.schema, self.instructions)
                source = record.text if self._grounds else None
                request = Request(messages, self.schema, max_new_tokens=self.max_tokens, source=source,
                                  grounded=self.grounded)
                try:
                    sequence = self.generator.sequence(request, self.speculative)
                except ContextLengthError as exc:
                    yield {"id": record.id, "error": f"too long: {exc}"}
                    continue
                except SchemaError as exc:  # grounded in this text, the schema allows no value
                    yield {"id": record.id, "error": f"cannot ground the schema in this text: {exc}"}
                    continue
                batch.add(sequence)
                rows[sequence] = record
            if not len(batch):
                return
            batch.step()
            for sequence in [s for s in rows if s.result is not None or s.error is not None]:
                yield self._row(rows.pop(sequence), sequence)

    def __call__(self, columns: dict[str, Any]) -> dict[str, Any]:
        """Ray Data's ``map_batches`` entry: columns ``id`` (JSON text), ``text`` and ``problem``
        (empty when none) in, column ``output`` (each row as JSON text) out."""
        import numpy as np

        records = [Record(json.loads(ident), text or None, problem or None)
                   for ident, text, problem in zip(columns["id"], columns["text"], columns["problem"], strict=True)]
        return {"output": np.array([json.dumps(row, ensure_ascii=False) for row in self.run(records)], dtype=object)}

    def _row(self, record: Record, sequence: Any) -> dict[str, Any]:
        if sequence.error is not None:
            return {"id": record.id, "error": f"invalid output: {sequence.error}"}
        result = sequence.result
        if result.value is None:
            return {"id": record.id, "error": f"incomplete: generation stopped after {result.stats.tokens} tokens "
                    "before the JSON was complete (raise --max-tokens)"}
        return {"id": record.id, "data": result.value}
