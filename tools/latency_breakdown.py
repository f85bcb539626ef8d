"""Where the host time of one small call goes: each step of a replayed call timed alone, beside torch's own.

Usage: python tools/latency_breakdown.py   (CUDA; prints per-call microseconds, median of batches)

Steps of ``tr.softmax(x, -1)`` on 8x1024 float32 after the first call: the key lookup (``find_plan``), the
replay (``plan.run``: allocation, stream, launch), and inside the replay the allocation and the launcher's C call
alone. Beside them: ``torch.softmax``, ``torch.empty_strided`` and ``torch.neg(x, out=y)`` (torch's own path from
Python to a kernel launch). Last, the GPU time of each latency case (CUDA events, ``do_bench``): a call whose
kernel outlasts its host time is not host-bound.
"""

from __future__ import annotations

import statistics

import torch
import tritred_ops as tr
from latency import per_call_us, tiny_cases
from triton.testing import do_bench
from tritred_ops._replay import _raw_stream, find_plan


def _static_launcher(c, g0, g1, g2, stream, args):
    """The same launch through torch's private static CUDA launcher (what inductor uses), or None when this
    torch/Triton pair lacks it. A probe only: is Triton's launcher C call (argument parsing, cuLaunchKernelEx)
    the cost, or the driver's launch itself?"""
    import os
    import tempfile

    try:
        from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
        path = os.path.join(tempfile.mkdtemp(), c.src.fn.__name__ + ".cubin")
        with open(path, "wb") as f:
            f.write(c.asm["cubin"])
        c._cubin_path = path
        k = StaticallyLaunchedCudaKernel(c)
        k.load_kernel(torch.cuda.current_device())
    except Exception as e:  # noqa: BLE001 - a probe: report and go on
        print(f"torch static launcher: not available ({type(e).__name__}: {e})")
        return None
    # the launcher takes the kernel's non-constexpr arguments only (signature order, as Triton's)
    sig = c.src.signature
    keep = [a for n, a in zip(c.src.fn.arg_names, args) if sig.get(n) != "constexpr"]
    if len(keep) != len(k.arg_tys):
        print(f"torch static launcher: argument count mismatch ({len(keep)} vs {k.arg_tys})")
        return None
    keep = tuple(keep) + (None,) * (k.has_global_scratch + k.has_profile_scratch)
    TY = k.arg_tys + "O" * (k.has_global_scratch + k.has_profile_scratch)
    L, F, W, SH = k.C_impl._launch_kernel, k.function, k.num_warps, k.shared

    def launch():
        L(F, g0, g1, g2, W, SH, TY, keep, stream)
    try:
        launch()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        print(f"torch static launcher: launch failed ({type(e).__name__}: {e})")
        return None
    return launch


def main() -> None:
    x = torch.randn(8, 1024, device="cuda")
    y = torch.empty_like(x)
    tr.softmax(x, -1)
    plan, _ = find_plan("softmax", (-1, None), x)
    assert plan is not None and plan.fast is not None, "no straight-line plan"
    launch = plan.launches[0]
    e, c = launch.c_entry, launch.compiled
    args = launch.template.copy()
    ptrs = [x.data_ptr(), y.data_ptr()]
    for pos, slot in launch.slots:
        args[pos] = ptrs[slot]
    get_stream, get_device = _raw_stream()
    stream = get_stream(get_device())
    g0, g1, g2 = launch.grid

    def raw_launch():
        e.launch(g0, g1, g2, stream, c.function, e.launch_cooperative_grid, e.launch_pdl, None, None,
                 c.packed_metadata, None, None, None, *args)

    static_launch = _static_launcher(c, g0, g1, g2, stream, args)

    S, T, D, DEV = (8, 1024), (1024, 1), torch.float32, x.device
    steps = {
        "tr.softmax (whole call)": lambda: tr.softmax(x, -1),
        "torch.softmax": lambda: torch.softmax(x, -1),
        "find_plan": lambda: find_plan("softmax", (-1, None), x),
        "plan.run": lambda: plan.run(x),
        "raw launcher call": raw_launch,
        **({"torch static launcher call": static_launch} if static_launch is not None else {}),
        "torch.empty_strided": lambda: torch.empty_strided(S, T, dtype=D, device=DEV),
        "torch.empty_like": lambda: torch.empty_like(x),
        "x.new_empty_strided": lambda: x.new_empty_strided(S, T),
        "x.new_empty_strided dtype=": lambda: x.new_empty_strided(S, T, dtype=D),
        "x.new_empty": lambda: x.new_empty(S),
        "torch.empty(S, dtype, device)": lambda: torch.empty(S, dtype=D, device=DEV),
        "torch.empty(numel).view(S)": lambda: torch.empty(8192, dtype=D, device=DEV).view(S),
        "torch.empty_strided on CPU": lambda: torch.empty_strided(S, T, dtype=D),
        "stream lookup": lambda: get_stream(get_device()),
        "torch.neg(x, out=y)": lambda: torch.neg(x, out=y),
        "torch.neg(x)": lambda: torch.neg(x),
        "tr.sum(x, -1)": lambda: tr.sum(x, -1),
        "torch.sum(x, -1)": lambda: torch.sum(x, -1),
    }
    for name, fn in steps.items():
        vals = [per_call_us(fn, n=2000) for _ in range(5)]
        print(f"{name:28s} {statistics.median(vals):6.2f} us  (runs {min(vals):.2f}-{max(vals):.2f})")

    print("GPU time per call (do_bench median, us): tritred / eager; host time per call: tritred / eager")
    for name, (ours, eager) in tiny_cases().items():
        go, ge = do_bench(ours, return_mode="median") * 1e3, do_bench(eager, return_mode="median") * 1e3
        ho, he = per_call_us(ours), per_call_us(eager)
        print(f"{name:16s} gpu {go:6.2f} / {ge:6.2f}   host {ho:6.2f} / {he:6.2f}")


if __name__ == "__main__":
    main()
