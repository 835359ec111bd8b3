"""The bundled demo models and a loader for any causal LM.

``structspec/models/target`` (4.3M parameters) and ``structspec/models/draft`` (1.4M) are
Llama-architecture models the project trained on synthetic extraction tasks
(``tools/train_demo_models.py``); they share one byte-level BPE tokenizer and the prompt format
of :mod:`structspec.models.prompt`. They make ``structspec extract`` and speculative decoding work
offline; point ``--model`` / ``--draft-model`` at real models for real work.

Its one job is getting a model: the demo pair, the loader and the extraction prompt format.
May import: nothing of structspec (transformers and torch only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_TARGET = Path(__file__).resolve().parent / "target"
DEFAULT_DRAFT = Path(__file__).resolve().parent / "draft"
ALIASES = {"demo": DEFAULT_TARGET, "demo-draft": DEFAULT_DRAFT}
"""Names that :func:`load` resolves to the bundled folders."""


def resolve(name_or_path: str | Path) -> str | Path:
    """The folder of an alias or existing local folder, else ``name_or_path`` unchanged (a hub id)."""
    if isinstance(name_or_path, str) and name_or_path in ALIASES:
        return ALIASES[name_or_path]
    path = Path(name_or_path).expanduser()
    return path if path.is_dir() else str(name_or_path)


def load(name_or_path: str | Path, *, dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``"demo"``, ``"demo-draft"``, a local folder or a hub id.

    The model is a transformers causal LM in eval mode, in ``dtype`` (default ``torch.float32``).
    Raises ``OSError`` naming the source when a bundled folder has no weights, or when a hub id
    cannot be fetched (the hub is unreachable offline and nothing is in the local cache).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve(name_or_path)
    if isinstance(source, Path) and source in ALIASES.values() and not (source / "model.safetensors").is_file():
        raise OSError(f"the bundled demo model has no weights at {source}; run tools/train_demo_models.py")
    if isinstance(source, str) and (source.startswith((".", "/", "~")) or source.count("/") > 1):
        raise OSError(f"{source!r} is neither a local folder nor a hub id (owner/name)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype or torch.float32)
    except OSError as exc:
        if isinstance(source, Path):
            raise
        raise OSError(
            f"cannot load {source!r} from the Hugging Face hub or its local cache (offline?): {exc}"
        ) from exc
    return model.eval(), tokenizer
