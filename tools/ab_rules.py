"""A/B of the eleventh session's heuristic rules on shapes they were not tuned on: the built-in config (new rules)
against the config the rules replaced (forced through a plugin), alternated, do_bench median, % of copy bandwidth.

Usage on a CUDA machine: python tools/ab_rules.py
"""

from __future__ import annotations

import torch
import triton
from sweep import Force, close, make_call
from tritred_core import Problem, get_registry
from tritred_ops import heuristics as H
from tritred_ops._common import device_info

CASES = [  # (op, shape, dtype, dim)
    ("layer_norm", (8192, 6144), torch.bfloat16, -1), ("layer_norm", (8192, 6144), torch.float32, -1),
    ("layer_norm", (16384, 2560), torch.bfloat16, -1), ("layer_norm", (16384, 2560), torch.float32, -1),
    ("layer_norm", (4096, 20480), torch.bfloat16, -1), ("layer_norm", (4096, 20480), torch.float32, -1),
    ("layer_norm", (32768, 1536), torch.bfloat16, -1), ("layer_norm", (8192, 3072), torch.float16, -1),
    ("layer_norm", (4096, 12288), torch.float32, -1), ("layer_norm", (2048, 24576), torch.float32, -1),
    ("softmax", (4096, 40000), torch.bfloat16, -1), ("log_softmax", (1024, 60000), torch.bfloat16, -1),
    ("softmax", (2048, 50257), torch.float32, -1), ("logsumexp", (2048, 50257), torch.bfloat16, -1),
    ("log_softmax", (4096, 16384), torch.bfloat16, 0), ("softmax", (16, 4096, 1024), torch.float32, 1),
]


def old_config(op: str, x: torch.Tensor, dim: int):
    """The config the built-in heuristic gave before the rules (the branches they now precede)."""
    caps = H._Caps(device_info(x.device))
    shape = x.shape
    d = dim % x.dim()
    M = int(torch.tensor(shape[:d]).prod()) if d else 1
    N, K = shape[d], int(torch.tensor(shape[d + 1:]).prod()) if d + 1 < x.dim() else 1
    p = Problem(op=op, dtype=str(x.dtype)[6:], M=M, N=N, K=K, stride_m=N * K, stride_n=K, stride_k=1)
    if K > 1:
        return H._cols_config(p, caps, False, caps.softmax_resident, 4, caps.programs, 32, 1)
    if op == "layer_norm":
        return H._rows_config(p, caps, False, caps.norm_resident, 2048, caps.norm_chunk, caps.loop_warps,
                              caps.norm_short_row)
    return H._rows_config(p, caps, False, caps.softmax_resident, 2048, caps.norm_chunk, caps.loop_warps,
                          caps.norm_short_row)


def main() -> None:
    reg = get_registry()
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6
    for op, shape, dtype, dim in CASES:
        run, ref, nbytes = make_call(op, shape, dtype, dim)
        x = torch.empty(shape, dtype=dtype, device="cuda")
        cfg = old_config(op, x, dim)
        res = {"new": [], "old": []}
        for _ in range(2):
            for which in ("new", "old"):
                name = reg.register(Force(op, cfg), name="ab-old") if which == "old" else None
                try:
                    ok = close(run(), ref())
                    ms = triton.testing.do_bench(run, warmup=10, rep=40, return_mode="median")
                    res[which].append(100 * nbytes / ms / 1e6 / copy if ok else float("nan"))
                finally:
                    if name:
                        reg.unregister(name)
        new, old = max(res["new"]), max(res["old"])
        print(f"{op} {'x'.join(map(str, shape))} {str(dtype)[6:]} dim={dim}: new {new:.1f}% old {old:.1f}% "
              f"({cfg.strategy} M{cfg.BLOCK_M} N{cfg.BLOCK_N} K{cfg.BLOCK_K} w{cfg.num_warps})", flush=True)


if __name__ == "__main__":
    main()
