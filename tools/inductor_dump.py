"""What torch.compile generates where it beats tritred: the Triton source and the config its autotuner kept.

A developer's measurement script (not a product feature). For each case, compiles the torch call with
``torch.compile(dynamic=False)``, runs it, and prints every Inductor kernel it launched (name, the config kept
after autotuning: block sizes, ``num_warps``, ``num_stages``), then times torch.compile and tritred's built-in
call side by side (``triton.testing.do_bench`` median, % of copy bandwidth, 4263 GB/s; inputs read once,
outputs written once). The kernels' sources go to ``--src`` (one file).

Usage on a CUDA machine: python tools/inductor_dump.py [--src inductor-src.txt] [case ...]
(case: a name from CASES; default: all)
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
import tritred_ops as tr
from triton.testing import do_bench

COPY_GBS = 4263.0
BF, F32 = torch.bfloat16, torch.float32


def _ln(shape, dtype):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(shape[-1], device="cuda", dtype=dtype)
    b = torch.randn(shape[-1], device="cuda", dtype=dtype)
    n = x.numel() * x.element_size()
    return (lambda: F.layer_norm(x, shape[-1:], w, b)), (lambda: tr.layer_norm(x, shape[-1:], w, b)), 2 * n


def _red(op, shape, dtype, dim):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    out = getattr(torch, op)(x, dim)
    n = x.numel() * x.element_size() + out.numel() * out.element_size()
    return (lambda: getattr(torch, op)(x, dim)), (lambda: getattr(tr, op)(x, dim)), n


def _bn(shape, dtype):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    c = shape[1]
    w, b = torch.randn(c, device="cuda", dtype=dtype), torch.randn(c, device="cuda", dtype=dtype)
    rm, rv = torch.zeros(c, device="cuda", dtype=dtype), torch.ones(c, device="cuda", dtype=dtype)
    n = 2 * x.numel() * x.element_size()
    return ((lambda: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)),
            (lambda: tr.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)), n)


def _sm(op, shape, dtype, dim):
    x = torch.randn(shape, device="cuda", dtype=dtype)
    return (lambda: getattr(torch, op)(x, dim)), (lambda: getattr(tr, op)(x, dim)), 2 * x.numel() * x.element_size()


CASES = {
    "ln-8192x12288-bf16": lambda: _ln((8192, 12288), BF),
    "ln-4096x32768-bf16": lambda: _ln((4096, 32768), BF),
    "ln-200000x300-bf16": lambda: _ln((200000, 300), BF),
    "ln-16384x5120-bf16": lambda: _ln((16384, 5120), BF),
    "ln-65536x768-bf16": lambda: _ln((65536, 768), BF),
    "ln-65536x768-fp16": lambda: _ln((65536, 768), torch.float16),
    "sum0-256x262144-bf16": lambda: _red("sum", (256, 262144), BF, 0),
    "sum0-256x262144-fp32": lambda: _red("sum", (256, 262144), F32, 0),
    "sum1-64x4096x256-fp32": lambda: _red("sum", (64, 4096, 256), F32, 1),
    "sum1-64x4096x256-bf16": lambda: _red("sum", (64, 4096, 256), BF, 1),
    "mean1-16x4096x1000-bf16": lambda: _red("mean", (16, 4096, 1000), BF, 1),
    "sum-3000x4097-fp32": lambda: _red("sum", (3000, 4097), F32, -1),
    "sum-1024x131072-bf16": lambda: _red("sum", (1024, 131072), BF, -1),
    "var-262144x256-bf16": lambda: _red("var", (262144, 256), BF, -1),
    "softmax0-8192x8192-bf16": lambda: _sm("softmax", (8192, 8192), BF, 0),
    "logsoftmax-2048x50257-bf16": lambda: _sm("log_softmax", (2048, 50257), BF, -1),
    "bn-64x256x56x56-fp32": lambda: _bn((64, 256, 56, 56), F32),
    "bn-64x256x28x28-fp16": lambda: _bn((64, 256, 28, 28), torch.float16),
}


def _kernels(mods) -> list[tuple[str, str, str]]:
    """(name, kept config, source) of every Inductor Triton kernel in the modules ``mods``."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    found = []
    for mod in mods:
        for name, obj in vars(mod).items():
            if isinstance(obj, CachingAutotuner):
                kept = [str(getattr(la, "config", la)) for la in obj.launchers]
                n_cfg = len(getattr(obj, "configs", []) or [])
                src = getattr(getattr(obj, "fn", None), "src", "") or ""
                found.append((name, f"kept {kept} of {n_cfg} configs", src))
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--src", default="inductor-src.txt")
    args = ap.parse_args()
    from torch._inductor.codecache import PyCodeCache

    with open(args.src, "w") as src_out:
        for name in args.cases or list(CASES):
            torch._dynamo.reset()
            eager, ours, nbytes = CASES[name]()
            compiled = torch.compile(eager, dynamic=False)
            before = len(PyCodeCache.modules)
            compiled()
            torch.cuda.synchronize()
            kernels = _kernels(PyCodeCache.modules[before:])
            times = {}
            for _ in range(2):
                for label, fn in (("compile", compiled), ("tritred", ours)):
                    t = do_bench(fn, return_mode="median")
                    times[label] = min(times.get(label, t), t)
            cells = "  ".join(f"{k} {nbytes / (t * 1e-3) / 1e9 / COPY_GBS * 100:5.1f} %" for k, t in times.items())
            print(f"== {name}: {cells}", flush=True)
            for kname, kept, src in kernels:
                print(f"   {kname}: {kept}", flush=True)
                src_out.write(f"# ===== {name} / {kname}: {kept}\n{src}\n")


if __name__ == "__main__":
    main()
