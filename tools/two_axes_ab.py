"""A/B of the statistics over two reduced axes (var over (0, 2, 3) of NCHW): the two-axes path (split partials
stepped along the batch, merged per channel) against the gather path it replaced (``_two_axes`` patched to None:
one copy of the input, then the rows kernel), beside torch eager and torch.compile, in one process.

Usage on a CUDA machine: python tools/two_axes_ab.py
Prints do_bench medians and % of copy bandwidth (4263 GB/s; bytes: the input read once, the outputs written once).
"""

from __future__ import annotations

import torch
import tritred_ops as tr
from triton.testing import do_bench
from tritred_ops import statistics as st

COPY_GBS = 4263.0
CASES = [  # (op, shape, dtype)
    ("var", (64, 256, 56, 56), torch.bfloat16), ("var", (64, 256, 56, 56), torch.float32),
    ("var_mean", (128, 512, 14, 14), torch.bfloat16), ("var", (32, 2048, 7, 7), torch.bfloat16),
    ("std", (64, 128, 28, 28), torch.float32), ("var", (16, 64, 16, 32, 32), torch.bfloat16),
    ("var_mean", (256, 64, 112, 112), torch.bfloat16), ("var", (8, 32, 256, 256), torch.float32),
]


def pct(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9 / COPY_GBS * 100


def run_case(op: str, shape: tuple[int, ...], dtype: torch.dtype, real) -> None:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    dims = (0, *range(2, x.dim()))
    outs = 2 if op.endswith("_mean") else 1
    nbytes = x.numel() * x.element_size() + outs * shape[1] * x.element_size()
    ours, ref = getattr(tr, op), getattr(torch, op)
    comp = torch.compile(lambda t: ref(t, dims), dynamic=False)
    st._two_axes = real
    got, want = ours(x, dims), ref(x.double(), dims)
    got, want = (got if outs == 2 else (got,)), (want if outs == 2 else (want,))
    err = max(float(((g.double() - w).abs() / (w.abs() + 1e-6)).max()) for g, w in zip(got, want))
    row: dict[str, list[float]] = {"two-axes": [], "gather": []}
    for _ in range(2):  # alternated: drift hits both sides
        st._two_axes = real
        row["two-axes"].append(do_bench(lambda: ours(x, dims), return_mode="median"))
        st._two_axes = lambda *a: None  # (dims as a list: another replay key, so the plan above is not found)
        row["gather"].append(do_bench(lambda: ours(x, list(dims)), return_mode="median"))
    st._two_axes = real
    row["eager"] = [do_bench(lambda: ref(x, dims), return_mode="median")]
    row["compile"] = [do_bench(lambda: comp(x), return_mode="median")]
    cells = "  ".join(f"{k} {min(v) * 1e3:8.1f} us {pct(nbytes, min(v)):5.1f} %" for k, v in row.items())
    print(f"{op:8s} {tuple(shape)!s:22s} {str(dtype)[6:]:8s} rel.err {err:.1e}  {cells}", flush=True)


def main() -> None:
    real = st._two_axes
    for op, shape, dtype in CASES:
        run_case(op, shape, dtype, real)


if __name__ == "__main__":
    main()
