"""The batch job on Ray Data: records in a dataset, an actor pool of extractors, the output
written by the driver.

Each actor builds one :class:`~structspec.batch.extractor.Extractor` (the model loaded once)
and serves ``map_batches`` calls with it. Ray Data restarts an actor that dies and runs its
unfinished batches again (its actor pools default to unlimited ``max_restarts`` and
``max_task_retries``), so a crashed worker's records are retried, not lost. The driver alone writes the output file: it
appends each row as results stream in and skips an id already written, so no record appears
twice, and it checks at the end that every record it sent came back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from structspec.batch.extractor import Extractor
from structspec.batch.records import Record

RAY_EXTRA = "--ray needs Ray Data: pip install 'structspec[ray]'"


def extract_on_ray(
    records: list[Record],
    extractor: dict[str, Any],
    *,
    address: str | None = None,
    actors: int = 2,
    batch_size: int = 16,
    cpus_per_actor: float = 1.0,
    gpus_per_actor: float = 0.0,
    actor_class: Callable[..., Any] = Extractor,
) -> Iterator[dict[str, Any]]:
    """Output rows for ``records`` (any order), computed by ``actors`` actors each holding an
    ``actor_class(**extractor)``, on the Ray cluster at ``address`` (a local one when None)."""
    try:
        import ray
    except ImportError:
        raise ImportError(RAY_EXTRA) from None
    if not ray.is_initialized():
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    items = [{"id": json.dumps(r.id), "text": r.text or "", "problem": r.problem or ""} for r in records]
    if not items:
        return
    dataset = ray.data.from_items(items, override_num_blocks=max(1, -(-len(items) // batch_size)))
    results = dataset.map_batches(
        actor_class,
        fn_constructor_kwargs=extractor,
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=cpus_per_actor,
        num_gpus=gpus_per_actor,
    )
    for row in results.iter_rows():
        yield json.loads(row["output"])
