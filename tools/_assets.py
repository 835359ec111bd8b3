"""Shared assets for benchmark scripts: where they are, MaskBench cases, samples, tokenizers.

Assets live outside the repository: `$STRUCTSPEC_ASSETS`, else `<repo>/../shared/assets`.
Scripts call `require_assets()` (exits with a clear message when absent); tests call
`assets_dir()` and skip on None.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MASKBENCH = Path("jsonschemabench") / "maskbench"
TOKENIZERS = Path("tokenizers")


def assets_dir() -> Path | None:
    """The shared assets folder, or None when it does not exist."""
    configured = os.environ.get("STRUCTSPEC_ASSETS")
    default = Path(__file__).resolve().parents[2] / "shared" / "assets"
    path = Path(configured) if configured else default
    return path if path.is_dir() else None


def require_assets() -> Path:
    """The shared assets folder; exits the script with a clear message when absent."""
    path = assets_dir()
    if path is None:
        raise SystemExit("shared assets not found: set STRUCTSPEC_ASSETS or put them at <repo>/../shared/assets")
    return path


def tokenizer_dir(name: str = "llama3", assets: Path | None = None) -> Path:
    """Folder of a bundled HF tokenizer (e.g. "llama3", "qwen2.5")."""
    folder = (assets or require_assets()) / TOKENIZERS / name
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no tokenizer.json under {folder}")
    return folder


def load_tokenizer(name: str = "llama3", assets: Path | None = None) -> Any:
    """`AutoTokenizer.from_pretrained` on a bundled tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir(name, assets)))


@dataclass(frozen=True)
class Instance:
    """One MaskBench test instance."""

    data: Any
    valid: bool
    description: str


@dataclass(frozen=True)
class MaskBenchCase:
    """One MaskBench file: a real-world schema with valid and invalid instances."""

    name: str
    subset: str
    schema: Any
    instances: tuple[Instance, ...]


def subset_of(path: Path) -> str:
    """The MaskBench subset a file belongs to (its name before `---`)."""
    return path.name.split("---", 1)[0]


def maskbench_files(assets: Path | None = None) -> list[Path]:
    """All MaskBench case files, sorted by name."""
    folder = (assets or require_assets()) / MASKBENCH
    files = sorted(folder.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no MaskBench files under {folder}")
    return files


def stratified_sample(
    files: list[Path],
    count: int,
    seed: int = 0,
    keep: Callable[[Path], bool] | None = None,
) -> list[Path]:
    """`count` files spread evenly over subsets, reproducible for a given seed.

    Each subset is shuffled with the seed, then subsets are drawn round-robin (in name
    order) until `count` files are taken, so small subsets are exhausted and the rest fill
    in; files failing `keep` (e.g. `has_instances`) are passed over. A smaller sample with
    the same seed and `keep` is a prefix of a larger one.
    """
    rng = random.Random(seed)
    by_subset: dict[str, list[Path]] = {}
    for path in sorted(files):
        by_subset.setdefault(subset_of(path), []).append(path)
    queues = []
    for subset in sorted(by_subset):
        members = by_subset[subset]
        rng.shuffle(members)
        queues.append(members)
    sample: list[Path] = []
    depth = 0
    while len(sample) < count and any(depth < len(q) for q in queues):
        for queue in queues:
            candidate = queue[depth] if depth < len(queue) and len(sample) < count else None
            if candidate is not None and (keep is None or keep(candidate)):
                sample.append(candidate)
        depth += 1
    return sample


def load_case(path: Path) -> MaskBenchCase:
    """Read one MaskBench file."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        instances = tuple(Instance(t["data"], bool(t["valid"]), t.get("description", "")) for t in raw["tests"])
        return MaskBenchCase(path.stem, subset_of(path), raw["schema"], instances)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"malformed MaskBench file {path}: {exc}") from exc


def has_instances(path: Path) -> bool:
    """Whether a MaskBench file has any test instances (about 13% have none)."""
    return bool(load_case(path).instances)


def compact_json(value: Any) -> str:
    """The compact serialization benchmarks feed to engines: no spaces, raw UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
