"""``tritred_bench.model_step`` (the side-by-side training-step timing) runs its machinery on the tiny CNN: each
mode builds the same model (the same first loss, up to the dtype), a mode that needs an API tritred_ops does not have
yet is reported as unavailable, and the table prints. The numbers mean nothing under the interpreter."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # models_helpers (pytest runs in importlib mode)
from models_helpers import DEVICE, gpu  # noqa: I001  (sets TRITON_INTERPRET before tritred_ops is imported)

import pytest
import torch
import tritred_ops
from tritred_bench import model_step


def test_quick_cnn_steps():
    modes = ["torch", "tritred", "patched"]
    rows = model_step.measure(["cnn"], modes, device=DEVICE, dtype=torch.float32, quick=True)
    by_mode = {r.mode: r for r in rows}
    assert list(by_mode) == modes
    for mode in ("torch", "tritred"):
        r = by_mode[mode]
        assert r.ms is not None and r.ms > 0 and r.steps == 1, (mode, r.message)
    assert by_mode["tritred"].first_loss == pytest.approx(by_mode["torch"].first_loss, rel=1e-5)
    if not hasattr(tritred_ops, "patch"):
        assert by_mode["patched"].ms is None and "tritred_ops.patch" in by_mode["patched"].message
    table = model_step.format_table(rows)
    assert "tritred" in table and "1.00x" in table


def test_unknown_model_is_a_row_not_a_crash():
    rows = model_step.measure(["nope"], ["torch"], device=DEVICE, quick=True)
    assert len(rows) == 1 and rows[0].ms is None and "unknown model" in rows[0].message


@gpu
def test_gpu_small_steps_all_modes():
    """Every available mode of the small CNN and a GPT on the GPU: a time and the same first loss (bf16)."""
    rows = model_step.measure(["cnn", "gpt"], quick=True, dtype=torch.bfloat16)
    ran = [r for r in rows if r.ms is not None]
    assert {r.mode for r in ran} >= {"torch", "tritred", "tritred-compile", "torch-compile"}
    for r in ran:
        ref = next(x for x in ran if x.model == r.model and x.mode == "torch")
        assert r.first_loss == pytest.approx(ref.first_loss, rel=2e-2), (r.model, r.mode)
