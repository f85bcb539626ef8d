"""A/B of the row kernels' DIV hint (``_common.row_hint``) on rows whose width is a multiple of 2-8 elements but
not of 16, alternated, do_bench median, % of copy bandwidth (4263 GB/s; inputs read once, outputs written once):
``div`` the built-in path (DIV, and no shifted ALIGN tiles where DIV gives whole 16-byte vectors), ``align``
DIV where ALIGN is off but ALIGN kept where it applied (``hint_covers_align`` patched to False), ``none`` the
path before DIV (``row_hint`` patched to 1 as well).

Usage on a CUDA machine: python tools/div_ab.py [--batch-norm | --cols]
(--batch-norm: batch_norm's DIV_S on 14x14 maps; --cols: the column kernels' DIV, ``_common.col_hint``)
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
import tritred_ops as tr
from triton.testing import do_bench
from tritred_core import get_registry
from tritred_ops import _common as C

COPY_GBS = 4263.0
BF, F32 = torch.bfloat16, torch.float32
CASES = [  # (op, shape, dtype)
    ("layer_norm", (200000, 300), BF), ("layer_norm", (200000, 300), F32), ("layer_norm", (65536, 1000), BF),
    ("layer_norm", (16384, 3000), BF), ("softmax", (100000, 300), BF), ("softmax", (100000, 300), F32),
    ("log_softmax", (32768, 1000), BF), ("softmax", (8192, 3000), BF), ("logsumexp", (100000, 300), BF),
    ("var", (65536, 100), F32), ("var", (65536, 100), BF), ("sum", (200000, 300), BF), ("amax", (65536, 1000), BF),
    ("max", (200000, 300), BF), ("var", (50000, 200), BF), ("mean", (65536, 3000), BF),
    ("sum", (65536, 3000), F32), ("softmax", (8192, 3000), F32), ("layer_norm", (8192, 1000), F32),
    ("var", (65536, 1000), BF), ("layer_norm", (16384, 3000), F32), ("logsumexp", (32768, 1000), BF),
]


BN_CASES = [  # (shape, dtype, training): 14x14 maps, S = 196 (DIV_S 4)
    ((128, 512, 14, 14), BF, True), ((128, 512, 14, 14), F32, True), ((128, 512, 14, 14), BF, False),
    ((256, 256, 14, 14), torch.float16, True), ((64, 1024, 14, 14), BF, True),
]


def on_off(fn, module, attr: str) -> dict[str, list[float]]:
    """do_bench medians of ``fn`` with ``module.attr`` as it is ("div") and patched to 1 ("none"), alternated
    (the call plans and configs cleared at each switch: a saved plan holds the hint of the call that recorded it)."""
    real = getattr(module, attr)
    res: dict[str, list[float]] = {"div": [], "none": []}
    try:
        for _ in range(2):
            for name, hint in (("div", real), ("none", lambda *a: 1)):
                setattr(module, attr, hint)
                get_registry().cache.clear()
                res[name].append(do_bench(fn, return_mode="median"))
    finally:
        setattr(module, attr, real)
        get_registry().cache.clear()
    return res


def batch_norm_ab() -> None:
    """batch_norm's DIV_S (``batch_norm._nchw_hint``) on and off, beside eager."""
    import importlib

    bn = importlib.import_module("tritred_ops.batch_norm")
    for shape, dtype, training in BN_CASES:
        x = torch.randn(shape, device="cuda", dtype=dtype)
        ch = shape[1]
        w, b = torch.randn(ch, device="cuda", dtype=dtype), torch.randn(ch, device="cuda", dtype=dtype)
        rm, rv = torch.zeros(ch, device="cuda", dtype=dtype), torch.ones(ch, device="cuda", dtype=dtype)
        ours = functools.partial(tr.batch_norm, x, rm, rv, w, b, training)
        eager = functools.partial(F.batch_norm, x, rm, rv, w, b, training)
        res = on_off(ours, bn, "_nchw_hint")
        res["eager"] = [do_bench(eager, return_mode="median")]
        nb = 2 * x.numel() * x.element_size()
        cells = "  ".join(f"{k} {nb / (min(v) * 1e-3) / 1e9 / COPY_GBS * 100:5.1f} %" for k, v in res.items())
        print(f"batch_norm {'train' if training else 'eval '} {shape!s:18s} {str(dtype)[6:]:9s} {cells}", flush=True)


COL_CASES = [  # (op, shape, dtype, dim): column kernels, k widths multiples of 4-8 but not 16
    ("mean", (16, 4096, 1000), BF, 1), ("sum", (16384, 1000), BF, 0), ("var", (8192, 3000), BF, 0),
    ("softmax", (4096, 3000), BF, 0), ("amax", (64, 1024, 1000), F32, 1), ("max", (16384, 1000), BF, 0),
    ("logsumexp", (16, 4096, 1000), BF, 1), ("sum", (64, 4096, 300), F32, 1), ("log_softmax", (64, 512, 1000), BF, 1),
]


def columns_ab() -> None:
    """The column kernels' DIV (``_common.col_hint``) on and off, beside eager."""
    for op, shape, dtype, dim in COL_CASES:
        x = torch.randn(shape, device="cuda", dtype=dtype)
        ours = functools.partial(getattr(tr, op), x, dim)
        eager = functools.partial(getattr(torch, op), x, dim)
        res = on_off(ours, C, "col_hint")
        res["eager"] = [do_bench(eager, return_mode="median")]
        n = x.numel() * x.element_size()
        outs = x.numel() // shape[dim]
        nb = 2 * n if op in ("softmax", "log_softmax") else n + outs * (x.element_size() + (8 if op == "max" else 0))
        cells = "  ".join(f"{k} {nb / (min(v) * 1e-3) / 1e9 / COPY_GBS * 100:5.1f} %" for k, v in res.items())
        print(f"{op:12s} dim={dim} {shape!s:18s} {str(dtype)[6:]:9s} {cells}", flush=True)


def call(op: str, x: torch.Tensor):
    if op == "layer_norm":
        w = torch.randn(x.shape[-1], device=x.device, dtype=x.dtype)
        b = torch.randn(x.shape[-1], device=x.device, dtype=x.dtype)
        return (lambda: tr.layer_norm(x, x.shape[-1:], w, b)), (lambda: F.layer_norm(x, x.shape[-1:], w, b))
    return (lambda: getattr(tr, op)(x, -1)), (lambda: getattr(torch, op)(x, -1))


def nbytes(op: str, x: torch.Tensor) -> int:
    rows = x.numel() // x.shape[-1]
    n = x.numel() * x.element_size()
    if op in ("softmax", "log_softmax", "layer_norm"):
        return 2 * n
    if op == "max":
        return n + rows * (x.element_size() + 8)
    return n + rows * x.element_size()


def main() -> None:
    real, covers = C.row_hint, C.hint_covers_align
    variants = {"div": (real, covers), "align": (real, lambda *a: False), "none": (lambda *a: 1, lambda *a: False)}
    for op, shape, dtype in CASES:
        x = torch.randn(shape, device="cuda", dtype=dtype)
        ours, eager = call(op, x)
        res: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(2):
            for name, (hint, cover) in variants.items():
                C.row_hint, C.hint_covers_align = hint, cover
                get_registry().cache.clear()  # (the saved plan holds the hint of the call that recorded it)
                res[name].append(do_bench(ours, return_mode="median"))
        C.row_hint, C.hint_covers_align = real, covers
        get_registry().cache.clear()
        res["eager"] = [do_bench(eager, return_mode="median")]
        b = nbytes(op, x)
        cells = "  ".join(f"{k} {b / (min(v) * 1e-3) / 1e9 / COPY_GBS * 100:5.1f} %" for k, v in res.items())
        div = real(*_view_of(x))
        print(f"{op:12s} {shape!s:16s} {str(dtype)[6:]:9s} DIV={div}  {cells}", flush=True)


def _view_of(x: torch.Tensor):
    n = x.shape[-1]
    return C.View(M=x.numel() // n, N=n, K=1, strides=((x.stride(-2), 1, 0),)), 0


if __name__ == "__main__":
    import sys

    if "--batch-norm" in sys.argv:
        batch_norm_ab()
    elif "--cols" in sys.argv:
        columns_ab()
    else:
        main()
