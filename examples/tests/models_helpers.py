"""Shared by the model tests of examples/tests (training, compiled training, real models): the device, the sizes,
the tolerances and the comparisons.

Importing this module decides the device and, on the CPU, sets ``TRITON_INTERPRET=1`` before anything imports
tritred_ops (``TRITRED_TEST_DEVICE=cuda`` or a visible GPU without ``TRITON_INTERPRET``: compiled CUDA).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import pytest
import torch

DEVICE = os.environ.get("TRITRED_TEST_DEVICE") or (
    "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"
)
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # before anything imports tritred_ops

from tritred_bench.models import GPTConfig  # noqa: E402

#: Marks a test that needs a CUDA device (the GPU machine runs it; CI under the interpreter skips it).
gpu = pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA device (compiled kernels)")

#: The small GPT of the CPU tests (seconds under the interpreter) and its batch; the GPU takes a larger
#: vocabulary and longer sequences (cross_entropy over 32000 classes).
CPU_GPT, CPU_GPT_BATCH = GPTConfig(vocab=97, d_model=32, heads=2, layers=2, max_seq=8), 2
GPU_GPT, GPU_GPT_BATCH = GPTConfig(vocab=32000, d_model=128, heads=4, layers=2, max_seq=64), 4
#: The CNN's images: [batch, 3, size, size] (CPU: 2x3x8x8).
CNN_BATCH, CNN_SIZE = (2, 8) if DEVICE == "cpu" else (8, 32)


#: examples/minilm_activations.py, the real-activation script the MiniLM tests load as a module.
MINILM_SCRIPT = Path(__file__).resolve().parents[1] / "minilm_activations.py"


def load_minilm_script() -> ModuleType:
    """examples/minilm_activations.py as a module (a script, not part of a package)."""
    spec = importlib.util.spec_from_file_location("minilm_activations", MINILM_SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def gpt_config(**changes: object) -> tuple[GPTConfig, int]:
    """This device's GPT config (with ``changes``) and batch size."""
    import dataclasses

    cfg, batch = (CPU_GPT, CPU_GPT_BATCH) if DEVICE == "cpu" else (GPU_GPT, GPU_GPT_BATCH)
    return dataclasses.replace(cfg, **changes), batch  # type: ignore[arg-type]


#: fp32 agreement of two runs ("within 1e-4 relative"): |a - b| <= RTOL |b| + ATOL_SCALE max|b|
#: elementwise. The absolute part is relative to the tensor's largest magnitude, for elements near zero.
RTOL, ATOL_SCALE = 1e-4, 1e-5
#: Adam's parameters after n steps: each step moves an element by about lr * m / sqrt(v), a ratio that amplifies
#: the relative rounding error of gradients near zero (their absolute error is ~ an ulp of the largest gradient):
#: two correct runs differ there by a fraction of lr per step. Measured on the H200 (torch 2.11, Inductor against
#: eager, lr 1e-3): up to 1.3e-5 after the GPT's 3 AdamW steps, and 3.4e-5 after 3 steps whose last one starts a
#: fresh AdamW (its first step moves every element by ~lr * g / |g|, the most sensitive ratio), against 9e-7
#: allowed by ATOL_SCALE. 3 % of lr * steps allows that with a margin of 2.6; a wrong gradient moves the loss, the
#: gradients (checked at ATOL_SCALE) and whole parameter tensors by far more.
ADAM_SLACK = 3e-2
#: The last step's gradients after AdamW steps: taken at parameters that differ by up to that slack, so an element
#: near zero may differ by more than ATOL_SCALE. Measured on an H100 (torch 2.11, GPT with layer_norm, 3 steps):
#: one element of 65536 at 2.6e-8 where ATOL_SCALE allowed 2.0e-8 (1.3x); 4x ATOL_SCALE, still far below a wrong
#: gradient's error (whole tensors off by 1e-3 relative or more).
ADAM_GRAD_ATOL_SCALE = 4 * ATOL_SCALE


def assert_close_scaled(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = RTOL,
                        atol_scale: float = ATOL_SCALE) -> None:
    """``actual`` within ``rtol |expected| + atol_scale max|expected|`` of ``expected``, elementwise."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (what, actual.shape, expected.shape)
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual.detach(), expected.detach(), rtol=rtol, atol=atol_scale * scale,
                               msg=lambda m: f"{what}: {m}")


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module, what: str, grads: bool = True,
                      rtol: float = RTOL, atol_scale: float = ATOL_SCALE, param_atol: float = 0.0,
                      grad_atol_scale: float | None = None) -> None:
    """Every parameter (and its ``.grad`` when ``grads``) and every buffer of ``a`` close to ``b``'s; the same
    names. Integer buffers (``num_batches_tracked``) exactly equal. ``param_atol``: an absolute slack for the
    parameters alone (see :data:`ADAM_SLACK`); ``grad_atol_scale``: the gradients' own ``atol_scale`` (default
    ``atol_scale``; see :data:`ADAM_GRAD_ATOL_SCALE`)."""
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name, p in pb.items():
        scale = float(p.detach().abs().max()) if p.numel() else 0.0
        assert_close_scaled(pa[name], p, f"{what}: parameter {name}", rtol,
                            atol_scale + (param_atol / scale if scale else 0.0))
        if grads:
            ga, gb = pa[name].grad, p.grad
            assert (ga is None) == (gb is None), f"{what}: grad of {name}"
            if ga is not None and gb is not None:
                assert_close_scaled(ga, gb, f"{what}: grad of {name}", rtol,
                                    atol_scale if grad_atol_scale is None else grad_atol_scale)
    ba, bb = dict(a.named_buffers()), dict(b.named_buffers())
    assert ba.keys() == bb.keys()
    for name, buf in bb.items():
        if buf.dtype.is_floating_point:
            assert_close_scaled(ba[name], buf, f"{what}: buffer {name}", rtol, atol_scale)
        else:
            assert torch.equal(ba[name], buf), f"{what}: buffer {name}: {ba[name]} != {buf}"


def assert_losses_close(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], what: str,
                        rtol: float = RTOL) -> None:
    """Step for step, the losses within ``rtol`` relative."""
    got = torch.stack([x.float() for x in actual]).cpu()
    want = torch.stack([x.float() for x in expected]).cpu()
    torch.testing.assert_close(got, want, rtol=rtol, atol=0.0, msg=lambda m: f"{what}: losses {got} vs {want}: {m}")


def relative_error(actual: torch.Tensor, reference: torch.Tensor) -> float:
    """``||actual - reference|| / ||reference||`` in float64 (0 when both are zero)."""
    a, r = actual.detach().double(), reference.detach().double()
    den = float(r.norm())
    num = float((a - r).norm())
    return num / den if den else num


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """No TF32 in matmuls and convolutions while active (cuDNN's default allows it for convolutions): an fp32
    comparison at 1e-4 needs fp32 products on both sides."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
