"""Input records and the output file: what to extract, and what is done already.

Every input record becomes one :class:`Record` with an id: its ``id`` field (a string or an
integer), or its position in the input (0-based) when it has none. A record that cannot be
read (a line that is not JSON, no text, a text that is not a string) is still a record, with
the reason in ``problem``, so that it gets its error line in the output like any other.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO


@dataclass(frozen=True)
class Record:
    """One document: ``text`` to extract from, or the ``problem`` that makes it unreadable."""

    id: str | int
    text: str | None
    problem: str | None = None


def read_records(path: str | Path, text_field: str = "text", id_field: str = "id") -> list[Record]:
    """The records of a ``.jsonl`` file (one JSON object a line; blank lines skipped) or a
    ``.parquet`` file (needs pyarrow). Raises ``ValueError`` for two records with the same id,
    naming both, and ``OSError`` when the file cannot be read."""
    path = Path(path)
    rows = _parquet_rows(path) if path.suffix.lower() == ".parquet" else _jsonl_rows(path)
    records, seen = [], {}
    for index, (where, row) in enumerate(rows):
        record = _record(index, where, row, text_field, id_field)
        if record.id in seen:
            raise ValueError(f"{path}: {where}: id {record.id!r} is used already by {seen[record.id]}")
        seen[record.id] = where
        records.append(record)
    return records


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield f"line {number}", json.loads(line.rstrip("\r\n"))  # an error's column, not the line's end
            except json.JSONDecodeError as exc:
                yield f"line {number}", ValueError(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})")


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise OSError("reading Parquet needs pyarrow: pip install 'structspec[parquet]'") from None
    for number, row in enumerate(pq.read_table(path).to_pylist()):
        yield f"row {number}", row


def _record(index: int, where: str, row: Any, text_field: str, id_field: str) -> Record:
    if isinstance(row, ValueError):
        return Record(index, None, str(row))
    if not isinstance(row, dict):
        return Record(index, None, f"{where}: a record must be a JSON object, got {type(row).__name__}")
    ident = row.get(id_field, index)
    if isinstance(ident, bool) or not isinstance(ident, str | int):
        return Record(index, None, f"{where}: field {id_field!r} must be a string or an integer, got {ident!r}")
    text = row.get(text_field)
    if not isinstance(text, str):
        what = "is missing" if text is None else f"must be a string, got {type(text).__name__}"
        return Record(ident, None, f"{where}: field {text_field!r} {what}")
    if not text.strip():
        return Record(ident, None, f"{where}: field {text_field!r} is empty")
    return Record(ident, text)


class Output:
    """The output file, one JSON object a line, appended to as records finish. Opening it reads
    the ids done by an earlier run (:attr:`done`) and drops a last line cut short by a crash."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.done: set[str | int] = set()
        if self.path.exists():
            self._resume()
        self._file: TextIO = self.path.open("a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> bool:
        """Append ``row`` (with its ``id``) unless that id is done; returns whether it was written."""
        if row["id"] in self.done:
            return False
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._file.flush()
        self.done.add(row["id"])
        return True

    def close(self) -> None:
        """Flush to disk and close."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def _resume(self) -> None:
        data = self.path.read_bytes()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):  # a line cut short by a crash: its record is done again
            with self.path.open("r+b") as out:
                out.truncate(complete)
        for number, line in enumerate(data[:complete].decode("utf-8").split("\n")[:-1], 1):  # not splitlines: U+2028
            try:
                self.done.add(json.loads(line)["id"])
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(f"{self.path}: line {number} is not an output line of structspec batch") from None
