"""Registers, spills and global load/store widths of the row kernels' loops, compiled offline (no GPU needed).

Triton compiles to PTX for an H200 (sm_90a) without a device; the ptxas that ships with Triton reports
registers per thread and spill bytes. Occupancy follows: a program of 32 warps (1024 threads) shares an SM with a
second one only at <= 32 registers. A developer's tool (this is how the fp32 log_softmax loop's 46 registers
were found).

Usage: python tools/ptxas_regs.py   (any machine with triton; prints one line per kernel variant)
"""

from __future__ import annotations

import collections
import importlib
import os
import re
import subprocess
import tempfile

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tritred_ops._common import programs_per_sm


def _ptxas() -> str:
    """The ptxas that Triton itself would run for sm_90 (a newer Triton ships a second one for newer PTX)."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        return get_ptxas(90).path
    except (ImportError, TypeError, AttributeError):  # older Triton: the one bundled binary
        return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


PTXAS = _ptxas()
ALIGNED_EXTRA: list[str] = []  # more arguments a launch specializes as multiples of 16 (set by a caller)
ROWS = dict(K=1, s_xk=1, s_yk=1, s_xn=1, s_yn=1, BLOCK_M=1, SINGLE=False, PERSIST=0, LOOP_STAGES=1, ALIGN=0,
            ALIGN_Y=False)  # unit-stride rows, one row per program, as a launch on contiguous rows specializes


def compile_report(fn, runtime: dict[str, str], const: dict, num_warps: int, maxnreg: int | None = None) -> str:
    # constexpr parameters with defaults that the caller leaves out take them (ASTSource wants every parameter)
    const = {**{q.name: q.default for q in fn.params if q.is_constexpr and q.has_default}, **const}
    sig = {**runtime, **{k: "constexpr" for k in const}}
    aligned = ("x_ptr", "y_ptr", "w_ptr", "b_ptr", "N", "s_xm", "s_ym", *ALIGNED_EXTRA)
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in runtime if n in aligned}
    src = ASTSource(fn=fn, signature=sig, constexprs={(fn.arg_names.index(k),): v for k, v in const.items()},
                    attrs=attrs)
    options = {"num_warps": num_warps, "num_stages": 1, **({"maxnreg": maxnreg} if maxnreg else {})}
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        err = subprocess.run([PTXAS, "-arch=sm_90a", "-v", path, "-o", os.path.join(d, "k.cubin")],
                             capture_output=True, text=True).stderr
    regs = re.search(r"Used (\d+) registers", err)
    spill = re.search(r"(\d+) bytes spill stores", err)
    widths = collections.Counter(m.split(".")[-2] for m in re.findall(r"(?:ld|st)\.global[\w:.]*", ptx))
    per_sm = programs_per_sm(int(regs.group(1)), num_warps) if regs else "?"  # (an H200's, shared memory aside)
    return (f"{regs.group(1) if regs else '?'} registers ({per_sm} programs per SM), "
            f"{spill.group(1) if spill else '?'} B spilled, global access widths {dict(widths)}")


def main() -> None:
    softmax = importlib.import_module("tritred_ops.softmax")
    layer_norm = importlib.import_module("tritred_ops.layer_norm")
    for dt, tdt in (("fp32", tl.float32), ("bf16", tl.bfloat16)):
        for block_n, warps in ((8192, 16), (16384, 32)):
            for mode, name in ((0, "softmax"), (1, "log_softmax")):
                runtime = {"x_ptr": f"*{dt}", "y_ptr": f"*{dt}", "R": "i32", "N": "i32", "s_xm": "i32", "s_ym": "i32"}
                group = 4 if dt == "fp32" else 8  # lanes per (max, sum) pair: one 16-byte vector (as softmax._launch)
                const = {**ROWS, "MODE": mode, "PRE": tdt, "CAST": tdt, "ACC": tl.float32, "BLOCK_N": block_n,
                         "GROUP": group}
                for cap in (None, 32) if warps == 32 else (None,):  # (softmax._launch caps 32-warp loops at 32)
                    print(f"{name} {dt} loop N{block_n} w{warps} GROUP={group} maxnreg={cap}: "
                          f"{compile_report(softmax._rows_kernel, runtime, const, warps, cap)}", flush=True)
            runtime = {"x_ptr": f"*{dt}", "w_ptr": f"*{dt}", "b_ptr": f"*{dt}", "y_ptr": f"*{dt}", "mean_ptr": "*fp32",
                       "rstd_ptr": "*fp32", "R": "i32", "N": "i32", "s_xm": "i32", "s_ym": "i32", "eps": "fp32",
                       "eps_lo": "fp32"}
            const = {**ROWS, "HAS_W": True, "HAS_B": True, "STORE_STATS": False, "ACC": tl.float32,
                     "BLOCK_N": block_n}
            print(f"layer_norm {dt} loop N{block_n} w{warps}: "
                  f"{compile_report(layer_norm._layer_norm_kernel, runtime, const, warps)}", flush=True)
        # the unrolled first sweep of 2-byte rows of a few whole chunks (heuristics._unrolled_loop): 12288 = 6 x 2048
        const = {**const, "BLOCK_N": 2048, "UNROLL": 6}
        print(f"layer_norm {dt} loop N2048 w8 UNROLL=6: "
              f"{compile_report(layer_norm._layer_norm_kernel, runtime, const, 8)}", flush=True)


if __name__ == "__main__":
    main()
