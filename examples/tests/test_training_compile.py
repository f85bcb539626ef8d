"""The models of test_training.py compiled (issues 37 and 38): ``torch.compile(model, fullgraph=True)`` of the
tritred-built GPT and CNN trains like the same model in eager.

CPU (CI): ``backend="aot_eager"`` under Triton's interpreter, static and dynamic shapes (one compiled frame, no
recompilation for a second batch and sequence length or image size under ``dynamic=True``). Every tritred call
is the registered op ``torch.ops.tritred.*`` inside the graph (checked: the graph holds them), with its
registered autograd; batch_norm's running statistics are copied back outside the op. Two training steps each:
the losses, the gradients, the parameters and the running statistics equal eager's.
CUDA: the same with Inductor (marked, skipped here), fp32 without TF32, within 1e-4 relative (Inductor fuses
the pointwise ops around tritred's into other kernels: not bit-identical).
"""

from __future__ import annotations

import copy
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # models_helpers (pytest runs in importlib mode)
from models_helpers import (  # noqa: I001  (sets TRITON_INTERPRET before tritred_ops is imported)
    ADAM_SLACK,
    CNN_BATCH,
    CNN_SIZE,
    DEVICE,
    assert_losses_close,
    assert_same_state,
    exact_fp32,
    gpt_config,
    gpu,
)

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from tritred_bench.models import GPT, ConvNet, build_variant, gpt_batch, image_batch, train_steps

#: (rtol, atol scale) of compiled against eager: aot_eager runs the same kernels on the same values (CPU);
#: Inductor generates its own kernels for the ops around tritred's (CUDA).
AOT_EAGER_TOL = (1e-5, 1e-6)
INDUCTOR_TOL = (1e-4, 1e-5)
#: AdamW's learning rate (the GPT cases)
LR = 1e-3


class _Counter(CompileCounterWithBackend):
    """A compile counter that also keeps the tritred ops found in the compiled graphs."""

    def __init__(self, backend: str) -> None:
        super().__init__(backend)
        self.tritred_ops: set[str] = set()

    def __call__(self, gm, example_inputs):  # noqa: ANN001
        for node in gm.graph.nodes:
            if node.op == "call_function" and str(node.target).startswith("tritred."):
                self.tritred_ops.add(str(node.target).split(".")[1])
        return super().__call__(gm, example_inputs)


def _check_compiled(make_model, batches, second_batches, backend: str, dynamic: bool, expect_ops: set[str],
                    optimizer, tol: tuple[float, float]) -> None:  # noqa: ANN001
    """Eager model vs ``torch.compile(copy, fullgraph=True)``: ``batches`` train both (losses, grads, parameters,
    buffers equal); under ``dynamic`` the ``second_batches`` (other sizes) run without a recompilation."""
    torch._dynamo.reset()
    with exact_fp32():
        eager = make_model()
        compiled_model = copy.deepcopy(eager)
        counter = _Counter(backend)
        compiled = torch.compile(compiled_model, fullgraph=True, backend=counter, dynamic=dynamic)
        want = train_steps(eager, optimizer(eager), batches)
        opt = optimizer(compiled_model)
        got = train_steps(compiled, opt, batches)
        assert counter.frame_count >= 1 and expect_ops <= counter.tritred_ops, counter.tritred_ops
        rtol, atol_scale = tol
        # (AdamW's parameters: each step's rounding of near-zero gradients amplified, see models_helpers.ADAM_SLACK)
        lr = LR if optimizer is _adamw else 0.0
        assert_losses_close(got, want, f"compiled ({backend}, dynamic={dynamic})", rtol=rtol)
        assert_same_state(compiled_model, eager, f"compiled ({backend}, dynamic={dynamic})", rtol=rtol,
                          atol_scale=atol_scale, param_atol=ADAM_SLACK * lr * len(batches))
        if dynamic:
            frames = counter.frame_count
            want2 = train_steps(eager, optimizer(eager), second_batches)
            got2 = train_steps(compiled, optimizer(compiled_model), second_batches)
            assert counter.frame_count == frames, "a second shape recompiled under dynamic=True"
            assert_losses_close(got2, want2, f"compiled ({backend}), second shape", rtol=rtol)
            assert_same_state(compiled_model, eager, f"compiled ({backend}), second shape", rtol=rtol,
                              atol_scale=atol_scale, param_atol=ADAM_SLACK * lr * (len(batches) + len(second_batches)))


def _adamw(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)


def _sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _build(make, variant: str) -> torch.nn.Module:  # noqa: ANN001
    """The model ``make(backend)`` builds, through tritred the ``variant`` way (``tritred``: built with the
    functional ops; ``patched``: built with torch's modules, then ``tritred_ops.patch``)."""
    torch.manual_seed(0)
    model, _ = build_variant(make, variant)
    return model.to(DEVICE)


def _gpt_case(norm: str, backend: str, dynamic: bool, tol: tuple[float, float], variant: str = "tritred") -> None:
    cfg, batch = gpt_config(norm=norm)

    def make() -> torch.nn.Module:
        return _build(lambda be: GPT(cfg, be), variant)

    batches = [gpt_batch(cfg, batch, device=DEVICE, seed=s) for s in (0, 1)]
    second = [gpt_batch(cfg, batch + 1, seq=cfg.max_seq - 2, device=DEVICE, seed=2)]
    norm_op = "layer_norm" if norm == "layer_norm" else "rms_norm"
    _check_compiled(make, batches, second, backend, dynamic, {norm_op, "softmax", "cross_entropy"}, _adamw, tol)


def _cnn_case(backend: str, dynamic: bool, tol: tuple[float, float], variant: str = "tritred") -> None:
    def make() -> torch.nn.Module:
        return _build(lambda be: ConvNet(be), variant)

    batches = [image_batch(CNN_BATCH, size=CNN_SIZE, device=DEVICE, seed=s) for s in (0, 1)]
    second = [image_batch(CNN_BATCH + 1, size=CNN_SIZE - 2, device=DEVICE, seed=2)]
    ops = {"batch_norm", "mean", "cross_entropy"} if variant == "tritred" else {"batch_norm", "cross_entropy"}
    _check_compiled(make, batches, second, backend, dynamic, ops, _sgd, tol)


# CPU: layer_norm static and rms_norm dynamic (each compile of the GPT costs seconds under the interpreter);
# the GPU runs all four.
GPT_CASES = [("layer_norm", False), ("rms_norm", True)] if DEVICE == "cpu" else [
    (n, d) for n in ("layer_norm", "rms_norm") for d in (False, True)]


@pytest.mark.parametrize(("norm", "dynamic"), GPT_CASES)
def test_compiled_gpt_trains_like_eager(norm, dynamic):
    _gpt_case(norm, "aot_eager", dynamic, AOT_EAGER_TOL)


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_cnn_trains_like_eager(dynamic):
    _cnn_case("aot_eager", dynamic, AOT_EAGER_TOL)


@gpu
@pytest.mark.parametrize(("norm", "dynamic"), GPT_CASES)
def test_inductor_gpt_trains_like_eager(norm, dynamic):
    _gpt_case(norm, "inductor", dynamic, INDUCTOR_TOL)


@gpu
@pytest.mark.parametrize("dynamic", [False, True])
def test_inductor_cnn_trains_like_eager(dynamic):
    _cnn_case("inductor", dynamic, INDUCTOR_TOL)


# -- the compiled patched model (tritred_ops.patch of the torch-built model) --------------------------------------

@pytest.mark.parametrize("model", ["gpt", "cnn"])
def test_compiled_patched_model_trains_like_eager(model):
    backend, tol = ("aot_eager", AOT_EAGER_TOL) if DEVICE == "cpu" else ("inductor", INDUCTOR_TOL)
    if model == "gpt":
        _gpt_case("layer_norm", backend, True, tol, variant="patched")
    else:
        _cnn_case(backend, True, tol, variant="patched")
