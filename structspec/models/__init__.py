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


DEVICES = ("auto", "cpu", "cuda", "cuda:N")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_device(device: str = "auto") -> Any:
    """The ``torch.device`` for ``auto`` (CUDA when available, else the CPU), ``cpu``, ``cuda``
    or ``cuda:N``; raises ``ValueError`` when CUDA is asked for but absent."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name, _, index = device.partition(":")
    if name not in ("cpu", "cuda") or (index and (name == "cpu" or not index.isdigit())):
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if name == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ValueError(f"device {device!r} was asked for, but CUDA is not available ({why}); use cpu or auto")
        if index and int(index) >= torch.cuda.device_count():
            raise ValueError(f"device {device!r} was asked for, but only {torch.cuda.device_count()} CUDA "
                             "device(s) are visible")
    return torch.device(device)


def resolve_dtype(dtype: Any = "auto", device: Any = "cpu") -> Any:
    """The ``torch.dtype`` for ``auto`` (bfloat16 on a GPU that has it, else float16 on a GPU,
    float32 on the CPU), a name from :data:`DTYPES`, or a ``torch.dtype``."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if torch.device(device).type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return getattr(torch, dtype)


def load(name_or_path: str | Path, *, device: str = "auto", dtype: Any = "auto") -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``"demo"``, ``"demo-draft"``, a local folder or a hub id.

    The model is a transformers causal LM in eval mode on ``device`` (``auto``: CUDA when
    available, else the CPU; ``cpu``; ``cuda``; ``cuda:N``) in ``dtype`` (``auto``: bfloat16 on
    GPUs that have it, float16 on others, float32 on the CPU; or ``float32``, ``bfloat16``,
    ``float16``, or a ``torch.dtype``). Raises ``ValueError`` for a device or dtype it cannot
    give (CUDA asked for but absent), ``OSError`` naming the source when a bundled folder has
    no weights, or when a hub id cannot be fetched (offline, when the hub cannot be reached, it
    is read from the local cache only, and an id not there fails at once).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = resolve_device(device)
    dtype = resolve_dtype(dtype, where)
    source = resolve(name_or_path)
    if isinstance(source, Path) and source in ALIASES.values() and not (source / "model.safetensors").is_file():
        raise OSError(f"the bundled demo model has no weights at {source}; run tools/train_demo_models.py")
    if isinstance(source, str) and (source.startswith((".", "/", "~")) or source.count("/") > 1):
        raise OSError(f"{source!r} is neither a local folder nor a hub id (owner/name)")
    # Offline, a hub id is read from the local cache only: the hub client would otherwise retry
    # an unreachable host for about a minute before giving up.
    cached_only = isinstance(source, str) and not hub_reachable()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=cached_only)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=cached_only)
    except OSError as exc:
        if isinstance(source, Path):
            raise
        if cached_only:
            raise OSError(f"{source!r} is not in the local Hugging Face cache, and the hub cannot be reached "
                          "(offline?)") from exc
        raise OSError(f"{source!r} could not be fetched from the Hugging Face hub: {exc}") from exc
    return model.to(where).eval(), tokenizer


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub (``HF_ENDPOINT``; never with ``HF_HUB_OFFLINE`` set) answers
    a TCP connection within ``timeout_s``."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout_s):
            return True
    except OSError:  # no route, no name resolution, refused, timed out
        return False
