"""Batch extraction: a file of documents in, one output line per document, on this machine or
on Ray.

Its one job is the ``structspec batch`` workload: reading records (JSONL, Parquet), resuming
from an output file, extracting with batched decoding (:mod:`structspec.batch.extractor`),
locally or on a Ray cluster (:mod:`structspec.batch.ray_job`), so that every record appears
in the output exactly once, with its data or its error.

May import: ``structspec.generation``, ``structspec.models`` and everything below them; never
``server`` or ``commands``.
"""
