"""Device and dtype of loaded models: ``auto`` picks CUDA when there is one, else the CPU;
asking for CUDA where there is none is a clear error, from the library and from the CLI."""

from __future__ import annotations

import pytest
import torch

from structspec.cli import main
from structspec.models import load, resolve_device, resolve_dtype


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_auto_is_the_cpu_in_float32_without_cuda(no_cuda: None) -> None:
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_dtype("auto", "cpu") is torch.float32
    model, _ = load("demo-draft")
    parameter = next(model.parameters())
    assert parameter.device.type == "cpu" and parameter.dtype is torch.float32


def test_auto_dtype_on_a_gpu_is_bfloat16_where_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_dtype("auto", "cuda") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert resolve_dtype("auto", "cuda:1") is torch.float16


def test_an_explicit_dtype_on_the_cpu() -> None:
    model, _ = load("demo-draft", device="cpu", dtype="bfloat16")
    assert next(model.parameters()).dtype is torch.bfloat16
    assert resolve_dtype(torch.float16) is torch.float16


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_asked_for_but_absent_is_a_clear_error(no_cuda: None, device: str) -> None:
    with pytest.raises(ValueError, match=f"device '{device}' was asked for, but CUDA is not available"):
        load("demo", device=device)


@pytest.mark.parametrize("device", ["gpu", "cpu:0", "cuda:x", ""])
def test_unknown_devices_and_dtypes_are_refused(device: str) -> None:
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda, cuda:N"):
        resolve_device(device)
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("float64")


def test_the_cli_reports_missing_cuda_in_one_line(no_cuda: None, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["generate", "--grammar", "grammars/json.gbnf", "--prompt", "x", "--device", "cuda"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert "structspec: error: cannot load model 'demo': device 'cuda' was asked for, but CUDA is not available" in err
