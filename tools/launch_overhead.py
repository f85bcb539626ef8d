"""Where the host time of a small call goes (CUDA): each step of a replayed tritred call timed alone.

Usage: python tools/launch_overhead.py   (a developer's measurement, not a product feature)
"""

from __future__ import annotations

import time

import torch
import tritred_ops as tr
from triton import knobs
from triton.runtime import driver
from tritred_core import get_registry
from tritred_ops import _replay


def us(fn, n: int = 20000) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    x = torch.randn(8, 1024, device="cuda")
    y = torch.empty_like(x)
    tr.softmax(x, -1)
    plan = next(v for v in get_registry().cache.values() if isinstance(v, _replay.Plan))
    launch = plan.launches[0]
    c = launch.compiled
    g0, g1, g2 = launch.grid
    stream = driver.active.get_current_stream(driver.active.get_current_device())
    args = launch.template.copy()
    args[0], args[1] = x, y
    iargs = args.copy()
    iargs[0], iargs[1] = x.data_ptr(), y.data_ptr()
    run = c.run
    rows = {
        "torch.softmax (eager)": lambda: torch.softmax(x, -1),
        "tr.softmax (replay)": lambda: tr.softmax(x, -1),
        "find_plan": lambda: _replay.find_plan("softmax", (-1, None), x),
        "torch.empty_strided": lambda: torch.empty_strided((8, 1024), (1024, 1), dtype=torch.float32,
                                                          device=x.device),
        "torch.empty": lambda: torch.empty((8, 1024), dtype=torch.float32, device=x.device),
        "torch.empty_like": lambda: torch.empty_like(x),
        "stream (driver)": lambda: driver.active.get_current_stream(driver.active.get_current_device()),
        "stream (raw)": lambda: torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice()),
        "hooks": _replay._hooks,
        "knobs.runtime.launch_enter_hook": lambda: knobs.runtime.launch_enter_hook,
        "c.run(tensors)": lambda: run(g0, g1, g2, stream, c.function, c.packed_metadata, None, None, None, *args),
        "c.run(ints)": lambda: run(g0, g1, g2, stream, c.function, c.packed_metadata, None, None, None, *iargs),
        "x.data_ptr()": x.data_ptr,
    }
    if hasattr(run, "launch") and hasattr(run, "launch_pdl"):  # triton 3.6's CudaLauncher: the C entry point
        lp, coop, pdl = run.launch, run.launch_cooperative_grid, run.launch_pdl
        rows["launcher.launch(ints)"] = lambda: lp(g0, g1, g2, stream, c.function, coop, pdl, None, None,
                                                    c.packed_metadata, None, None, None, *iargs)
        rows["launcher.launch(tensors)"] = lambda: lp(g0, g1, g2, stream, c.function, coop, pdl, None, None,
                                                       c.packed_metadata, None, None, None, *args)
    for name, fn in rows.items():
        try:
            print(f"{name:34s} {us(fn):7.2f} us", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{name:34s} failed: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
