"""A batch job from input file to output file: skip what is done, extract the rest (here or on
Ray), append each result as it comes, and count."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from structspec.batch.records import Output, Record


@dataclass
class Tally:
    """What a run did."""

    total: int = 0
    skipped: int = 0
    extracted: int = 0
    errors: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        rate = (self.extracted + self.errors) / self.seconds if self.seconds else 0.0
        return (f"{self.total} records: {self.extracted} extracted, {self.errors} errors, {self.skipped} done "
                f"before, in {self.seconds:.1f} s ({rate:.2f} records/s)")


def run(records: list[Record], output: Output, rows: Any, progress: Any = None) -> Tally:
    """Write ``rows(pending)`` (an iterator of output rows for the records not done yet) to
    ``output``; ``progress`` is a tqdm-like bar (``update(n)``) or None. Raises ``RuntimeError``
    when a record did not come back."""
    start = time.perf_counter()
    pending = [record for record in records if record.id not in output.done]
    tally = Tally(total=len(records), skipped=len(records) - len(pending))
    produced: Iterator[dict[str, Any]] = rows(pending)
    for row in produced:
        if output.write(row):
            if "error" in row:
                tally.errors += 1
            else:
                tally.extracted += 1
            if progress is not None:
                progress.update(1)
    tally.seconds = time.perf_counter() - start
    missing = [record.id for record in pending if record.id not in output.done]
    if missing:
        raise RuntimeError(f"{len(missing)} records did not come back (first: {missing[0]!r}); run again to resume")
    return tally
