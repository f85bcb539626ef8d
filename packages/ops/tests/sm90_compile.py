"""Compile, for an H200 (sm_90), the kernels that tritred's ops launch on a list of calls: no GPU needed.

Run as a script in a process WITHOUT ``TRITON_INTERPRET`` (the interpreter replaces the JIT functions). Triton's
active driver is replaced by one that names an sm_90 target (``tritred_ops.testing.Sm90Driver``), the ops see an
H200 (``FAKE_H200``: the GPU heuristics decide), CPU tensors are let through, and each launch compiles
(``JITFunction.warmup``) instead of running. Catches what only compiling shows: a variable typed differently in two
branches, an unsupported op in a branch the interpreter takes in Python. Prints one line per call; exits 1 if any
failed.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

assert not os.environ.get("TRITON_INTERPRET"), "run without TRITON_INTERPRET"

import torch  # noqa: E402
from triton.runtime import driver  # noqa: E402
from tritred_ops.runtime.native import pack  # noqa: E402
from tritred_ops.testing import Sm90Driver, ptx_param_sizes, registers  # noqa: E402

#: Registers per thread of each launch of the call being compiled (printed with its line).
REGS: list[int | None] = []
#: Whether the native launcher packed each launch's parameters (checked against the PTX) or refused them.
NATIVE: list[bool] = []


def _patch() -> None:
    import tritred_ops.runtime as C
    import tritred_ops.runtime.device as D
    import tritred_ops.runtime.replay as R
    from tritred_core.testing import FAKE_H200

    driver.set_active(Sm90Driver())
    C.check_runnable = lambda op, x: None
    D.device_info = lambda device: FAKE_H200

    def compile_only(self, kernel, grid, *args, **kwargs):  # noqa: ANN001
        compiled = kernel.warmup(*args, grid=grid, **kwargs)
        REGS.append(registers(compiled.asm["cubin"]) if "cubin" in compiled.asm else None)
        # The native launcher's parameters (runtime/native.py, packed as a replay would) against the PTX's own.
        names = list(kernel.signature.parameters)
        template = [*args, *(kwargs[n] if n in kwargs else kernel.signature.parameters[n].default
                             for n in names[len(args):])]
        slots = {pos: pos for pos, a in enumerate(args) if isinstance(a, torch.Tensor)}
        packed = pack(compiled.src.signature, template, slots)
        NATIVE.append(packed is not None)
        if packed is not None:
            ptx_sizes = ptx_param_sizes(compiled.asm["ptx"])
            assert packed[3] == ptx_sizes, f"{kernel.fn.__name__}: native sizes {packed[3]} != PTX {ptx_sizes}"
        if compiled.metadata.launch_pdl:  # a dependent launch must wait before its first global memory access
            ptx = compiled.asm["ptx"]
            wait = ptx.find("griddepcontrol.wait")
            first = min((i for op in ("ld.global", "st.global", "atom.global", "red.global", "cp.async")
                         if (i := ptx.find(op)) >= 0), default=-1)
            assert 0 <= wait and (first < 0 or wait < first), f"{kernel.fn.__name__}: dependent launch without a wait"
    R.Recorder.launch = compile_only
    for name in ("reduce", "statistics", "softmax", "layer_norm", "batch_norm", "rms_norm", "cross_entropy",
                 "layer_norm.backward"):
        mod = sys.modules[f"tritred_ops.families.{name}" + ("" if name.endswith("backward") else ".launch")]
        mod.find_plan = lambda *a, **k: (None, None)  # (no replay plans: nothing is ever launched)
    sys.modules["tritred_ops.families.softmax.backward"].find_plan = lambda *a, **k: (None, None)
    sys.modules["tritred_ops.families.cross_entropy.backward"].find_plan = lambda *a, **k: (None, None)


def calls():
    import tritred_ops as tr
    bf, f32 = torch.bfloat16, torch.float32
    r = lambda *s, dtype=f32: torch.randn(*s, dtype=dtype)  # noqa: E731
    yield "sum rows single", lambda: tr.sum(r(64, 300, dtype=bf), -1)
    yield "sum rows unrolled loop", lambda: tr.sum(r(16, 16384, dtype=bf), -1)
    yield "sum rows split", lambda: tr.sum(r(4, 100000), -1)
    yield "sum rows loop two chunks per iteration", lambda: tr.sum(torch.empty(1024, 20000, dtype=bf), -1)
    yield "sum rows loop, odd width (inner chunks unmasked)", lambda: tr.sum(torch.empty(1024, 50257, dtype=bf), -1)
    yield "mean rows split two chunks per iteration", lambda: tr.mean(r(4, 100000, dtype=bf), -1)
    yield "sum columns short tiles", lambda: tr.sum(r(256, 2048, dtype=bf), 0)
    yield "amax columns split", lambda: tr.amax(r(16384, 64), 0)
    yield "prod staged dims", lambda: tr.prod(r(4, 6, 9), 1)
    # prod's reread of NaN products (float32 and float64 bits), its marks of split slices, and stages of both
    yield "prod rows single bfloat16", lambda: tr.prod(r(64, 1000, dtype=bf), -1)
    yield "prod rows split, merge of marks", lambda: tr.prod(r(4, 100000), -1)
    yield "prod columns float64", lambda: tr.prod(r(4096, 64, dtype=torch.float64), 0)
    yield "prod columns split float32, noted marks", lambda: tr.prod(r(16384, 192), 0)
    yield "sum split of odd-width rows, shifted slices", lambda: tr.sum(r(16, 99999, dtype=bf), -1)
    yield "prod split of odd-width rows, shifted slices", lambda: tr.prod(r(16, 99999, dtype=bf), -1)
    yield "var split of odd-width rows, shifted slices", lambda: tr.var(r(16, 99999, dtype=bf), -1)
    yield "max split of odd-width rows, shifted slices", lambda: tr.max(r(16, 99999, dtype=bf), -1)
    yield "prod of a sliced input in stages", lambda: tr.prod(r(64, 4000)[:, ::2])
    yield "mean two dims", lambda: tr.mean(r(4, 8, 6, 6), (0, 2, 3))
    yield "max rows", lambda: tr.max(r(64, 1000, dtype=bf), -1)
    yield "min rows loop two chunks per iteration", lambda: tr.min(torch.empty(1024, 20000, dtype=bf), -1)
    yield "max rows loop, odd width (shifted tiles)", lambda: tr.max(torch.empty(1024, 50257, dtype=bf), -1)
    yield "max rows split two chunks per iteration", lambda: tr.max(r(4, 100000), -1)
    yield "min columns", lambda: tr.min(r(512, 256), 0)
    yield "var rows unrolled", lambda: tr.var(r(16, 12288, dtype=bf), -1)
    yield "var_mean rows single", lambda: tr.var_mean(r(64, 1000), -1)
    yield "std rows split", lambda: tr.std(r(4, 200000), -1)
    yield "var columns", lambda: tr.var(r(4096, 512, dtype=bf), 0)
    yield "var_mean columns float32, shifted, split", lambda: tr.var_mean(torch.empty(16384, 4096), 0)
    yield "var two axes unrolled", lambda: tr.var(r(2, 4, 5120, dtype=bf).view(2, 4, 64, 80), (0, 2, 3))
    # short 2-byte rows, each over a few threads (threads_per_row): bf16 plain two-pass, fp16 corrected, two axes
    yield "var_mean rows over 8 threads each", lambda: tr.var_mean(r(64, 256, dtype=bf), -1)
    yield "std float16 rows over 4 threads each", lambda: tr.std(r(64, 128, dtype=torch.float16), -1)
    yield "var two axes, rows over 16 threads each", lambda: tr.var(r(4, 6, 16, 32, dtype=bf), (0, 2, 3))
    yield "layer_norm rows over 8 threads each", lambda: tr.layer_norm(r(64, 256, dtype=bf), (256,),
                                                                      r(256, dtype=bf), r(256, dtype=bf))
    yield "layer_norm float32 rows over 32 threads each, stats, no bias", lambda: tr.layer_norm_with_stats(
        r(64, 1024), (1024,), r(1024))
    yield "softmax rows single", lambda: tr.softmax(r(64, 1000, dtype=bf), -1)
    yield "softmax float32 rows single, libdevice exp", lambda: tr.softmax(r(64, 1000), -1)
    yield "softmax float32 rows single, 32 warps, split exp2", lambda: tr.softmax(r(16, 32768), -1)
    yield "log_softmax tiny rows, a row a thread", lambda: tr.log_softmax(r(4099, 7, dtype=bf), -1)
    yield "logsumexp few long rows, split", lambda: tr.logsumexp(r(2, 300000, dtype=bf), -1)
    yield "log_softmax rows loop", lambda: tr.log_softmax(r(8, 50257, dtype=bf), -1)
    # the narrower loops of 2-byte rows whose rows in flight fit the L2 (uninitialized: compiled, never run)
    yield "softmax rows loop 4096 on 8 warps", lambda: tr.softmax(torch.empty(1024, 20000, dtype=bf), -1)
    yield "log_softmax rows loop 8192 on 16 warps", lambda: tr.log_softmax(torch.empty(800, 40000, dtype=bf), -1)
    yield "logsumexp rows loop 4096 on 8 warps", lambda: tr.logsumexp(torch.empty(1024, 40000, dtype=bf), -1)
    yield "softmax split rows", lambda: tr.softmax(r(4, 131072), -1)
    yield "logsumexp columns", lambda: tr.logsumexp(r(4096, 128), 0)
    yield "layer_norm single", lambda: tr.layer_norm(r(64, 1024, dtype=bf), (1024,), r(1024, dtype=bf),
                                                     r(1024, dtype=bf))
    yield "layer_norm unrolled", lambda: tr.layer_norm(r(16, 12288, dtype=bf), (12288,), r(12288, dtype=bf))
    yield "layer_norm loop", lambda: tr.layer_norm(r(4, 65536), (65536,))
    yield "layer_norm masked rows past the L2, its loop", lambda: tr.layer_norm(
        torch.empty(8192, 18944, dtype=torch.float16), (18944,))
    yield "std float32 rows of 3, 64 a warp", lambda: tr.std(r(506640, 3), -1, keepdim=True)
    yield "layer_norm odd width", lambda: tr.layer_norm(r(64, 300, dtype=bf), (300,))
    yield "layer_norm odd width, shifted weight and bias", lambda: tr.layer_norm(
        r(64, 999, dtype=bf), (999,), r(999, dtype=bf), r(999, dtype=bf))
    yield "layer_norm odd width loop", lambda: tr.layer_norm(torch.empty(1024, 50257, dtype=bf), (50257,),
                                                             r(50257, dtype=bf), r(50257, dtype=bf))
    yield "var odd width loop", lambda: tr.var(torch.empty(1024, 50257, dtype=bf), -1)
    # single passes of two tiles (BLOCK_TAIL: rows just past a power of two), shifted and unshifted (padded rows)
    yield "sum two tiles", lambda: tr.sum(r(64, 2049, dtype=bf), -1)
    yield "softmax two tiles", lambda: tr.softmax(r(64, 2049, dtype=bf), -1)
    yield "log_softmax two tiles float32", lambda: tr.log_softmax(r(64, 4097), -1)
    yield "logsumexp two tiles", lambda: tr.logsumexp(r(64, 2049, dtype=bf), -1)
    yield "softmax two tiles, padded rows", lambda: tr.softmax(r(64, 2064, dtype=bf)[:, :2049], -1)
    yield "var two tiles", lambda: tr.var(r(64, 2049, dtype=bf), -1)
    yield "var_mean two tiles float32", lambda: tr.var_mean(r(64, 2049), -1)
    yield "layer_norm two tiles, shifted weight and bias", lambda: tr.layer_norm(
        r(64, 2049, dtype=bf), (2049,), r(2049, dtype=bf), r(2049, dtype=bf))
    yield "layer_norm 1536-wide rows, unrolled loop on one warp", lambda: tr.layer_norm(
        r(64, 1536, dtype=bf), (1536,), r(1536, dtype=bf), r(1536, dtype=bf))
    yield "layer_norm 2560-wide rows, unrolled loop on two warps", lambda: tr.layer_norm(
        r(64, 2560, dtype=torch.float16), (2560,), None, None)
    yield "layer_norm two tiles, padded rows", lambda: tr.layer_norm(
        r(64, 1040)[:, :1025], (1025,), r(1025), r(1025))
    yield "batch_norm training", lambda: tr.batch_norm(r(8, 16, 14, 14, dtype=bf), torch.zeros(16, dtype=bf),
                                                       torch.ones(16, dtype=bf), None, None, True, 0.1, 1e-5)
    yield "batch_norm training statistics prefetched", lambda: tr.batch_norm(
        r(16, 8, 32, 32, dtype=bf), torch.zeros(8), torch.ones(8), r(8), r(8), True, 0.1, 1e-5)  # (float32 params)
    yield "batch_norm training float32", lambda: tr.batch_norm(
        r(32, 16, 28, 28), torch.zeros(16), torch.ones(16), r(16), r(16), True, 0.1, 1e-5)
    yield "batch_norm eval", lambda: tr.batch_norm(r(8, 16, 56, 56), torch.zeros(16), torch.ones(16), r(16), r(16),
                                                   False, 0.1, 1e-5)
    # other dtypes and layouts
    yield "sum int32 rows", lambda: tr.sum(torch.randint(-9, 9, (64, 300), dtype=torch.int32), -1)
    yield "amax float16 columns", lambda: tr.amax(r(300, 1000, dtype=torch.float16), 0)
    yield "mean float64 rows", lambda: tr.mean(r(64, 5000, dtype=torch.float64), -1)
    yield "max float16 columns split", lambda: tr.max(r(8192, 64, dtype=torch.float16), 0)
    yield "softmax columns split", lambda: tr.softmax(r(2048, 256, dtype=bf), 0)
    yield "log_softmax columns split float32", lambda: tr.log_softmax(r(4096, 100), 0)
    yield "logsumexp columns split", lambda: tr.logsumexp(r(8192, 64, dtype=bf), 0)
    yield "softmax columns narrow", lambda: _forced("softmax", dict(strategy="multi_pass", BLOCK_N=128, BLOCK_K=16,
                                                                    num_warps=8),
                                                    lambda: tr.softmax(r(2048, 256, dtype=bf), 0))
    yield "layer_norm float32 two rows", lambda: tr.layer_norm(r(64, 5120), (5120,), r(5120), r(5120))
    yield "batch_norm channels-last", lambda: tr.batch_norm(
        r(8, 16, 14, 14).to(memory_format=torch.channels_last), None, None, None, None, True, 0.1, 1e-5)
    # channels-fast statistics of 64-channel tiles on 8 warps, four tiles a program (a one-tile range is a
    # specialization of its own; test_compiles_for_sm90.py holds their registers)
    yield "batch_norm 2-D statistics bfloat16", lambda: tr.batch_norm(
        torch.empty(65536, 256, dtype=bf), torch.zeros(256), torch.ones(256), None, None, True, 0.1, 1e-5)
    yield "batch_norm 2-D statistics float32", lambda: tr.batch_norm(
        torch.empty(16384, 1024), torch.zeros(1024), torch.ones(1024), None, None, True, 0.1, 1e-5)
    yield "batch_norm 2-D backward sums bfloat16", lambda: _bn_backward(torch.empty(65536, 256, dtype=bf), True)
    # batch_norm backward (through autograd: the forward's launches keep the batch statistics) and its registered op
    yield "batch_norm backward training, sums then dx", lambda: _bn_backward(r(16, 8, 32, 32, dtype=bf), True)
    yield "batch_norm backward training, one tile", lambda: _bn_backward(r(8, 16, 7, 7, dtype=bf), True, affine=False)
    yield "batch_norm backward eval, sums writing dx", lambda: _bn_backward(r(16, 8, 32, 32), False)
    yield "batch_norm backward eval, dx only", lambda: _bn_backward(r(16, 8, 32, 32), False, affine=False)
    yield "batch_norm backward channels-last, weight and bias only", lambda: _bn_backward(
        r(8, 64, 14, 14, dtype=bf).to(memory_format=torch.channels_last), True, input_grad=False)
    yield "batch_norm backward channels-last training (batch merged: B a constexpr 1)", lambda: _bn_backward(
        r(8, 64, 14, 14, dtype=bf).to(memory_format=torch.channels_last), True)
    yield "batch_norm functional op (new running stats)", lambda: torch.ops.tritred.batch_norm(
        r(8, 16, 28, 28, dtype=bf), torch.zeros(16), torch.ones(16), None, None, True, 0.1, 1e-5)

    # rms_norm, and the norms' backward kernels (layer_norm's launcher; rms_norm's takes it with rms=True)
    yield "rms_norm single", lambda: tr.rms_norm(r(64, 4096, dtype=bf), (4096,), r(4096, dtype=bf))
    yield "rms_norm rows over 32 threads each", lambda: tr.rms_norm(r(64, 1024, dtype=bf), (1024,), r(1024, dtype=bf))
    yield "rms_norm loop, float64 weight", lambda: tr.rms_norm(torch.empty(4, 65536), (65536,),
                                                               torch.empty(65536, dtype=torch.float64))
    yield "rms_norm transposed rows", lambda: tr.rms_norm(r(300, 64).t(), [300])
    yield "layer_norm backward single, two accumulators", lambda: _backward(bf, 64, (4096,))
    yield "layer_norm backward 16384-wide rows on 16 warps", lambda: _backward(bf, 8, (16384,))
    yield "layer_norm backward float32 1024", lambda: _backward(f32, 64, (1024,))
    yield "layer_norm backward odd width", lambda: _backward(bf, 64, (1000,))
    yield "layer_norm backward loop", lambda: _backward(f32, 4, (65536,))
    yield "layer_norm backward loop, two 2-byte rows a tile", lambda: _backward(bf, 4, (32768,))
    yield "layer_norm backward dx only, expanded dy", lambda: _backward(bf, 64, (2048,), (True, False, False),
                                                                       affine=False, expand=True)
    yield "layer_norm backward dw and db only", lambda: _backward(bf, 64, (2048,), (False, True, True))
    yield "layer_norm backward float64, two dims", lambda: _backward(torch.float64, 16, (8, 40))
    yield "layer_norm backward transposed rows", lambda: _backward(f32, 300, (64,), transpose=True)
    yield "rms_norm backward single", lambda: _backward(bf, 64, (4096,), rms=True)
    yield "rms_norm backward 16384-wide rows", lambda: _backward(bf, 8, (16384,), rms=True)
    yield "rms_norm backward float64 weight", lambda: _backward(f32, 64, (4096,), rms=True, weight=torch.float64)
    yield "layer_norm backward persistent rows, pipelined", lambda: _forced(
        "layer_norm", dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=1024, num_programs=528, num_stages=2),
        lambda: _backward(bf, 4096, (1000,)))

    # cross_entropy: the loss alone, the loss forming the gradient (and the backward's scale of it, in place)
    yield "cross_entropy loss rows loop", lambda: tr.cross_entropy(torch.empty(1024, 128256, dtype=bf), _classes(
        1024, 128256))
    yield "cross_entropy grad rows loop, backward in place", lambda: _loss_backward(tr.cross_entropy(
        torch.empty(1024, 128256, dtype=bf, requires_grad=True), _classes(1024, 128256)))
    yield "cross_entropy grad rows single float32, sum", lambda: _loss_backward(tr.cross_entropy(
        torch.empty(256, 32000, requires_grad=True), _classes(256, 32000), reduction="sum"))
    yield "cross_entropy grad short rows, weights, label smoothing, none", lambda: _loss_backward(tr.cross_entropy(
        r(512, 1000, dtype=bf).requires_grad_(), _classes(512, 1000), r(1000, dtype=bf).abs(), reduction="none",
        label_smoothing=0.1))
    yield "cross_entropy grad loop, weights, label smoothing", lambda: _loss_backward(tr.cross_entropy(
        r(64, 50000, dtype=bf).requires_grad_(), _classes(64, 50000), r(50000, dtype=bf).abs(), label_smoothing=0.1))
    yield "cross_entropy probabilities, grad of both, loop", lambda: _loss_backward(tr.cross_entropy(
        r(64, 50000).requires_grad_(), r(64, 50000).softmax(-1).requires_grad_()))
    yield "cross_entropy probabilities single float16", lambda: tr.cross_entropy(
        r(64, 1000, dtype=torch.float16), r(64, 1000, dtype=torch.float16).softmax(-1), label_smoothing=0.2)
    yield "cross_entropy grad split rows float32", lambda: _loss_backward(tr.cross_entropy(
        torch.empty(64, 131072, requires_grad=True), _classes(64, 131072), label_smoothing=0.1))
    yield "cross_entropy grad columns (N, C, H, W)", lambda: _loss_backward(tr.cross_entropy(
        r(4, 21, 32, 32, dtype=bf).requires_grad_(), _classes(4, 21, 32, 32)))
    yield "cross_entropy grad columns loop float64", lambda: _loss_backward(tr.cross_entropy(
        r(4, 300, 64, dtype=torch.float64).requires_grad_(), _classes(4, 300, 64)))
    yield "cross_entropy backward out of place", lambda: torch.ops.tritred.cross_entropy_backward(
        torch.empty(1024, 128256, dtype=bf), torch.ones((), dtype=bf), _classes(1024, 128256), -100)

    # batch_norm pieces of SyncBatchNorm (tritred_ops.distributed; the collectives between them are not kernels)
    from tritred_ops.families.batch_norm import sync as bns
    from tritred_ops.families.batch_norm.spec import SPEC as BN
    z, o, cl = torch.zeros, torch.ones, torch.channels_last
    yield "batch_norm sync: local moments", lambda: bns.batch_norm_moments_call(BN, r(16, 8, 32, 32, dtype=bf))
    yield "batch_norm sync: local moments channels-last", lambda: bns.batch_norm_moments_call(
        BN, r(8, 64, 14, 14, dtype=bf).to(memory_format=cl))
    yield "batch_norm sync: merge of 8 ranks, running stats", lambda: bns.merge_ranks_call(
        z(8, 3, 64), z(64, dtype=bf), o(64, dtype=bf), 0.1, 1e-5)
    yield "batch_norm sync: merge of 2 ranks float64", lambda: bns.merge_ranks_call(
        z(2, 3, 16, dtype=torch.float64), None, None, 0.1, 1e-5)
    yield "batch_norm sync: normalize with given statistics", lambda: bns.batch_norm_normalize_call(
        BN, r(16, 8, 32, 32, dtype=bf), z(8), o(8), r(8, dtype=bf), r(8, dtype=bf))
    yield "batch_norm sync: backward sums", lambda: bns.batch_norm_backward_sums_call(
        BN, r(16, 8, 32, 32, dtype=bf), r(16, 8, 32, 32, dtype=bf), z(8), o(8))
    yield "batch_norm sync: backward sums channels-last", lambda: bns.batch_norm_backward_sums_call(
        BN, r(8, 64, 14, 14, dtype=bf).to(memory_format=cl), r(8, 64, 14, 14, dtype=bf).to(memory_format=cl),
        z(64), o(64))
    yield "batch_norm sync: dx from coefficients", lambda: bns.batch_norm_backward_dx_call(
        BN, r(16, 8, 32, 32, dtype=bf), r(16, 8, 32, 32, dtype=bf), r(8), z(8), o(8), z(2, 8))
    # strategies only a plugin or `tritred tune` picks
    yield "layer_norm split_rows", lambda: _forced("layer_norm", dict(strategy="split_rows", BLOCK_N=4096, split=4,
                                                                       num_warps=8),
                                                   lambda: tr.layer_norm(r(4, 16384, dtype=bf), (16384,)))
    yield "sum persistent rows", lambda: _forced("sum", dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=1024,
                                                             num_programs=528, num_stages=2),
                                                 lambda: tr.sum(r(4096, 1000, dtype=bf), -1))
    yield "softmax persistent rows", lambda: _forced("softmax", dict(strategy="single_pass", BLOCK_M=2, BLOCK_N=1024,
                                                                     num_programs=528, num_stages=2),
                                                     lambda: tr.softmax(r(4096, 1000, dtype=bf), -1))

    # backward kernels of softmax and log_softmax (dx from the output y and dy), through their launcher
    from tritred_ops.families.softmax.autograd import softmax_backward as sb
    e = lambda *s, dtype=bf: torch.empty(*s, dtype=dtype)  # noqa: E731
    yield "softmax backward rows single", lambda: sb(0, r(64, 4096, dtype=bf), r(64, 4096, dtype=bf), -1, bf)
    yield "log_softmax backward rows one warp", lambda: sb(1, r(64, 1024), r(64, 1024), -1, f32)
    yield "softmax backward rows 16384 single", lambda: sb(0, e(64, 16384, dtype=f32), e(64, 16384, dtype=f32), -1, f32)
    yield "softmax backward rows loop 8192 on 32 warps", lambda: sb(0, e(64, 32768), e(64, 32768), -1, bf)
    yield "softmax backward rows loop 4096 on 16 warps", lambda: sb(0, e(1024, 20000), e(1024, 20000), -1, bf)
    yield "log_softmax backward rows loop 8192 on 32 warps float32", lambda: sb(1, e(64, 40000, dtype=f32),
                                                                                e(64, 40000, dtype=f32), -1, f32)
    yield "log_softmax backward rows loop 2048 on 8 warps", lambda: sb(1, e(600, 20000), e(600, 20000), -1, bf)
    yield "softmax backward rows DIV hint, float32 input", lambda: sb(0, r(64, 300, dtype=bf), r(64, 300, dtype=bf),
                                                                      -1, f32)
    yield "log_softmax backward float64 output to bfloat16", lambda: sb(1, r(64, 100, dtype=torch.float64),
                                                                        r(64, 100, dtype=torch.float64), -1, bf)
    yield "softmax backward transposed dy", lambda: sb(0, r(1000, 64).t(), r(64, 1000), -1, f32)
    yield "softmax backward columns single", lambda: sb(0, r(16, 4096, dtype=bf), r(16, 4096, dtype=bf), 0, bf)
    yield "log_softmax backward columns loop", lambda: sb(1, r(4096, 128, dtype=bf), r(4096, 128, dtype=bf), 0, bf)
    yield "softmax backward persistent rows", lambda: _forced("softmax", dict(strategy="single_pass", BLOCK_M=2,
                                                                              BLOCK_N=1024, num_programs=528),
                                                              lambda: sb(0, r(4096, 1000), r(4096, 1000), -1, f32))


def _bn_backward(x: torch.Tensor, training: bool, affine: bool = True, input_grad: bool = True) -> None:
    """batch_norm forward and backward through autograd (compiled only: the values are never read)."""
    import tritred_ops as tr
    c = x.shape[1]
    w, b = (torch.randn(c, requires_grad=True), torch.randn(c, requires_grad=True)) if affine else (None, None)
    y = tr.batch_norm(x.requires_grad_(input_grad), torch.zeros(c), torch.ones(c), w, b, training, 0.1, 1e-5)
    y.backward(torch.randn_like(y))


def _backward(dtype, rows, shape, mask=(True, True, True), affine=True, expand=False, transpose=False, rms=False,
              weight=None):
    """The backward launcher of layer_norm (rms_norm: ``rms``) on uninitialized tensors (compiled, never run)."""
    from tritred_ops.families import layer_norm, rms_norm
    from tritred_ops.families.layer_norm.backward import norm_backward

    full = (rows, *shape)
    x = torch.empty(full[::-1], dtype=dtype).t() if transpose else torch.empty(full, dtype=dtype)
    g = torch.empty(()).to(dtype).expand(full) if expand else torch.empty(full, dtype=dtype)
    w = torch.empty(shape, dtype=weight or dtype) if affine else None
    b = torch.empty(shape, dtype=dtype) if affine and not rms else None
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    mean, rstd = torch.empty(rows, dtype=acc), torch.empty(rows, dtype=acc)
    spec = rms_norm.SPEC if rms else layer_norm.SPEC
    return norm_backward(spec, g, x, shape, None if rms else mean, rstd, w, b, mask, rms=rms)


def _classes(n: int, c: int, *spatial: int) -> torch.Tensor:
    """Class indices for logits of shape (n, c, *spatial), some of them ignored (-100)."""
    t = torch.randint(0, c, (n, *spatial))
    t.view(-1)[::7] = -100
    return t


def _loss_backward(loss: torch.Tensor) -> None:
    loss.backward(torch.ones_like(loss))


def _forced(op: str, config: dict, call):  # noqa: ANN001
    """``call()`` with ``config`` as ``op``'s launch config (a plugin, as ``tritred tune``'s cache or a user's)."""
    from tritred_core import LaunchConfig, get_registry, hookimpl

    class Forced:
        @hookimpl
        def tritred_launch_config(self, spec, problem, device):  # noqa: ANN001
            return LaunchConfig(**config) if spec.name == op else None

    reg = get_registry()
    name = reg.register(Forced(), name=f"sm90-{op}")
    try:
        return call()
    finally:
        reg.unregister(name)


def main() -> int:
    import tritred_ops  # noqa: F401 (the op modules, before the patch)
    _patch()
    failed = 0
    for name, call in calls():
        t0 = time.time()
        REGS.clear()
        NATIVE.clear()
        try:
            call()
            print(f"ok     {name} ({time.time() - t0:.1f} s) native={NATIVE} registers={REGS}", flush=True)
        except Exception:  # noqa: BLE001 (report every failing call, then fail)
            failed += 1
            print(f"FAILED {name}:\n{traceback.format_exc()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
