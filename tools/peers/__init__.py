"""Peer constrained-decoding engines behind one interface, for side-by-side benchmarks.

    from peers import available_peers, make_peer, pin_single_thread, PeerCompileError
    pin_single_thread()
    peer = make_peer("llguidance", tokenizer_dir)
    grammar = peer.compile_json_schema(schema)   # PeerCompileError if unsupported
    grammar.accepts_text('{"a":1}')

The peers come from the project's `bench` extra (xgrammar, llguidance, outlines-core,
transformers-cfg, lm-format-enforcer); `available_peers()` lists those that import. Each
module's docstring says how that engine is driven and which settings keep it on one thread.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from pathlib import Path

from .base import Peer, PeerCompileError, PeerGrammar, PeerMatcher
from .tokens import load_tokenizer

__all__ = [
    "PEER_NAMES",
    "Peer",
    "PeerCompileError",
    "PeerGrammar",
    "PeerMatcher",
    "available_peers",
    "make_peer",
    "pin_single_thread",
]

PEER_NAMES = ("xgrammar", "llguidance", "outlines-core", "transformers-cfg", "lm-format-enforcer")

_MODULES = {
    "xgrammar": "xgrammar_peer",
    "llguidance": "llguidance_peer",
    "outlines-core": "outlines_peer",
    "transformers-cfg": "tcfg_peer",
    "lm-format-enforcer": "lmfe_peer",
}


@functools.cache
def available_peers() -> list[str]:
    """The peers whose libraries import here, in `PEER_NAMES` order."""
    found = []
    for name in PEER_NAMES:
        try:
            importlib.import_module(f".{_MODULES[name]}", __name__)
        except ImportError:
            continue
        found.append(name)
    return found


def make_peer(
    name: str,
    tokenizer_dir: str | os.PathLike[str],
    *,
    compile_timeout_s: float | None = 60.0,
    schema_to_gbnf: Callable[[dict], str] | None = None,
) -> Peer:
    """The peer `name` over the HF tokenizer in `tokenizer_dir`, built once and cached.

    `compile_timeout_s` bounds outlines-core index builds (None: build in-process, no limit).
    `schema_to_gbnf` is transformers-cfg's JSON Schema front end (default: structspec's).
    Other peers ignore both.
    """
    if name not in _MODULES:
        raise ValueError(f"unknown peer {name!r}; expected one of {', '.join(PEER_NAMES)}")
    timeout = compile_timeout_s if name == "outlines-core" else None
    converter = schema_to_gbnf if name == "transformers-cfg" else None
    return _make_peer(name, str(Path(tokenizer_dir).resolve()), timeout, converter)


@functools.cache
def _make_peer(
    name: str,
    tokenizer_dir: str,
    compile_timeout_s: float | None,
    schema_to_gbnf: Callable[[dict], str] | None,
) -> Peer:
    tokenizer = load_tokenizer(tokenizer_dir)
    module = importlib.import_module(f".{_MODULES[name]}", __name__)
    if name == "xgrammar":
        return module.XGrammarPeer(tokenizer)
    if name == "llguidance":
        return module.LLGuidancePeer(tokenizer)
    if name == "outlines-core":
        return module.OutlinesPeer(tokenizer, compile_timeout_s)
    if name == "transformers-cfg":
        return module.TransformersCfgPeer(tokenizer, schema_to_gbnf)
    return module.FormatEnforcerPeer(tokenizer)


def pin_single_thread() -> None:
    """Keep measurements on one thread: torch, OpenMP, rayon and HF tokenizers pools.

    Call before making peers; library-level settings are in each peer module.
    """
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[variable] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import torch

    torch.set_num_threads(1)
