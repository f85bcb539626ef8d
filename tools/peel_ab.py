"""Row loops with their inner chunks peeled (no element mask, no select: ``PEEL=True``, the default) against the
loop that masks every chunk (``PEEL=False``), forced by wrapping the kernel, for the built-in config and loop
configs forced through a plugin. Each variant is checked against torch once and timed twice in alternation
(do_bench median, the better of the two), % of copy bandwidth (4263 GB/s; input read once, output written once).

Usage on a CUDA machine: python tools/peel_ab.py [module:kernel ...] (default: softmax:_rows_kernel)
"""

from __future__ import annotations

import sys

import torch
from sweep import Force, close, make_call
from tritred_core import LaunchConfig, get_registry

BF, F32, F16 = torch.bfloat16, torch.float32, torch.float16
CASES = {  # kernel -> (op, shape, dtype, loop configs (BLOCK_N, warps))
    "softmax:_rows_kernel": [
        ("log_softmax", (2048, 50257), BF, [(4096, 8), (8192, 16)]),
        ("softmax", (2048, 50257), BF, [(4096, 8), (8192, 16)]),
        ("log_softmax", (4096, 50257), BF, [(4096, 8), (8192, 16)]),
        ("log_softmax", (8192, 50257), BF, [(4096, 8), (8192, 16)]),
        ("log_softmax", (2048, 50257), F16, [(4096, 8), (8192, 16)]),
        ("log_softmax", (2048, 50257), F32, [(8192, 16), (16384, 32)]),
        ("softmax", (4096, 32001), BF, [(4096, 4), (8192, 16)]),
        ("log_softmax", (4096, 50256), BF, [(8192, 16)]),
        ("softmax", (1024, 131072), BF, [(16384, 32)]),
        ("log_softmax", (4096, 32768), BF, [(8192, 16)]),
        ("softmax", (4096, 40000), BF, [(8192, 16)]),
    ],
    "layer_norm:_layer_norm_kernel": [  # the second sweep's whole chunks without a column mask
        ("layer_norm", (1024, 131072), BF, []), ("layer_norm", (4096, 32768), BF, []),
        ("layer_norm", (1024, 131072), F32, []), ("layer_norm", (16384, 5120), BF, []),
        ("layer_norm", (8192, 12288), BF, []), ("layer_norm", (2048, 65536), BF, []),
        ("layer_norm", (4096, 50257), BF, []),
    ],
    "reduce:_rows_kernel": [  # shifted rows' loops: the head chunk masked, inner chunks not, the tail masked
        ("sum", (4096, 50257), BF, []), ("amax", (4096, 50257), BF, []), ("sum", (2048, 100001), F32, []),
        ("mean", (8192, 32001), BF, []), ("sum", (1024, 131071), BF, []),
    ],
    "second": [  # the rule after the peel (odd 2-byte softmax rows on the L2 rule), and 4096-wide chunks
        ("log_softmax", (2048, 50257), BF, [(4096, 4)]),
        ("log_softmax", (1024, 50257), BF, [(4096, 8)]),
        ("softmax", (16384, 20000), BF, [(4096, 8)]),
        ("softmax", (8192, 24576), BF, [(4096, 8)]),
        ("log_softmax", (16384, 20001), BF, [(4096, 8), (8192, 16)]),
        ("logsumexp", (2048, 50257), BF, [(4096, 8), (8192, 16)]),
        ("logsumexp", (1024, 131072), BF, [(8192, 16)]),
        ("softmax", (512, 32768), BF, [(4096, 8)]),
        ("softmax", (4096, 32001), BF, [(4096, 4)]),
    ],
}


class Peel:
    """``kernel[grid](..., PEEL=peel)`` for a JIT kernel (the host code indexes it, then calls)."""

    def __init__(self, kernel, peel: bool) -> None:  # noqa: ANN001
        self.kernel, self.peel = kernel, peel

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        return lambda *a, **k: self.kernel[grid](*a, PEEL=self.peel, **k)

    def __getattr__(self, name: str):  # noqa: ANN204 (the replay reads the kernel's signature)
        return getattr(self.kernel, name)


def main() -> None:
    from triton.testing import do_bench
    reg = get_registry()
    keys = sys.argv[1:] or list(CASES)
    for key in keys:
        mod_name, kname = (key if ":" in key else "softmax:_rows_kernel").split(":")
        mod = sys.modules[f"tritred_ops.{mod_name}"]
        real = getattr(mod, kname)
        for op, shape, dtype, loops in CASES[key]:
            variants = [("builtin", None)] + [
                (f"{bn}w{w}", LaunchConfig(strategy="multi_pass", BLOCK_M=1, BLOCK_N=bn, num_warps=w))
                for bn, w in loops]
            res: dict[str, float] = {}
            for _ in range(2):
                for label, cfg in variants:
                    for peel in (False, True):
                        tag = f"{label}{' peel' if peel else ''}"
                        name = None if cfg is None else reg.register(Force(op, cfg), name="ab")
                        setattr(mod, kname, Peel(real, peel))
                        try:
                            reg.cache.clear()
                            run, ref, nbytes = make_call(op, shape, dtype, -1)
                            if tag not in res and not close(run(), ref()):
                                print(f"   WRONG {op} {shape} {tag}", flush=True)
                            pct = 100 * nbytes / (do_bench(run, return_mode="median") * 1e-3) / 1e9 / 4263.0
                            res[tag] = max(res.get(tag, 0.0), pct)
                        finally:
                            setattr(mod, kname, real)
                            if name:
                                reg.unregister(name)
            print(f"{op} {shape} {str(dtype)[6:]}: " + "  ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
