"""Twenty-fourth session's probe on the H200: do software-pipelined loads lift the loops that read too slowly?

Three loops of the product read below a reduction's rate: batch_norm's statistics launch (~65 % of the copy
bandwidth on 64x256x56x56 bf16, one [16 batch, 128 spatial] tile in flight per program), the two sweeps of
layer_norm over 131072-wide rows (64-68 %) and the short-row reductions of 2-byte elements (85-88 %, against
93 % for float32). None of the product's loops is pipelined by Triton: without a ``tl.dot`` its pipeliner leaves
a loop alone unless the loop asks (``tl.range(..., num_stages=k)``), and no loop of the product asks. Here a
bandwidth probe per loop, each with the same arithmetic in four forms:

* ``plain``: ``tl.load`` at the top of the loop, one tile in flight (as the product);
* ``cp.async k``: the same loop in ``tl.range(num_stages=k)``: Triton stages k - 1 tiles ahead in shared memory;
* ``tma k``: the tiles through a host tensor descriptor (Hopper's bulk tensor copy), ``tl.range(num_stages=k)``;
* the product's own op on the same input, timed beside them.

The probes compute sums and sums of squares (arithmetic as light as the product's or lighter): they bound what a
pipelined load could give, they are not kernels to ship. Each probe is checked against torch once. Timing:
``triton.testing.do_bench`` median, % of the copy bandwidth measured in the same process (bytes: inputs read
once, outputs written once, as the suite counts them for the product's op).

Usage on a CUDA machine: python tools/s24_pipe_probe.py [bn] [ln] [rows]
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl
import tritred_ops as tr
from triton.tools.tensor_descriptor import TensorDescriptor


def copy_bw() -> float:
    a = torch.empty(2**28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=10, rep=50)
    return 2 * a.numel() * 4 / ms / 1e6  # GB/s


def timed(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=30)


# --- batch_norm statistics: per (channel, split) partial sum and sum of squares over [BM batch, BN spatial] tiles


@triton.jit
def _bn_range(B, S, tiles_per_split, BM: tl.constexpr, BN: tl.constexpr):
    """(channel, spatial chunks, first tile, tile past the last) of program (channel, split)."""
    s_chunks = tl.cdiv(S, BN)
    t_lo = tl.program_id(1) * tiles_per_split
    return tl.program_id(0), s_chunks, t_lo, tl.minimum(tl.cdiv(B, BM) * s_chunks, t_lo + tiles_per_split)


@triton.jit
def _bn_plain(x_ptr, out_ptr, B, S, C, tiles_per_split, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
              NS: tl.constexpr):
    c, s_chunks, t_lo, t_hi = _bn_range(B, S, tiles_per_split, BM, BN)
    i = tl.arange(0, BM * BN)
    lane = (i // BN).to(tl.int64) * C * S + (i % BN)
    base = x_ptr + c.to(tl.int64) * S
    acc = tl.zeros([BM * BN], tl.float32)
    acc2 = tl.zeros([BM * BN], tl.float32)
    for t in tl.range(t_lo, t_hi, num_stages=NS):
        b0 = t // s_chunks * BM
        s0 = t % s_chunks * BN
        m = ((b0 + i // BN) < B) & ((s0 + i % BN) < S)
        x = tl.load(base + (b0.to(tl.int64) * C * S + s0) + lane, mask=m, other=0).to(tl.float32)
        acc += x
        acc2 += x * x
    tl.store(out_ptr + (c * SPLIT + tl.program_id(1)) * 2, tl.sum(acc, 0))
    tl.store(out_ptr + (c * SPLIT + tl.program_id(1)) * 2 + 1, tl.sum(acc2, 0))


@triton.jit
def _bn_tma(desc, out_ptr, B, S, C, tiles_per_split, SPLIT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
            NS: tl.constexpr):
    c, s_chunks, t_lo, t_hi = _bn_range(B, S, tiles_per_split, BM, BN)
    acc = tl.zeros([BM, BN], tl.float32)
    acc2 = tl.zeros([BM, BN], tl.float32)
    for t in tl.range(t_lo, t_hi, num_stages=NS):
        x = desc.load([t // s_chunks * BM, c, t % s_chunks * BN])  # outside the tensor: zeros
        x = tl.reshape(x, [BM, BN]).to(tl.float32)
        acc += x
        acc2 += x * x
    tl.store(out_ptr + (c * SPLIT + tl.program_id(1)) * 2, tl.sum(tl.sum(acc, 1), 0))
    tl.store(out_ptr + (c * SPLIT + tl.program_id(1)) * 2 + 1, tl.sum(tl.sum(acc2, 1), 0))


def bn_probe(shape, dtype, bw) -> None:
    B, C, H, W = shape
    S = H * W
    x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 0.5
    nbytes = 2 * x.numel() * x.element_size()  # as the suite counts batch_norm: x read once, y written once
    ref = x.double().sum((0, 2, 3)), (x.double() ** 2).sum((0, 2, 3))
    w = torch.rand(C, device="cuda")
    b = torch.rand(C, device="cuda")

    def pct(ms):
        return f"{nbytes / ms / 1e6 / bw * 100:5.1f}"

    rm, rv = torch.zeros(C, device="cuda"), torch.ones(C, device="cuda")
    t_train = timed(lambda: tr.batch_norm(x, rm, rv, w, b, training=True))
    t_eval = timed(lambda: tr.batch_norm(x, rm, rv, w, b, training=False))
    # The statistics launch alone is about train - eval (eval runs the normalize launch by itself).
    print(f"bn {shape} {str(dtype)[6:]}: tritred train {pct(t_train)} % ({t_train * 1e3:.1f} us), eval "
          f"{t_eval * 1e3:.1f} us, so statistics ~{(t_train - t_eval) * 1e3:.1f} us "
          f"(~{x.numel() * x.element_size() / (t_train - t_eval) / 1e6 / bw * 100:.0f} % of copy as a read)")
    read = x.numel() * x.element_size()
    for bm, bn_, warps in ((16, 128, 2), (32, 64, 2), (16, 128, 4), (8, 256, 4), (32, 128, 4)):
        tiles = triton.cdiv(B, bm) * triton.cdiv(S, bn_)
        split = max(1, min(tiles, 132 * 8 // C))
        per = triton.cdiv(tiles, split)
        split = triton.cdiv(tiles, per)
        out = torch.empty(C * split * 2, device="cuda")
        desc = TensorDescriptor(x.view(B, C, S), [B, C, S], [C * S, S, 1], [bm, 1, bn_])
        cells = []
        for name, kern, arg, ns in (("plain", _bn_plain, x, 1), ("cp.async 2", _bn_plain, x, 2),
                                    ("cp.async 3", _bn_plain, x, 3), ("tma 2", _bn_tma, desc, 2),
                                    ("tma 3", _bn_tma, desc, 3), ("tma 4", _bn_tma, desc, 4)):
            def run(kern=kern, arg=arg, ns=ns, out=out, per=per, split=split, bm=bm, bn_=bn_, warps=warps):
                kern[(C, split)](arg, out, B, S, C, per, SPLIT=split, BM=bm, BN=bn_, NS=ns, num_warps=warps)
            try:
                run()
                got = out.view(C, split, 2).double().sum(1)
                ok = torch.allclose(got[:, 0], ref[0], rtol=1e-3, atol=1e-1 * S ** 0.5) and \
                    torch.allclose(got[:, 1], ref[1], rtol=1e-3)
                ms = timed(run)
                cells.append(f"{name} {read / ms / 1e6 / bw * 100:4.0f}{'' if ok else ' WRONG'}")
            except Exception as e:  # noqa: BLE001 (a probe: report and go on)
                cells.append(f"{name} failed ({type(e).__name__}: {str(e)[:60]})")
        print(f"  tile {bm}x{bn_} w{warps} s{split}, read rate % of copy: " + "  ".join(cells))


# --- two sweeps over long rows (layer_norm without its affine): statistics, then y = (x - mean) * rstd


@triton.jit
def _ln_plain(x_ptr, y_ptr, N, BN: tl.constexpr, NS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * N
    acc = tl.zeros([BN], tl.float32)
    acc2 = tl.zeros([BN], tl.float32)
    cols = tl.arange(0, BN)
    for i in tl.range(0, N // BN, num_stages=NS):
        x = tl.load(x_ptr + row + i * BN + cols, eviction_policy="evict_last").to(tl.float32)
        acc += x
        acc2 += x * x
    mean = tl.sum(acc, 0) / N
    rstd = 1 / tl.sqrt(tl.maximum(tl.sum(acc2, 0) / N - mean * mean, 0) + 1e-5)  # (a probe: E[x^2] - mean^2)
    for i in tl.range(0, N // BN, num_stages=NS):
        off = row + (N // BN - 1 - i) * BN + cols
        x = tl.load(x_ptr + off, eviction_policy="evict_first").to(tl.float32)
        tl.store(y_ptr + off, (x - mean) * rstd, eviction_policy="evict_first")


@triton.jit
def _ln_tma(xd, yd, N, BR: tl.constexpr, BC: tl.constexpr, NS: tl.constexpr):
    # The row as [N // BC, BC] (a box side is at most 256 elements): chunk i is rows i * BR .. of that view.
    r0 = tl.program_id(0) * (N // BC)
    acc = tl.zeros([BR, BC], tl.float32)
    acc2 = tl.zeros([BR, BC], tl.float32)
    n_chunks = N // (BR * BC)
    for i in tl.range(0, n_chunks, num_stages=NS):
        x = xd.load([r0 + i * BR, 0]).to(tl.float32)
        acc += x
        acc2 += x * x
    mean = tl.sum(tl.sum(acc, 1), 0) / N
    rstd = 1 / tl.sqrt(tl.maximum(tl.sum(tl.sum(acc2, 1), 0) / N - mean * mean, 0) + 1e-5)
    for i in tl.range(0, n_chunks, num_stages=NS):
        r = r0 + (n_chunks - 1 - i) * BR
        x = xd.load([r, 0]).to(tl.float32)
        yd.store([r, 0], ((x - mean) * rstd).to(yd.dtype))


def ln_probe(shape, dtype, bw) -> None:
    R, N = shape
    x = torch.randn(shape, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    ref = torch.nn.functional.layer_norm(x.double(), (N,)).to(dtype)
    w = torch.rand(N, device="cuda", dtype=dtype)
    b = torch.rand(N, device="cuda", dtype=dtype)

    def pct(ms):
        return f"{nbytes / ms / 1e6 / bw * 100:4.0f}"

    cells = [f"tritred(w,b) {pct(timed(lambda: tr.layer_norm(x, (N,), w, b)))}",
             f"tritred {pct(timed(lambda: tr.layer_norm(x, (N,))))}"]
    tol = 2e-2 if dtype != torch.float32 else 1e-3
    for bn_, warps in ((16384, 32), (8192, 16), (4096, 8)):
        if bn_ * x.element_size() > 65536:
            continue
        for ns in (1, 2, 3):
            def run(ns=ns, bn_=bn_, warps=warps):
                _ln_plain[(R,)](x, y, N, BN=bn_, NS=ns, num_warps=warps)
            try:
                y.fill_(float("nan"))
                run()
                ok = torch.allclose(y.float(), ref.float(), atol=tol, rtol=tol)
                cells.append(f"{'plain' if ns == 1 else f'cp.async {ns}'} {bn_}/{warps} {pct(timed(run))}"
                             f"{'' if ok else ' WRONG'}")
            except Exception as e:  # noqa: BLE001
                cells.append(f"cp.async {ns} {bn_}/{warps} failed ({type(e).__name__}: {str(e)[:60]})")
    bc = 256 if x.element_size() == 2 else 128
    for br, warps in ((32, 8), (64, 16), (64, 32)):
        xd = TensorDescriptor(x.view(-1, bc), [R * N // bc, bc], [bc, 1], [br, bc])
        yd = TensorDescriptor(y.view(-1, bc), [R * N // bc, bc], [bc, 1], [br, bc])
        for ns in (2, 3, 4):
            if br * bc * x.element_size() * ns > 200_000:
                continue
            def run(ns=ns, br=br, warps=warps, xd=xd, yd=yd):
                _ln_tma[(R,)](xd, yd, N, BR=br, BC=bc, NS=ns, num_warps=warps)
            try:
                y.fill_(float("nan"))
                run()
                ok = torch.allclose(y.float(), ref.float(), atol=tol, rtol=tol)
                cells.append(f"tma {ns} {br}x{bc}/{warps} {pct(timed(run))}{'' if ok else ' WRONG'}")
            except Exception as e:  # noqa: BLE001
                cells.append(f"tma {ns} {br}x{bc}/{warps} failed ({type(e).__name__}: {str(e)[:60]})")
    print(f"ln {shape} {str(dtype)[6:]} % of copy: " + "  ".join(cells))


# --- the same two sweeps with layer_norm's affine: where do weight and bias cost (tritred 75 -> 63 % on bf16)?


@triton.jit
def _ln_affine(x_ptr, w_ptr, b_ptr, y_ptr, N, BN: tl.constexpr, BN2: tl.constexpr, ROWS: tl.constexpr,
               WB_LAST: tl.constexpr, AFFINE: tl.constexpr, ROT: tl.constexpr = False):
    # ROWS rows per program: one load of a weight and bias chunk serves them all. BN2: the second sweep's chunk.
    # ROT: each program starts its sweeps at its own chunk (program id mod chunks), so that the programs in
    # flight read different parts of the weight and bias (all programs on the same lines: one L2 slice's rate?).
    o = tl.program_id(0) % (N // BN) if ROT else 0
    o2 = o * (BN // BN2)
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64) * N
    acc = tl.zeros([ROWS, BN], tl.float32)
    acc2 = tl.zeros([ROWS, BN], tl.float32)
    cols = tl.arange(0, BN)
    for i in range(0, N // BN):
        j = (i + o) % (N // BN)
        x = tl.load(x_ptr + rows[:, None] + j * BN + cols[None, :], eviction_policy="evict_last").to(tl.float32)
        acc += x
        acc2 += x * x
    mean = tl.sum(acc, 1) / N
    rstd = 1 / tl.sqrt(tl.maximum(tl.sum(acc2, 1) / N - mean * mean, 0) + 1e-5)
    cols2 = tl.arange(0, BN2)
    for i in range(0, N // BN2):
        c = (o2 + N // BN2 - 1 - i) % (N // BN2) * BN2 + cols2
        x = tl.load(x_ptr + rows[:, None] + c[None, :], eviction_policy="evict_first").to(tl.float32)
        y = (x - mean[:, None]) * rstd[:, None]
        if AFFINE:
            if WB_LAST:
                w = tl.load(w_ptr + c, eviction_policy="evict_last")
                b = tl.load(b_ptr + c, eviction_policy="evict_last")
            else:
                w = tl.load(w_ptr + c)
                b = tl.load(b_ptr + c)
            y = y * w.to(tl.float32)[None, :] + b.to(tl.float32)[None, :]
        tl.store(y_ptr + rows[:, None] + c[None, :], y, eviction_policy="evict_first")


def ln_affine_probe(shape, dtype, bw) -> None:
    R, N = shape
    x = torch.randn(shape, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    w = torch.rand(N, device="cuda", dtype=dtype)
    b = torch.rand(N, device="cuda", dtype=dtype)
    nbytes = 2 * x.numel() * x.element_size() + 2 * N * x.element_size()
    ref = torch.nn.functional.layer_norm(x.double(), (N,), w.double(), b.double()).to(dtype)

    def pct(ms):
        return f"{nbytes / ms / 1e6 / bw * 100:4.0f}"

    cells = [f"tritred(w,b) {pct(timed(lambda: tr.layer_norm(x, (N,), w, b)))}",
             f"tritred {pct(timed(lambda: tr.layer_norm(x, (N,))))}"]
    e = x.element_size()
    for name, bn_, bn2, rows, last, aff, warps in (
            ("no affine", 32768 // e, 32768 // e, 1, False, False, 32),
            ("affine", 32768 // e, 32768 // e, 1, False, True, 32),
            ("affine rot", 32768 // e, 32768 // e, 1, False, True, 32),
            ("no affine rot", 32768 // e, 32768 // e, 1, False, False, 32),
            ("affine rot 16w", 16384 // e, 16384 // e, 1, False, True, 16),
            ("affine wb-last", 32768 // e, 32768 // e, 1, True, True, 32),
            ("affine 2nd sweep half", 32768 // e, 16384 // e, 1, False, True, 32),
            ("affine 2nd sweep quarter", 32768 // e, 8192 // e, 1, False, True, 32),
            ("affine 2 rows", 16384 // e, 16384 // e, 2, False, True, 32),
            ("affine 2 rows 16w", 8192 // e, 8192 // e, 2, False, True, 16),
            ("affine 2 rows wb-last", 16384 // e, 16384 // e, 2, True, True, 32),
            ("affine 4 rows", 8192 // e, 8192 // e, 4, False, True, 32),
            ("affine 16w", 16384 // e, 16384 // e, 1, False, True, 16),
            ("no affine 16w", 16384 // e, 16384 // e, 1, False, False, 16)):
        if N % bn_ or N % bn2 or R % rows:
            continue
        def run(bn_=bn_, bn2=bn2, rows=rows, last=last, aff=aff, warps=warps, rot="rot" in name):
            _ln_affine[(R // rows,)](x, w, b, y, N, BN=bn_, BN2=bn2, ROWS=rows, WB_LAST=last, AFFINE=aff,
                                     ROT=rot, num_warps=warps)
        try:
            y.fill_(float("nan"))
            run()
            tol = 3e-2 if e == 2 else 1e-3
            want = ref if aff else torch.nn.functional.layer_norm(x.double(), (N,)).to(dtype)
            ok = torch.allclose(y.float(), want.float(), atol=tol, rtol=tol)
            cells.append(f"{name} {pct(timed(run))}{'' if ok else ' WRONG'}")
        except Exception as ex:  # noqa: BLE001
            cells.append(f"{name} failed ({type(ex).__name__}: {str(ex)[:60]})")
    print(f"ln affine {shape} {str(dtype)[6:]} % of copy: " + "  ".join(cells))


def bn_config_ab() -> None:
    """batch_norm training with one statistics program per (channel, image) plane: a [1, 4096] tile masked to
    the plane (the row var_mean over S read at 74 % where the statistics launch reads at 65 %)."""
    from sweep import alternate
    from tritred_core import LaunchConfig

    for shape in ((64, 256, 56, 56), (256, 64, 56, 56), (32, 96, 55, 55), (128, 512, 14, 14)):
        B, S = shape[0], shape[2] * shape[3]
        bn_ = triton.next_power_of_2(S)
        variants = [("built-in", None)]
        for per, w in ((1, 4), (1, 8), (2, 8), (4, 8), (1, 2)):
            variants.append((f"[1,{bn_}] {per} plane(s) w{w}", LaunchConfig(
                strategy="split", BLOCK_M=1, BLOCK_N=bn_, BLOCK_K=1, split=triton.cdiv(B, per), num_warps=w)))
        for dtype in (torch.bfloat16, torch.float32):
            res = alternate("batch_norm", shape, dtype, None, variants)
            print(f"bn train {shape} {str(dtype)[6:]}: " + "  ".join(f"{k} {v:.1f}" for k, v in res.items()))


def bn_rows_probe(shape, dtype, bw) -> None:
    """batch_norm's statistics as rows: NCHW is B * C rows of S contiguous elements; the product's row var_mean
    (then a merge of B partials per channel, not timed here) against its two-axes var_mean over (0, 2, 3)."""
    B, C, H, W = shape
    x = torch.randn(shape, device="cuda", dtype=dtype)
    read = x.numel() * x.element_size()
    rows = x.view(B * C, H * W)
    t_rows = timed(lambda: tr.var_mean(rows, 1))
    t_axes = timed(lambda: tr.var_mean(x, (0, 2, 3)))
    t_sum = timed(lambda: tr.sum(x, (0, 2, 3)))
    print(f"bn stats as reads {shape} {str(dtype)[6:]} % of copy: row var_mean over S "
          f"{read / t_rows / 1e6 / bw * 100:.0f}  var_mean (0,2,3) {read / t_axes / 1e6 / bw * 100:.0f}  "
          f"sum (0,2,3) {read / t_sum / 1e6 / bw * 100:.0f}")


# --- short rows: a persistent grid summing whole rows, the next rows' loads staged ahead


@triton.jit
def _rows_plain(x_ptr, out_ptr, R, N: tl.constexpr, BM: tl.constexpr, NS: tl.constexpr):
    cols = tl.arange(0, N)
    for blk in tl.range(tl.program_id(0), tl.cdiv(R, BM), tl.num_programs(0), num_stages=NS):
        rows = blk * BM + tl.arange(0, BM)
        x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * N + cols[None, :], mask=(rows < R)[:, None], other=0)
        tl.store(out_ptr + rows, tl.sum(x.to(tl.float32), 1), mask=rows < R)


@triton.jit
def _rows_tma(xd, out_ptr, R, N: tl.constexpr, BM: tl.constexpr, BC: tl.constexpr, NS: tl.constexpr):
    for blk in tl.range(tl.program_id(0), tl.cdiv(R, BM), tl.num_programs(0), num_stages=NS):
        x = xd.load([blk * BM * (N // BC), 0])  # BM rows as BM * N // BC rows of BC
        s = tl.sum(tl.reshape(x.to(tl.float32), [BM, N]), 1)
        rows = blk * BM + tl.arange(0, BM)
        tl.store(out_ptr + rows, s, mask=rows < R)


def rows_probe(shape, dtype, bw) -> None:
    R, N = shape
    x = torch.randn(shape, device="cuda", dtype=dtype)
    out = torch.empty(R, device="cuda")
    nbytes = x.numel() * x.element_size() + R * x.element_size()
    ref = x.double().sum(1)

    def pct(ms):
        return f"{nbytes / ms / 1e6 / bw * 100:4.0f}"

    cells = [f"tritred {pct(timed(lambda: tr.sum(x, -1)))}"]
    bc = 256 if x.element_size() == 2 else 128
    for bm, warps, per_sm in ((1, 8, 8), (1, 8, 4), (2, 8, 4), (1, 4, 8), (2, 16, 2), (4, 16, 2)):
        grid = (min(132 * per_sm, triton.cdiv(R, bm)),)
        for ns in (1, 2, 3):
            if bm * N * x.element_size() * max(ns - 1, 0) * per_sm > 200_000:
                continue
            def run(ns=ns, bm=bm, warps=warps, grid=grid):
                _rows_plain[grid](x, out, R, N=N, BM=bm, NS=ns, num_warps=warps)
            try:
                out.fill_(float("nan"))
                run()
                ok = torch.allclose(out.double(), ref, atol=1e-2 * N ** 0.5, rtol=1e-3)
                cells.append(f"{'plain' if ns == 1 else f'cp{ns}'} {bm}r/{warps}w/{per_sm} {pct(timed(run))}"
                             f"{'' if ok else ' WRONG'}")
            except Exception as e:  # noqa: BLE001
                cells.append(f"cp{ns} {bm}r/{warps}w failed ({type(e).__name__}: {str(e)[:50]})")
        if bm * N // bc > 256:
            continue
        xd = TensorDescriptor(x.view(-1, bc), [R * N // bc, bc], [bc, 1], [bm * N // bc, bc])
        for ns in (2, 3):
            if bm * N * x.element_size() * ns * per_sm > 200_000:
                continue
            def run(ns=ns, bm=bm, warps=warps, grid=grid, xd=xd):
                _rows_tma[grid](xd, out, R, N=N, BM=bm, BC=bc, NS=ns, num_warps=warps)
            try:
                out.fill_(float("nan"))
                run()
                ok = torch.allclose(out.double(), ref, atol=1e-2 * N ** 0.5, rtol=1e-3)
                cells.append(f"tma{ns} {bm}r/{warps}w/{per_sm} {pct(timed(run))}{'' if ok else ' WRONG'}")
            except Exception as e:  # noqa: BLE001
                cells.append(f"tma{ns} {bm}r/{warps}w failed ({type(e).__name__}: {str(e)[:50]})")
    print(f"rows sum {shape} {str(dtype)[6:]} % of copy: " + "  ".join(cells))


def main() -> None:
    which = set(sys.argv[1:]) or {"bn", "ln", "rows"}
    bw = copy_bw()
    print(f"copy bandwidth {bw:.0f} GB/s; {torch.cuda.get_device_name()}, triton {triton.__version__}")
    if "rows" in which:
        for shape, dtype in (((16384, 4096), torch.bfloat16), ((16384, 4096), torch.float32),
                             ((262144, 256), torch.bfloat16)):
            rows_probe(shape, dtype, bw)
    if "bn" in which:
        for shape, dtype in (((64, 256, 56, 56), torch.bfloat16), ((64, 256, 56, 56), torch.float32),
                             ((256, 64, 56, 56), torch.bfloat16)):
            bn_probe(shape, dtype, bw)
    if "lnw" in which:
        for shape, dtype in (((1024, 131072), torch.bfloat16), ((1024, 131072), torch.float32),
                             ((4096, 32768), torch.bfloat16), ((2048, 65536), torch.bfloat16)):
            ln_affine_probe(shape, dtype, bw)
    if "bncfg" in which:
        bn_config_ab()
    if "bnrows" in which:
        for shape, dtype in (((64, 256, 56, 56), torch.bfloat16), ((256, 64, 56, 56), torch.bfloat16),
                             ((64, 256, 56, 56), torch.float32), ((32, 2048, 7, 7), torch.bfloat16)):
            bn_rows_probe(shape, dtype, bw)
    if "ln" in which:
        for shape, dtype in (((1024, 131072), torch.bfloat16), ((1024, 131072), torch.float32)):
            ln_probe(shape, dtype, bw)


if __name__ == "__main__":
    main()
