"""``tritred tune``: time launch configs for one call on this device and store the fastest in the tuning cache."""

from __future__ import annotations

import math
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..common import (
    UsageError,
    clean_errors,
    dtype_name,
    load_registry,
    make_console,
    meta_call,
    parse_dim,
    parse_shape,
    prepare_backend,
)

#: The largest input ``tune`` takes without CUDA (the interpreter's timings mean nothing; the mechanism shows on
#: small shapes).
INTERPRETER_MAX_NUMEL = 65536


@clean_errors
def tune_cmd(
    op: Annotated[str, typer.Argument(help="Reduction name (see `tritred list`).")],
    shape: Annotated[str, typer.Option("--shape", "-s", help="Input shape, e.g. 4096x32768.")],
    dtype: Annotated[str, typer.Option("--dtype", "-t", help="Input dtype, e.g. bfloat16.")] = "float32",
    dim: Annotated[str, typer.Option("--dim", "-d", help="Reduced dim: int, 0,1 or none.")] = "-1",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Time the candidates, store nothing.")] = False,
) -> None:
    """Time launch configs for one call of OP on this device and store the fastest in the tuning cache.

    The cache ($TRITRED_TUNE_CACHE, else ~/.cache/tritred/tuning.json) is keyed by device, triton version, op,
    dtype and shape bucket; tritred's built-in launch rules use its entries first, and `tritred explain` says so.
    Only built-in reductions are tuned (a plugin decides its own configs). Without CUDA the candidates run under
    the interpreter: the mechanism works, the timings mean nothing, and shapes are limited to 65536 elements.
    """
    prepare_backend()
    reg = load_registry()
    rec = reg.get(op)
    if rec.spec.plugin != "tritred_ops":
        raise UsageError(f"{op} comes from plugin {rec.spec.plugin}: only tritred's own reductions are tuned")
    import torch
    from tritred_ops import tuning

    dtype = dtype_name(dtype)
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype) or dtype not in rec.spec.dtypes:
        raise UsageError(f"bad --dtype {dtype!r} for {op}; supported: {', '.join(rec.spec.dtypes)}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dims = parse_shape(shape)
    if device.type == "cpu" and math.prod(dims) > INTERPRETER_MAX_NUMEL:
        # (each candidate runs element by element in Python: a GPU-sized shape would run for hours, silently)
        raise UsageError(f"--shape {shape}: without CUDA the candidates run under the Triton interpreter, where "
                         f"timings mean nothing and a shape over {INTERPRETER_MAX_NUMEL} elements takes minutes to "
                         "hours; try a small one (--shape 8x512 --dry-run) to see the mechanism")
    d = parse_dim(dim)
    meta_call(rec, op, shape, dim, dims, dt, d)  # (the op's refusal: a usage error, not a traceback)
    problem, trials, best = tuning.tune(rec, dims, dt, d, device, save=not dry_run)
    con = make_console()
    table = Table(title=f"tritred tune {op} {shape} {dtype} on {device} ({tuning.shape_bucket(problem)})")
    for col in ("strategy", "BLOCK_M", "BLOCK_N", "BLOCK_K", "warps", "stages", "programs", "split", "threads/row",
                "ms", ""):
        table.add_column(col, justify="right" if col not in ("strategy", "") else "left", no_wrap=col == "strategy",
                         min_width=len("single_pass") if col == "strategy" else None)
    for t in trials:
        c = t.config
        table.add_row(c.strategy, str(c.BLOCK_M), f"{c.BLOCK_N}+{c.BLOCK_TAIL}" if c.BLOCK_TAIL else str(c.BLOCK_N),
                      str(c.BLOCK_K), str(c.num_warps),
                      str(c.num_stages), str(c.num_programs), str(c.split), str(c.threads_per_row or "-"),
                      f"{t.ms:.4f}" if t.ms is not None else escape(t.error or "?"),
                      "current" if t.current else "")
    con.print(table)
    if best is None:
        raise UsageError("no candidate ran correctly: nothing stored")
    where = "not stored (--dry-run)" if dry_run else f"stored in {tuning.cache_path()}"
    con.print(f"best: {best.strategy} BLOCK_M={best.BLOCK_M} BLOCK_N={best.BLOCK_N} BLOCK_TAIL={best.BLOCK_TAIL} "
              f"BLOCK_K={best.BLOCK_K} "
              f"num_warps={best.num_warps} num_stages={best.num_stages} num_programs={best.num_programs} "
              f"split={best.split} threads_per_row={best.threads_per_row}; {where}")

