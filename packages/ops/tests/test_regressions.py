"""Regressions found by adversarial testing against torch (CPU) and fp64 references.

Each test pins torch's behaviour for a divergence that was found and fixed. A test still marked strict xfail is
a known, documented limitation (docs/semantics.md): it flips to XPASS (a failure) once fixed, so the marker must
go with the fix.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import seed


def _raises_like_torch(tr_call, torch_call) -> None:
    """Both calls raise, with the same exception type."""
    try:
        torch_call()
    except Exception as e:  # noqa: BLE001
        expected = type(e)
    else:  # pragma: no cover - the test's premise
        raise AssertionError("torch did not raise")
    with pytest.raises(expected):
        tr_call()


def _like_torch(tr_call, torch_call, newer: type[Exception] | None = None) -> None:
    """Whatever the installed torch does on this device: raise (the same exception type, or ``newer``: the type
    of the torch release tritred follows where releases differ) or compute (the same values). Used where torch
    releases or devices disagree (mixed batch_norm dtypes on CUDA, ``dim=None``)."""
    try:
        expected = torch_call()
    except Exception as e:  # noqa: BLE001
        with pytest.raises((type(e), newer) if newer else type(e)):
            tr_call()
        return
    got = tr_call()
    pairs = zip(got, expected) if isinstance(expected, tuple) else [(got, expected)]
    for g, e in pairs:
        torch.testing.assert_close(g, e, equal_nan=True, rtol=2e-2, atol=2e-2)


# -- non-contiguous / stride-0 parameter tensors ---------------------------------------------------------------


def test_layer_norm_strided_weight_and_bias(device):
    """torch: uses weight[i] for column i of any strided weight. tritred: ``weight.reshape(-1)`` of a 1-D
    strided view is still that view, and the kernel indexes it with unit stride: w[::2] is read as w[:8] of the
    base, i.e. every output column but the first gets the wrong scale and shift."""
    x = torch.randn(4, 8, device=device)
    p = torch.randn(16, device=device)
    w, b = p[::2], p[1::2]
    torch.testing.assert_close(tr.layer_norm(x, (8,), w, b), F.layer_norm(x, (8,), w, b))


def test_layer_norm_expanded_weight(device):
    """torch: an expanded weight ``torch.randn(1).expand(8)`` scales every column by the same value. tritred:
    reads 8 consecutive elements from a 1-element storage (out of bounds: garbage or denormals)."""
    x = torch.randn(4, 8, device=device)
    w = torch.randn(1, device=device).expand(8)
    torch.testing.assert_close(tr.layer_norm(x, (8,), w, w), F.layer_norm(x, (8,), w, w))


def test_layer_norm_weight_flat_view_strided(device):
    """torch: weight of shape normalized_shape with any strides. tritred: ``w[:, ::2]`` of a (4, 10) tensor has a
    flat view (stride 2) that ``reshape(-1)`` returns without copying, then read with unit stride."""
    x = torch.randn(3, 4, 5, device=device)
    w = torch.randn(4, 10, device=device)[:, ::2]
    torch.testing.assert_close(tr.layer_norm(x, (4, 5), w), F.layer_norm(x, (4, 5), w))


def test_batch_norm_strided_weight_and_bias(device):
    """torch: weight[c]/bias[c] per channel for any strides. tritred: the apply kernel reads ``w_ptr + c``."""
    x = torch.randn(4, 3, 5, device=device)
    p = torch.randn(6, device=device)
    out = tr.batch_norm(x, None, None, p[::2], p[1::2], training=True)
    torch.testing.assert_close(out, F.batch_norm(x, None, None, p[::2], p[1::2], training=True))


def test_batch_norm_expanded_weight(device):
    """torch: ``torch.randn(1).expand(3)`` as weight scales every channel alike. tritred: out-of-bounds reads."""
    x = torch.randn(4, 3, 5, device=device)
    w = torch.randn(1, device=device).expand(3)
    torch.testing.assert_close(tr.batch_norm(x, None, None, w, None, training=True),
                               F.batch_norm(x, None, None, w, None, training=True))


def test_batch_norm_eval_strided_running_stats(device):
    """torch (eval): normalizes with running_mean[c], running_var[c] of any strides. tritred: reads
    ``running_mean.data_ptr() + c`` (elements of the base tensor that are not the running stats)."""
    x = torch.randn(4, 3, 5, device=device)
    p = torch.rand(6, device=device) + 0.5
    rm, rv = p[::2], p[1::2]
    torch.testing.assert_close(tr.batch_norm(x, rm, rv, training=False), F.batch_norm(x, rm, rv, training=False))


def test_batch_norm_train_strided_running_stats(device):
    """torch: updates non-contiguous running_mean/running_var in place. tritred: RuntimeError 'running_mean
    must be contiguous to be updated in place'."""
    x = torch.randn(4, 3, 5, device=device)
    rm, rv = torch.zeros(6, device=device)[::2], torch.ones(6, device=device)[::2]
    rm_t, rv_t = rm.clone(), rv.clone()
    out = tr.batch_norm(x, rm, rv, training=True)
    ref = F.batch_norm(x, rm_t, rv_t, training=True)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(rm, rm_t)
    torch.testing.assert_close(rv, rv_t)


# -- batch_norm argument checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("which", ["mean_only", "var_only", "none"])
def test_batch_norm_one_running_stat(device, which, training):
    """torch, training: ValueError 'running_mean and running_var must either both be None or neither be None';
    eval: RuntimeError 'running_var must be defined in evaluation mode' (its eval check comes first)."""
    x = torch.randn(4, 3, 5, device=device)
    s = torch.zeros(3, device=device)
    rm, rv = {"mean_only": (s, None), "var_only": (None, s), "none": (None, None)}[which]
    if training and which == "none":
        return  # (valid: batch statistics only)
    _raises_like_torch(lambda: tr.batch_norm(x, rm, rv, training=training),
                       lambda: F.batch_norm(x, rm, rv, training=training))
    if not training:
        missing = "running_mean" if rm is None else "running_var"
        with pytest.raises(RuntimeError, match=f"{missing} must be defined in evaluation mode"):
            tr.batch_norm(x, rm, rv, training=training)


def test_batch_norm_train_eps_zero(device):
    """torch: ValueError 'batch_norm eps must be positive during training, but got 0.0' before touching the
    running stats. tritred: returns NaN for a constant channel and updates running_mean/running_var."""
    x = torch.ones(4, 3, device=device)
    rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
    _raises_like_torch(lambda: tr.batch_norm(x, rm, rv, training=True, eps=0.0),
                       lambda: F.batch_norm(x, rm.clone(), rv.clone(), training=True, eps=0.0))
    assert torch.equal(rm, torch.zeros(3, device=device)) and torch.equal(rv, torch.ones(3, device=device))


@pytest.mark.parametrize("what", ["running_float64", "running_bfloat16", "weight_float16", "input_float64",
                                  "half_input_weight32_running16", "half_input_weight16_bias32"])
def test_batch_norm_mixed_dtypes(device, what):
    """torch: RuntimeError 'mixed dtype (CPU): expect parameter to have scalar type of Float' for a float32
    input with float64/bfloat16/float16 running stats or weight (and 'all inputs must share same datatype' for a
    float64 input with float32 stats) on the CPU; torch 2.11 on CUDA computes. tritred: raises where torch raises,
    else computes right values (running stats updated in their own dtype)."""
    x = torch.randn(4, 3, 5, device=device)
    rm, rv, w, b = torch.zeros(3, device=device), torch.ones(3, device=device), None, None
    if what == "half_input_weight32_running16":  # (each allowed alone beside a float16 input; not together)
        x, rm, rv, w = x.half(), rm.half(), rv.half(), torch.ones(3, device=device)
    elif what == "half_input_weight16_bias32":
        x, w, b = x.half(), torch.ones(3, device=device, dtype=torch.float16), torch.zeros(3, device=device)
    elif what == "running_float64":
        rm, rv = rm.double(), rv.double()
    elif what == "running_bfloat16":
        rm, rv = rm.bfloat16(), rv.bfloat16()
    elif what == "weight_float16":
        w = torch.ones(3, device=device, dtype=torch.float16)
    else:
        x = x.double()
    try:
        F.batch_norm(x, rm.clone(), rv.clone(), w, b, True)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            tr.batch_norm(x, rm.clone(), rv.clone(), w, b, True)
        return
    # torch accepts (2.11 on CUDA), but its values are not always right there (a float32 input beside float64
    # running stats gave outputs of 1e35 on the H200): the values are checked against float64 on the CPU.
    rm_t, rv_t = rm.clone(), rv.clone()
    y = tr.batch_norm(x, rm_t, rv_t, w, b, True)
    d = lambda t: None if t is None else t.double().cpu()  # noqa: E731
    rm_r, rv_r = d(rm), d(rv)
    ref = F.batch_norm(d(x), rm_r, rv_r, d(w), d(b), True)
    tol = 2e-3 if x.dtype == torch.float16 else 1e-4
    torch.testing.assert_close(y.double().cpu(), ref, rtol=tol, atol=tol)
    torch.testing.assert_close(rm_t.double().cpu(), rm_r, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(rv_t.double().cpu(), rv_r, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.int64])
@pytest.mark.parametrize("op", ["layer_norm", "batch_norm"])
def test_norm_bad_dtype_exception_type(device, op, dtype):
    """torch: NotImplementedError ('"LayerNormKernelImpl" / "batch_norm" not implemented for ...'), and
    docs/semantics.md says complex inputs raise NotImplementedError. tritred: RuntimeError 'input dtype must be
    float16, bfloat16, float32 or float64'."""
    x = torch.ones(4, 3, device=device, dtype=dtype)
    if op == "layer_norm":
        _raises_like_torch(lambda: tr.layer_norm(x, (3,)), lambda: F.layer_norm(x, (3,)))
    else:
        rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
        _raises_like_torch(lambda: tr.batch_norm(x, rm, rv, training=True),
                           lambda: F.batch_norm(x, rm.clone(), rv.clone(), training=True))


# -- statistics --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_single_infinite_element(device, name):
    """torch: ``var_mean(tensor([-inf]), 0)`` is (nan, -inf): with one element the Welford mean is the element.
    tritred (single_pass): the two-pass correction adds (x - mean) = inf - inf = NaN to the mean, so the mean is
    NaN (``_finish`` only keeps +-inf for cnt > 1, i.e. the intent is torch's result)."""
    x = torch.tensor([[float("-inf")], [2.0], [float("inf")]], device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = getattr(torch, name)(x.cpu(), 1)
    out = getattr(tr, name)(x, 1)
    torch.testing.assert_close(out[1].cpu(), ref[1], equal_nan=True)


@pytest.mark.xfail(strict=True, reason="var/std overflow in the float32 M2 accumulator while the result is finite")
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_of_large_float32_values_is_finite(device, name):
    """torch (CPU) and the fp64 reference: var of 100 float32 values ~ N(0, 2.5e18^2) is ~6e36, finite in float32.
    tritred: M2 = sum of squared deviations ~ 6e38 overflows the float32 accumulator -> inf (std likewise for
    ``[3e19, -3e19]``, whose std 4.2e19 is finite)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 100, generator=g) * 2.5e18).to(device)
    ref = getattr(torch, name)(x.double().cpu(), 1)
    assert bool(ref.isfinite().all()) and bool((ref < torch.finfo(torch.float32).max).all())
    out = getattr(tr, name)(x, 1)
    assert bool(out.isfinite().all()), out
    torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-5, atol=0)


# -- argument types torch accepts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "var", "logsumexp", "max"])
@pytest.mark.parametrize("kind", ["numpy", "tensor"])
def test_index_like_dim(device, op, kind):
    """torch: any integer-like dim (``np.int64(1)``, ``torch.tensor(1)``; anything with __index__) is accepted.
    tritred: TypeError 'argument 'dim' must be int or tuple of ints, not int64/Tensor'."""
    x = torch.randn(3, 4, device=device)
    if op == "max" and kind == "tensor":  # torch.max(x, tensor) is the binary elementwise overload: not ours
        with pytest.raises(TypeError, match="binary"):
            tr.max(x, torch.tensor(1))
        return
    d = np.int64(1) if kind == "numpy" else torch.tensor(1)
    out, ref = getattr(tr, op)(x, d), getattr(torch, op)(x, d)
    if op == "max":
        out, ref = tuple(out), tuple(ref)
    torch.testing.assert_close(out, ref)


def test_var_bool_correction(device):
    """torch: ``var(x, 1, correction=True)`` == ``var(x, 1, correction=1)``. tritred: TypeError."""
    x = torch.randn(3, 4, device=device)
    torch.testing.assert_close(tr.var(x, 1, correction=True), torch.var(x, 1, correction=True))


@pytest.mark.parametrize("case", ["sum_keepdim_int", "logsumexp_dim_none", "max_keepdim_without_dim",
                                  "prod_dim_none"])
def test_rejects_what_torch_rejects(device, case):
    """torch 2.13 raises TypeError for each call (keepdim must be bool; logsumexp's dim is required; max(input)
    has no keepdim; prod takes no dim=None); torch 2.11 computes ``logsumexp(x, None)`` and ``prod(x, None)``:
    tritred follows the installed torch."""
    x = torch.randn(3, 4, device=device)
    calls = {
        "sum_keepdim_int": (lambda m: m.sum(x, 0, keepdim=1)),
        "logsumexp_dim_none": (lambda m: m.logsumexp(x, None)),
        "max_keepdim_without_dim": (lambda m: m.max(x, keepdim=True)),
        "prod_dim_none": (lambda m: m.prod(x, None)),
    }
    call = calls[case]
    _like_torch(lambda: call(tr), lambda: call(torch))


def test_mean_complex_dtype_arg(device):
    """torch: ``mean(x, 0, dtype=torch.complex64)`` works. tritred: complex is unsupported (NotImplementedError
    per docs/semantics.md, as ``sum(..., dtype=complex64)`` raises), but mean raises RuntimeError 'Input dtype
    must be either a floating point or complex dtype. Got: torch.complex64'."""
    x = torch.randn(3, 4, device=device)
    with pytest.raises(NotImplementedError):
        tr.mean(x, 0, dtype=torch.complex64)


# -- Triton interpreter (CPU) only -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "softmax", "log_softmax"])
@pytest.mark.parametrize("src", [torch.bool, torch.int8, torch.int32, torch.int64])
def test_integer_input_with_bfloat16_dtype(device, op, src):
    """torch: ``sum(int_tensor, dtype=torch.bfloat16)`` converts the integers to bfloat16 first. tritred on the
    CPU interpreter: Triton's interpreter casts int -> bf16 with ``astype(uint16)`` (bf16 is stored as uint16),
    so the kernel's ``x.to(CAST)`` yields bit patterns (1e-38, NaN, 0). Compiled Triton casts correctly; a cast
    through float32 would avoid the interpreter's path."""
    if device != "cpu":
        pytest.skip("Triton interpreter only")
    x = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 0, 1, 1, 0, 1]] if src == torch.bool else
                     [[1, 2, 3, 1, 2, 3], [3, 1, 1, 2, 2, 3]], device=device).to(src)
    out, ref = getattr(tr, op)(x, 1, dtype=torch.bfloat16), getattr(torch, op)(x, 1, dtype=torch.bfloat16)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


def test_batch_norm_running_stats_must_be_1d(device):
    """torch: RuntimeError for running stats of shape [1, C] (its kernels index them as 1-D); weight [1, C] is
    accepted."""
    x = torch.randn(4, 3, 5, device=device)
    _raises_like_torch(lambda: tr.batch_norm(x, torch.zeros(1, 3, device=device), torch.ones(1, 3, device=device),
                                             training=True),
                       lambda: F.batch_norm(x.cpu(), torch.zeros(1, 3), torch.ones(1, 3), training=True))


# -- found by adversarial review ------------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [None, dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=8),
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=2, split=3)], ids=str)
def test_statistics_merge_with_an_empty_side_and_means_past_1e19(cfg, force, device):
    """Chan's merge with one empty side squared the other side's whole mean (1e20^2 = inf in float32) and
    multiplied by the zero count: NaN. torch: finite."""
    if cfg is not None:
        force("var", **cfg)
    x = torch.full((2, 5), 1e20, device=device)
    torch.testing.assert_close(tr.var(x, -1).cpu(), torch.zeros(2))
    g = torch.Generator().manual_seed(0)
    # a spread of 1e15 around 1e20: float32 keeps ~5 digits of it (1e13 noise would be one ulp of the mean)
    xb = (torch.full((2, 3, 40, 40), 1e20) + torch.randn(2, 3, 40, 40, generator=g) * 1e15).to(device)
    rm, rv = torch.zeros(3, device=device), torch.ones(3, device=device)
    rm_ref, rv_ref = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    y = tr.batch_norm(xb, rm, rv, None, None, True)
    ref = F.batch_norm(xb.double().cpu(), rm_ref, rv_ref, None, None, True)
    assert bool(y.isfinite().all()) and bool(rv.isfinite().all())
    torch.testing.assert_close(rv.cpu().double(), rv_ref, rtol=3e-3, atol=0)
    assert (y.cpu().double() - ref).abs().max().item() < 0.05


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "softmax", "log_softmax"])
@pytest.mark.parametrize("src", [torch.float64, torch.int64])
def test_dtype_bfloat16_from_float64_and_integers(name, src, device):
    """dtype=torch.bfloat16 on a float64 input: the interpreter's direct cast reinterpreted bits (sum 6 -> 0).
    Conversions now go through float32, as torch's (bit for bit)."""
    x = torch.tensor([[1.0, 2.0, 3.0, 0.5], [3.25, -7.0, 1e3, 1.0 / 3]], dtype=torch.float64)
    x = (x if src == torch.float64 else x.round().to(src)).to(device)
    if src != torch.float64 and name in ("softmax", "log_softmax"):
        x = x.to(torch.float64)
    fn = getattr(torch, name)
    ref = fn(x.cpu().to(torch.float32).to(torch.bfloat16).double(), -1)  # torch: convert, then reduce
    out = getattr(tr, name)(x, -1, dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu().double(), ref, rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("cfg", [None, dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=2),
                                 dict(strategy="split", BLOCK_M=1, BLOCK_N=2, split=2)], ids=str)
def test_max_min_values_are_the_elements_at_their_indices(cfg, force, device):
    """max/min returned the reduction's value: +0.0 for a first maximum -0.0 (max.NaN orders -0 < +0). torch
    returns x[index] (signs of zero included), rows and columns."""
    if cfg is not None:
        force("max", **cfg)
        force("min", **cfg)
    x = torch.tensor([[-0.0, 0.0, 0.0, -1.0, 0.0], [0.0, -0.0, -0.0, 1.0, -2.0]], device=device)
    for name in ("max", "min"):
        for dim, xx in ((1, x), (0, x.t().contiguous())):
            out, ref = getattr(tr, name)(xx, dim), getattr(torch, name)(xx.cpu(), dim)
            assert torch.equal(out.indices.cpu(), ref.indices)
            assert torch.equal(torch.signbit(out.values.cpu()), torch.signbit(ref.values)), (name, dim)
            assert torch.equal(out.values.cpu(), xx.cpu().gather(dim, ref.indices.unsqueeze(dim)).squeeze(dim))


# -- non-finite scalar arguments ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["var_correction_-inf", "var_correction_nan", "layer_norm_eps_inf",
                                  "batch_norm_eval_eps_inf"])
def test_infinite_and_nan_scalar_arguments(case, device):
    """Infinite and NaN scalars reach the kernels as torch's: f32_split(inf) was (inf, inf - inf = NaN), so var
    correction=-inf gave NaN (torch: 0) and layer_norm/batch_norm eps=inf NaN (torch: bias / 0); var
    correction=nan gave NaN, where torch's max(N - correction, 0) takes it to 0 (m2 / 0 = inf)."""
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    w, b = torch.randn(6), torch.randn(6)
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    xb = torch.randn(3, 4, 5)
    calls = {
        "var_correction_-inf": (lambda m, t: m.var(t, 1, correction=-math.inf), x),
        "var_correction_nan": (lambda m, t: m.var(t, 1, correction=math.nan), x),
        "layer_norm_eps_inf": (lambda m, t: m.layer_norm(t, (6,), w.to(t.device), b.to(t.device), eps=math.inf), x),
        "batch_norm_eval_eps_inf": (lambda m, t: m.batch_norm(t, rm.to(t.device), rv.to(t.device), None, None, False,
                                                              0.1, math.inf), xb),
    }
    fn, inp = calls[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = fn(F if "norm" in case else torch, inp)
        out = fn(tr, inp.to(device))
    torch.testing.assert_close(out.cpu(), ref, equal_nan=True)


@pytest.mark.parametrize("case", ["sum_dim_tuple_with_bool", "var_int_unbiased", "max_dim_None", "min_dim_None",
                                  "layer_norm_float_shape", "batch_norm_training_int", "batch_norm_momentum_bool",
                                  "batch_norm_training_eps_nan"])
def test_argument_types_like_torch(case, device):
    """Argument forms where tritred raised and torch computes, or the reverse (torch 2.13): the same exception
    type as torch, or the same result."""
    x = torch.randn(4, 6).to(device)
    xb = torch.randn(3, 4, 5).to(device)
    rm, rv = torch.zeros(4, device=device), torch.ones(4, device=device)
    calls = {
        "sum_dim_tuple_with_bool": lambda m: m.sum(x, (0, True)),           # torch: a full sum
        "var_int_unbiased": lambda m: m.var(x, 1, 1),                       # torch: TypeError
        "max_dim_None": lambda m: m.max(x, None),                           # torch: TypeError
        "min_dim_None": lambda m: m.min(x, None),                           # torch: TypeError
        "layer_norm_float_shape": lambda m: m.layer_norm(x, (6.0,)),        # torch: TypeError
        "batch_norm_training_int": lambda m: m.batch_norm(xb, rm, rv, None, None, 1),          # torch: TypeError
        "batch_norm_momentum_bool": lambda m: m.batch_norm(xb, rm, rv, None, None, True, True),  # torch: computes
        "batch_norm_training_eps_nan": lambda m: m.batch_norm(xb, rm, rv, None, None, True, 0.1, math.nan),  # NaNs
    }
    # max/min(x, None): torch 2.11 raises RuntimeError (a dim name lookup), torch 2.13 TypeError, as tritred
    newer = TypeError if case in ("max_dim_None", "min_dim_None") else None
    _like_torch(lambda: calls[case](tr), lambda: calls[case](F if "norm" in case else torch), newer)


def test_f32_split_keeps_infinities_and_the_sign_of_zero():
    from tritred_ops.kernels.dtypes import f32_split

    assert f32_split(math.inf) == (math.inf, 0.0) and f32_split(-math.inf) == (-math.inf, 0.0)
    hi, lo = f32_split(math.nan)
    assert math.isnan(hi) and lo == 0.0
    hi, lo = f32_split(-0.0)
    assert math.copysign(1.0, hi + lo) == -1.0
    hi, lo = f32_split(0.1)
    assert hi + lo == 0.1 and hi != 0.1


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("src", [torch.int8, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("cfg", [None, dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=16)], ids=str)
def test_softmax_of_integers_with_masked_lanes(name, src, cfg, force, device):
    """The single pass loads masked lanes as -inf, which an integer tile cannot hold (cast, it became garbage that
    entered the row's max and sum: log_softmax of int8 off by 0.13). Integer rows select -inf instead."""
    if cfg is not None:
        force(name, **cfg)
    g = torch.Generator().manual_seed(seed())
    lo, hi = (0, 2) if src == torch.bool else (0, 100) if src == torch.uint8 else (-100, 100)
    x = torch.randint(lo, hi, (5, 10), generator=g).to(src)  # 10 of 16 lanes: 6 masked per row
    ref = getattr(torch, name)(x.double(), -1)
    out = getattr(tr, name)(x.to(device), -1, dtype=torch.float32)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.int32, torch.int8])
@pytest.mark.parametrize("cfg", [None, dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=16)], ids=str)
def test_max_min_with_indices_of_rows_beyond_zero_with_masked_lanes(name, src, cfg, force, device):
    """The single pass of float rows loads masked lanes as the identity (+-inf) instead of selecting it: a row
    whose values all lie beyond zero (all negative for max, all positive for min) catches a masked lane that
    loads 0 (value 0 at a position past the row)."""
    if cfg is not None:
        force(name, **cfg)
    g = torch.Generator().manual_seed(seed())
    sign = -1 if name == "max" else 1
    x = (sign * torch.randint(1, 100, (5, 10), generator=g)).to(src)  # 10 of 16 lanes: 6 masked per row
    if src.is_floating_point:
        x = x + sign * torch.rand((5, 10), generator=g).to(src)
    ref = getattr(torch, name)(x, -1)
    out = getattr(tr, name)(x.to(device), -1)
    assert torch.equal(out.values.cpu(), ref.values) and torch.equal(out.indices.cpu(), ref.indices)


def test_overflowing_tile_variance_is_inf_not_nan(device):
    """A tile whose squared deviations overflow float32: M2 = sum(d^2) - c * (c / n) was inf - inf (NaN); it is
    inf, as torch's. batch_norm of 1e30-scale channels (channels-fast tiles, 2-D) then normalizes by an inf
    variance as torch does (no NaN), and its running variance is inf; var_mean of one short row likewise."""
    g = torch.Generator().manual_seed(seed())
    x = 1e30 * torch.randn(100, 40, generator=g)
    rm, rv = torch.zeros(40, device=device), torch.ones(40, device=device)
    y = tr.batch_norm(x.to(device), rm, rv, None, None, True, 0.1, 1e-5)
    ref_rm, ref_rv = torch.zeros(40), torch.ones(40)
    ref = torch.nn.functional.batch_norm(x, ref_rm, ref_rv, None, None, True, 0.1, 1e-5)
    assert torch.equal(y.cpu().isnan(), ref.isnan()) and not y.isnan().any()
    assert torch.equal(rv.cpu().isinf(), ref_rv.isinf()) and rv.isinf().all()
    var, mean = tr.var_mean(torch.tensor([1e38, -1e38, 2e38, 0], device=device))
    assert var.item() == float("inf") and mean.item() == pytest.approx(5e37)


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
def test_no_degrees_of_freedom_warns_as_torch(device, op):
    """torch warns 'degrees of freedom is <= 0' when correction >= N, on every call, at the caller's line."""
    x = torch.randn(3, 1, device=device)
    for _ in range(2):  # (the second call too: such a call is not replayed from a plan)
        with pytest.warns(UserWarning, match=rf"^{op}\(\): degrees of freedom is <= 0") as seen:
            getattr(tr, op)(x, 1)
        assert all(w.filename == __file__ for w in seen if "degrees of freedom" in str(w.message)), seen
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        getattr(tr, op)(torch.randn(3, 2, device=device), 1)  # (N - correction = 1: no warning)
