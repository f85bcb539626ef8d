"""rms_norm's forward: torch.nn.functional.rms_norm's semantics (float64 references), eps=None, weights of other
dtypes, layouts and multi-dim shapes, every forward branch, errors as torch raises them, the registered record."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
import tritred_ops as tr
from ops_helpers import LAYOUTS, assert_close, randn

BRANCHES = [None, dict(strategy="single_pass", BLOCK_M=4, BLOCK_N=128),
            dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=128, num_programs=3, num_stages=2),
            dict(strategy="single_pass", BLOCK_M=8, BLOCK_N=128, threads_per_row=4),
            dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=16),
            dict(strategy="multi_pass", BLOCK_M=1, BLOCK_N=32, num_programs=2),
            dict(strategy="split_rows", BLOCK_N=32, split=4)]


def _ref(x, ns, w, eps=None):
    with warnings.catch_warnings():  # (torch warns once for a weight of another dtype than the input)
        warnings.simplefilter("ignore")
        out = F.rms_norm(x.double().cpu(), ns, None if w is None else w.double().cpu(),
                         torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps
                         if eps is None else eps)
    return out


@pytest.mark.triton_compat
@pytest.mark.parametrize("cfg", BRANCHES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_branches_dtypes(cfg, dtype, force, device):
    """Every forward branch (several rows a tile, a persistent pipelined grid, rows over 4 threads each, the loop with
    one or two rows, each row over 4 programs, the last 4 wide) on 100-wide rows far from zero, with and without a
    weight, eps given and None."""
    if cfg is not None:
        force("rms_norm", **cfg)
    x = randn((6, 100), dtype, device, offset=5.0)
    w = randn((100,), dtype, device)
    for weight, eps in ((w, 1e-4), (None, None)):
        out = tr.rms_norm(x, (100,), weight, eps)
        assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
        assert_close(out, _ref(x, (100,), weight, eps), n=16, scale=4, what=f"{dtype} {cfg} {weight is None}")


def test_eps_none_is_the_computation_dtypes_machine_epsilon(device):
    """eps=None: float32's epsilon for float16/bfloat16/float32 inputs, float64's for float64 (as torch 2.13's
    rms_norm; not torch.finfo(input.dtype).eps, which for bfloat16 is 2^16 times larger). Rows of 1e-4, whose
    mean square (1e-8) is near float32's epsilon (1.2e-7), show which one is added."""
    for dtype, eps in ((torch.bfloat16, 2.0 ** -23), (torch.float16, 2.0 ** -23), (torch.float32, 2.0 ** -23),
                       (torch.float64, 2.0 ** -52)):
        x = torch.full((2, 8), 1e-4, dtype=dtype, device=device)
        out = tr.rms_norm(x, [8])
        xd = x.double().cpu()
        want = xd / (xd.square().mean(-1, keepdim=True) + eps).sqrt()
        assert_close(out, want, what=f"{dtype}")
        assert_close(out, F.rms_norm(x.cpu(), [8]).double(), what=f"{dtype} torch")
        wrong = xd / (xd.square().mean(-1, keepdim=True) + torch.finfo(dtype).eps).sqrt()
        if dtype in (torch.bfloat16, torch.float16):
            assert (out.double().cpu() - wrong).abs().max() > 0.1


@pytest.mark.parametrize("cfg", BRANCHES, ids=str)
@pytest.mark.parametrize(("x_dtype", "w_dtype"), [(torch.bfloat16, torch.float32), (torch.float32, torch.float64),
                                                   (torch.float16, torch.bfloat16), (torch.float32, torch.int32),
                                                   (torch.bfloat16, torch.bool), (torch.bfloat16, torch.float64),
                                                   (torch.float16, torch.float64)])
def test_weights_of_other_dtypes(x_dtype, w_dtype, cfg, force, device):
    """As torch (its composite path): the product in the promoted dtype of the computation and the weight, the
    output in the input's dtype (a float64 weight of a bfloat16 input gave zeros and NaN under the interpreter:
    kernels._to_out). Every forward branch."""
    if cfg is not None:
        force("rms_norm", **cfg)
    x = randn((5, 128), x_dtype, device, offset=1.0)
    w = randn((128,), w_dtype, device) if w_dtype != torch.bool else torch.rand(128, device=device) > 0.5
    out = tr.rms_norm(x, (128,), w, 1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_out = F.rms_norm(x.cpu(), (128,), w.cpu(), 1e-6)
    assert out.dtype == torch_out.dtype == x_dtype
    assert_close(out, _ref(x, (128,), w, 1e-6), n=16, scale=4, what=f"{x_dtype} {w_dtype} {cfg}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts_and_multi_dim_shapes(layout, device):
    """Inputs read in place through their strides (transposed: rows that are columns in memory), normalized
    shapes of one to three dims (the third: 210 elements, the interpreter's loop past 256 is not reached; forced
    loops are in test_branches_dtypes); the output contiguous, as torch's."""
    x = randn((4, 5, 6, 7), torch.float32, device, layout)
    for ns in ((7,), (6, 7), (5, 6, 7)):
        w = randn(ns, torch.float32, device)
        out = tr.rms_norm(x, ns, w, 1e-3)
        assert out.is_contiguous() and out.stride() == F.rms_norm(x, ns, w, 1e-3).stride()
        assert_close(out, _ref(x, ns, w, 1e-3), n=16, scale=4, what=f"{layout} {ns}")


def test_channels_last_inputs_keep_their_format(device):
    """torch's rms_norm returns a channels-last output for a channels-last input (its composite path; layer_norm's
    output is contiguous): over the last dim (the input gathered), over the last two (read in place), 5-D."""
    x4 = randn((2, 3, 4, 5), torch.float32, device).contiguous(memory_format=torch.channels_last)
    x5 = randn((2, 3, 2, 4, 5), torch.float32, device).contiguous(memory_format=torch.channels_last_3d)
    for x, ns in ((x4, [5]), (x4, [4, 5]), (x5, [5])):
        w = randn(ns, torch.float32, device)
        out = tr.rms_norm(x, ns, w)
        assert out.stride() == F.rms_norm(x, ns, w).stride(), (ns, out.stride())
        assert_close(out, _ref(x, ns, w), n=16, scale=4, what=f"{x.dim()}-D {ns}")


def test_split_rows_hold_a_row_in_several_programs(force, device, phase_spy):
    """``split_rows``: 3 programs of 4 columns hold each row of 10 (the last one 2 wide) and sum their partial sums
    of squares after a per-row barrier in one cooperative launch where compiled (PHASE 3), in a second launch under
    the interpreter (PHASE 1 then 2). Strided rows, a row far from zero, a row with NaN; the saved rstd through
    the backward (input and weight gradients against float64 autograd)."""
    force("rms_norm", strategy="split_rows", BLOCK_N=4, split=3)
    x = randn((3, 2, 10), torch.float32, device, "sliced")
    x[0, 0] += 1e4
    x[1, 1, 4] = float("nan")
    w = randn((10,), torch.float32, device)
    out = tr.rms_norm(x, (10,), w)
    assert phase_spy == ([3] if device == "cuda" else [1, 2])
    assert_close(out, _ref(x, (10,), w), n=16, scale=4, what="split rows")
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    dy = randn((3, 2, 10), torch.float32, device)
    tr.rms_norm(xg, (10,), wg).backward(dy)
    xd, wd = x.double().cpu().requires_grad_(), w.double().cpu().requires_grad_()
    F.rms_norm(xd, (10,), wd, torch.finfo(torch.float32).eps).backward(dy.double().cpu())
    assert_close(xg.grad, xd.grad, n=16, scale=8, what="dx")
    assert_close(wg.grad, wd.grad, n=16, scale=8, what="dw (NaN: a row holds one)")


def test_long_rows_fewer_than_the_sms_are_split_rows(device, phase_spy):
    """The built-in rule: rows past the single pass (256 elements under the interpreter, 32768 compiled) that are
    fewer than the SMs (the CPU's 2 fake SMs, a GPU's) take the split, against float64."""
    n = 40000 if device == "cuda" else 5000
    x = randn((1, n), torch.float32, device, offset=3.0)
    w = randn((n,), torch.float32, device)
    out = tr.rms_norm(x, (n,), w)
    assert phase_spy[-1] == (3 if device == "cuda" else 2)
    assert_close(out, _ref(x, (n,), w), n=n, scale=4, what="few rows")


def test_loop_rows(device):
    """Rows past the interpreter's single pass (256): the built-in loop, rows of zeros and with NaN."""
    x = randn((5, 700), torch.bfloat16, device, offset=-3.0)
    x[1] = 0
    x[2, 5] = float("nan")
    w = randn((700,), torch.bfloat16, device)
    out = tr.rms_norm(x, [700], w)
    assert torch.equal(out[1].cpu(), torch.zeros(700, dtype=torch.bfloat16)) and out[2].isnan().all()
    keep = [0, 3, 4]
    assert_close(out[keep], _ref(x, (700,), w)[keep], n=16, scale=4, what="loop")


def test_empty_inputs(device):
    """No rows, and rows of no elements (torch: an empty output; rstd NaN, as 1 / sqrt(0 / 0 + eps))."""
    for shape, ns in (((0, 5), [5]), ((3, 0), [0])):
        x = torch.randn(shape, device=device)
        out = tr.rms_norm(x, ns, torch.ones(ns, device=device))
        assert out.shape == shape
    from tritred_ops.families.rms_norm.autograd import forward
    _, rstd = forward(torch.randn(3, 0, device=device), [0], None, None)
    assert rstd.shape == (3,) and rstd.isnan().all()


#: (call, torch's call): the same arguments; tritred must raise the exception type torch does, with its message.
ERRORS = {
    "shape": lambda f, x: f(x, [5]),
    "two dims": lambda f, x: f(x, [4, 6]),
    "empty normalized_shape": lambda f, x: f(x, []),
    "more dims than the input": lambda f, x: f(x, [2, 3, 4]),
    "weight shape": lambda f, x: f(x, [4], torch.ones(5, device=x.device)),
    "weight of two dims": lambda f, x: f(x, [4], torch.ones(1, 4, device=x.device)),
    "int normalized_shape": lambda f, x: f(x, 4),
    "float element": lambda f, x: f(x, [4.0]),
    "bool element": lambda f, x: f(x, [True]),
    "input not a tensor": lambda f, x: f([1.0, 2.0], [2]),
    "weight not a tensor": lambda f, x: f(x, [4], [1.0] * 4),
    "eps a string": lambda f, x: f(x, [4], None, "1e-5"),
    "integer input": lambda f, x: f(torch.ones(3, 4, dtype=torch.int64, device=x.device), [4]),
    "0-d input": lambda f, x: f(torch.tensor(2.0, device=x.device), [1]),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_as_torch(case, device):
    x = randn((3, 4), torch.float32, device)
    with pytest.raises(Exception) as want:  # noqa: PT011 (whatever torch raises)
        ERRORS[case](F.rms_norm, x.cpu())
    with pytest.raises(want.type) as got:
        ERRORS[case](tr.rms_norm, x)
    message = str(want.value).split("(position")[0].removeprefix("rms_norm(): ")
    if case not in ("integer input",):
        assert message.split(", but got")[0] in str(got.value), (str(want.value), str(got.value))


def test_arguments_torch_takes(device):
    """numpy and 0-d tensor sizes, a torch.Size, integer, bool and numpy epsilons, as torch."""
    import numpy as np

    x = randn((3, 4), torch.float32, device)
    for ns, eps in (((np.int64(4),), np.float32(1e-3)), ([torch.tensor(4)], 1), (torch.Size([4]), True)):
        assert_close(tr.rms_norm(x, ns, None, eps), _ref(x, (4,), None, float(eps)), n=4, what=f"{ns} {eps}")


def test_registered_record(device):
    """The registry's rms_norm record: torch's reference, random inputs, the Problem of a call, its byte count."""
    from tritred_ops.plugin import tritred_register_reductions

    (rec,) = [r for r in tritred_register_reductions() if r.spec.name == "rms_norm"]
    assert rec.spec.mirrors == "torch.nn.functional.rms_norm" and rec.reference is F.rms_norm
    args, kwargs = rec.make_inputs((6, 64), torch.float32, device)
    assert_close(rec.impl(*args, **kwargs), rec.reference(*args, **kwargs), n=64, what="record")
    problem = rec.problem(*args, **kwargs)
    assert (problem.op, problem.M, problem.N, problem.direction) == ("rms_norm", 6, 64, "forward")
    assert rec.byte_count(*args, **kwargs) == (2 * 6 * 64 + 64) * 4
