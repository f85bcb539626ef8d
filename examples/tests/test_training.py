"""Real training: a small GPT-style model and a small CNN with batch_norm train step for step like torch.

The models are written once, in ``tritred_bench.models``, with a switch between torch's ops and tritred's (the
modules that carry a reduction: LayerNorm or RMSNorm, the attention's Softmax, BatchNorm2d, CrossEntropyLoss, and
the CNN's mean pool). Both are built from the same seed (the same parameters, checked), take the same batches and
a few optimizer steps (AdamW for the GPT, SGD with momentum for the CNN); then, in float32, the losses step for
step, the parameters, their last gradients and batch_norm's running statistics agree within 1e-4 relative
(``models_helpers.assert_close_scaled``), and the trained CNN agrees in eval mode (the running statistics used).

CPU (CI): Triton's interpreter, tiny sizes (vocab 97, d_model 32, 2 heads, 2 layers, seq 8, batch 2; 2x3x8x8
images). CUDA: compiled kernels, a 32000-word vocabulary, and bf16 runs whose tolerance is torch's own: tritred in
bf16 must be about as close to torch's fp32 run as torch's bf16 run is.

The other ways in (``tritred_ops.patch(model)`` of the torch-built model, the torch-built model inside
``tritred_ops.enable()``: ``tritred_bench.models.VARIANTS``) get the same comparison in
``test_torch_model_through_tritred_trains_like_torch``.

Why here and not in packages/ops/tests: these are end-to-end tests of the installed project (tritred_ops through
the models of tritred_bench, which the training-step benchmark times too), like test_minilm; tritred_ops' own
tests need only tritred_ops.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # models_helpers (pytest runs in importlib mode)
from models_helpers import (  # noqa: I001  (sets TRITON_INTERPRET before tritred_ops is imported)
    ADAM_GRAD_ATOL_SCALE,
    ADAM_SLACK,
    CNN_BATCH,
    CNN_SIZE,
    DEVICE,
    assert_close_scaled,
    assert_losses_close,
    assert_same_state,
    exact_fp32,
    gpt_config,
    gpu,
    relative_error,
)

import pytest
import torch
from tritred_bench.models import GPT, ConvNet, build_variant, gpt_batch, image_batch, train_steps, variant_available
from tritred_ops import nn as tritred_nn

STEPS = 3
LR = 1e-3  # AdamW's


def _gpt(norm: str, be: str, dtype: torch.dtype = torch.float32) -> tuple[GPT, list]:
    cfg, batch = gpt_config(norm=norm)
    torch.manual_seed(0)
    model = GPT(cfg, be).to(DEVICE, dtype)
    return model, [gpt_batch(cfg, batch, device=DEVICE)] * STEPS


def _cnn(be: str, dtype: torch.dtype = torch.float32) -> tuple[ConvNet, list]:
    torch.manual_seed(0)
    model = ConvNet(be).to(DEVICE, dtype)
    images, labels = image_batch(CNN_BATCH, size=CNN_SIZE, device=DEVICE)
    return model, [(images.to(dtype), labels)] * STEPS


def _adamw(model: torch.nn.Module) -> torch.optim.Optimizer:
    # lr 1e-3: the loss falls visibly in three steps, and Adam's normalized updates stay far from amplifying
    # rounding (see GPT's bias-free q, k, v projection for the one gradient that is zero in exact arithmetic)
    return torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)


def _sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)


def _same_start(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), "the two builds do not start from the same parameters"


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_gpt_trains_like_torch(norm):
    with exact_fp32():
        ref, batches = _gpt(norm, "torch")
        tri, _ = _gpt(norm, "tritred")
        _same_start(ref, tri)
        assert type(tri.norm) is (tritred_nn.LayerNorm if norm == "layer_norm" else tritred_nn.RMSNorm)
        want = train_steps(ref, _adamw(ref), batches)
        got = train_steps(tri, _adamw(tri), batches)
    assert want[-1] < want[0], f"torch's loss did not fall: {want}"  # the steps trained something
    assert_losses_close(got, want, f"GPT ({norm})")
    assert_same_state(tri, ref, f"GPT ({norm}) after {STEPS} AdamW steps", param_atol=ADAM_SLACK * LR * STEPS,
                      grad_atol_scale=ADAM_GRAD_ATOL_SCALE)


def test_cnn_trains_like_torch():
    with exact_fp32():
        ref, batches = _cnn("torch")
        tri, _ = _cnn("tritred")
        _same_start(ref, tri)
        want = train_steps(ref, _sgd(ref), batches)
        got = train_steps(tri, _sgd(tri), batches)
        assert want[-1] < want[0], f"torch's loss did not fall: {want}"
        assert_losses_close(got, want, "CNN")
        # parameters, last gradients, running_mean/running_var (updated once per step) and num_batches_tracked
        assert_same_state(tri, ref, f"CNN after {STEPS} SGD steps")
        assert int(tri.bn1.num_batches_tracked) == STEPS
        assert not torch.equal(tri.bn2.running_var, torch.ones_like(tri.bn2.running_var))
        ref.eval()
        tri.eval()
        images = batches[0][0]
        with torch.no_grad():
            assert_close_scaled(tri.logits(images), ref.logits(images), "CNN eval logits")
        assert_same_state(tri, ref, "CNN after eval", grads=False)  # eval mode leaves the statistics alone


# -- the torch-built model patched (tritred_ops.patch) or run inside tritred_ops.enable() ------------------------
# The same comparison as above, against the same model left alone.

@pytest.mark.parametrize("variant", ["patched", "enabled"])
@pytest.mark.parametrize("model", ["gpt", "cnn"])
def test_torch_model_through_tritred_trains_like_torch(model, variant):
    if not variant_available(variant, DEVICE):
        pytest.skip(f"{variant!r} needs CUDA or the Triton interpreter")
    if model == "gpt":
        cfg, n = gpt_config(norm="rms_norm")
        make, batches, optimizer = (lambda be: GPT(cfg, be)), [gpt_batch(cfg, n, device=DEVICE)] * STEPS, _adamw
    else:
        make, optimizer = (lambda be: ConvNet(be)), _sgd
        batches = [image_batch(CNN_BATCH, size=CNN_SIZE, device=DEVICE)] * STEPS
    with exact_fp32():
        torch.manual_seed(0)
        ref = make("torch").to(DEVICE)
        torch.manual_seed(0)
        tri, context = build_variant(make, variant, DEVICE)
        tri.to(DEVICE)
        _same_start(ref, tri)
        want = train_steps(ref, optimizer(ref), batches)
        with context:
            got = train_steps(tri, optimizer(tri), batches)
    assert_losses_close(got, want, f"{model} {variant}")
    slack = ADAM_SLACK * LR * STEPS if optimizer is _adamw else 0.0
    assert_same_state(tri, ref, f"{model} {variant} after {STEPS} steps", param_atol=slack,
                      grad_atol_scale=ADAM_GRAD_ATOL_SCALE if slack else None)


# -- bf16 on the GPU: the tolerance is torch's own bf16 error ---------------------------------------------------------

#: tritred's bf16 run may stray from torch's fp32 run up to this many times as far as torch's bf16 run does.
BF16_SLACK = 2.0


def _bf16_against_fp32(make, optimizer, what: str) -> None:  # noqa: ANN001
    """Train torch fp32, torch bf16 and tritred bf16 from the same start on the same batches; tritred-bf16's
    distance to torch-fp32 must be within BF16_SLACK times torch-bf16's: per step for the loss (the largest over
    the steps), per tensor for the parameters and buffers (relative L2 error)."""
    with exact_fp32():
        runs = {}
        for be, dtype in (("torch", torch.float32), ("torch", torch.bfloat16), ("tritred", torch.bfloat16)):
            model, batches = make(be, dtype)
            runs[be, dtype] = model, train_steps(model, optimizer(model), batches)
    ref_model, ref_losses = runs["torch", torch.float32]
    t16_model, t16_losses = runs["torch", torch.bfloat16]
    tr16_model, tr16_losses = runs["tritred", torch.bfloat16]
    ulp = 2.0**-8 * max(abs(float(x)) for x in ref_losses)  # one bf16 rounding of the loss: the floor
    torch_err = max(abs(float(a) - float(r)) for a, r in zip(t16_losses, ref_losses))
    tritred_err = max(abs(float(a) - float(r)) for a, r in zip(tr16_losses, ref_losses))
    assert tritred_err <= BF16_SLACK * torch_err + ulp, (what, "loss", tritred_err, torch_err, tr16_losses, ref_losses)
    ref_state = dict(ref_model.state_dict())
    t16_state, tr16_state = t16_model.state_dict(), tr16_model.state_dict()
    for name, ref in ref_state.items():
        if not ref.dtype.is_floating_point:
            assert torch.equal(tr16_state[name], ref), (what, name)
            continue
        e_torch, e_tri = relative_error(t16_state[name], ref), relative_error(tr16_state[name], ref)
        assert e_tri <= BF16_SLACK * e_torch + 1e-6, \
            f"{what}: {name}: tritred bf16 {e_tri:.3g}, torch bf16 {e_torch:.3g}"


@gpu
@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_gpt_bf16_within_torchs_own_bf16_error(norm):
    _bf16_against_fp32(lambda be, dtype: _gpt(norm, be, dtype), _adamw, f"GPT bf16 ({norm})")


@gpu
def test_cnn_bf16_within_torchs_own_bf16_error():
    _bf16_against_fp32(_cnn, _sgd, "CNN bf16")
