"""``tritred explain``: the canonical Problem of a call, the device, and the LaunchConfig the plugins decide."""

from __future__ import annotations

import inspect
import json
import math
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from ..common import (
    UsageError,
    clean_errors,
    dtype_name,
    load_registry,
    log,
    make_console,
    meta_call,
    parse_dim,
    parse_shape,
)


def _device_info(device: str) -> Any:
    """The DeviceInfo to plan for: ``h200`` (``tritred_core.testing.FAKE_H200``), ``cuda`` (the real GPU) or ``cpu``
    (the Triton interpreter), the latter two as ``tritred_ops.runtime.device_info`` reads them."""
    from tritred_core.testing import FAKE_H200

    d = device.lower()
    if d == "h200":
        return FAKE_H200
    if d == "auto":
        import torch

        d = "cuda" if torch.cuda.is_available() else "cpu"
    if d.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device here (use --device h200 to plan for an H200)")
        from tritred_ops.runtime import device_info

        return device_info(torch.device(d))
    if d in ("cpu", "interpreter"):
        import torch
        from tritred_ops.runtime import device_info

        return device_info(torch.device("cpu"))  # what the ops plan with under the interpreter
    raise UsageError(f"bad --device {device!r}: expected auto, cuda, cpu or h200")


def _fields_table(title: str, obj: Any, extra: dict[str, Any] | None = None, exclude: set[str] | None = None,
                  ) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    data = obj.model_dump(exclude=exclude) if hasattr(obj, "model_dump") else dict(obj)
    data.update(extra or {})
    for k, v in data.items():
        table.add_row(str(k), str(v))
    return table


@clean_errors
def explain_cmd(
    op: Annotated[str, typer.Argument(help="Reduction name (see `tritred list`).")],
    shape: Annotated[str, typer.Option("--shape", "-s", help="Input shape, e.g. 4096x32768.")] = "4096x32768",
    dtype: Annotated[str, typer.Option("--dtype", "-t", help="Input dtype, e.g. bfloat16.")] = "float32",
    dim: Annotated[str | None, typer.Option(
        "--dim", "-d", help="Reduced dim: int, 0,1 or none (default -1; not for normalize ops).")] = None,
    device: Annotated[str, typer.Option(
        "--device", help="auto, cuda, cpu (interpreter) or h200 (a fake H200: the GPU's decision on any machine).")]
    = "auto",
    view: Annotated[str | None, typer.Option(
        "--view", help="The input's layout: transposed, sliced, strided or channels_last (the bench suites' views; "
        "default contiguous).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """How OP would run: its canonical Problem, the device, and the LaunchConfig the plugins decide (and who).

    Inputs are meta tensors (no memory, no kernel launch), so any shape works on any machine. With --json, a
    built-in op also lists every launch decision and kernel launch of the call (its host path run on the meta
    tensors, nothing launched).
    """
    reg = load_registry()
    rec = reg.get(op)
    import torch

    dtype = dtype_name(dtype)
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise UsageError(f"bad --dtype {dtype!r}: expected a torch dtype name like bfloat16")
    if dtype not in rec.spec.dtypes:
        raise UsageError(f"{op} does not support {dtype}; supported: {', '.join(rec.spec.dtypes)}")
    normalize = rec.spec.family == "normalize"
    if normalize and dim is not None:  # (their dims come from the op: normalized_shape, channels)
        raise UsageError(f"--dim does not apply to {op}: a normalize op takes its dims from its own arguments")
    shp, d = parse_shape(shape), parse_dim("-1" if dim is None else dim)
    args, kwargs, problem = meta_call(rec, op, shape, dim, shp, dt, d, view)
    info = _device_info(device)
    config = reg.launch_config(rec.spec, problem, info)
    nbytes = None
    if rec.byte_count is not None:
        try:
            nbytes = rec.byte_count(*args, **kwargs)
        except Exception as e:  # informational
            log.debug("byte_count failed: %s", e)
    if as_json:
        report = {"op": op, "shape": list(shp), "dtype": dtype, "dim": None if normalize else d, "view": view,
                  "spec": rec.spec.model_dump(), "problem": problem.model_dump(), "device": info.model_dump(),
                  "config": config.model_dump(), "bytes": nbytes,
                  "rules": [{"name": name, "doc": doc} for name, doc in _rule_docs(config.rule)]}
        if rec.spec.plugin == "tritred_ops":
            report.update(_call_trace(rec, args, kwargs, info))
        typer.echo(json.dumps(report, indent=1, default=str))
        return
    con = make_console()
    con.print(f"[bold]{op}[/] ({rec.spec.mirrors}) from plugin [bold]{rec.spec.plugin}[/] {rec.spec.version or ''}"
              f"\ncall: shape {shp}, dtype {dtype}" + ("" if normalize else f", dim {d}")
              + (f", view {view} (strides {tuple(args[0].stride())})" if view is not None else "")
              + (f", {nbytes / 1e6:.4g} MB moved" if nbytes else ""),
              markup=True)
    if op == "batch_norm":  # (its Problem maps the channels to K: statistics over batch and spatial, per channel)
        con.print(_fields_table("Problem (batch_norm: M = batch, N = spatial, K = channels; statistics over M and "
                                "N, one per channel)", problem, {"channels (K)": problem.K}))
    else:
        con.print(_fields_table("Problem (input viewed as M x N x K, reduced over N)", problem,
                                {"outputs (M*K)": problem.outputs, "inner (row kernels)": problem.inner}))
    con.print(_fields_table("DeviceInfo", info))
    con.print(_fields_table("LaunchConfig", config, exclude={"rule", "why"}))  # (printed below, with their text)
    tuned = "tuned (from a tuning cache)" if config.tuned else "not tuned (heuristic)"
    con.print(f"decided by plugin [bold]{config.decided_by}[/]; {tuned}", markup=True)
    for name, doc in _rule_docs(config.rule):
        con.print(f"rule [bold]{escape(name)}[/]: {escape(doc.split(chr(10) * 2)[0])}", markup=True)
    for reason in (config.why or "").split("; "):
        if reason:
            con.print(f"  why {escape(reason)}", markup=True)
    if rec.spec.plugin == "tritred_ops":
        trace = _call_trace(rec, args, kwargs, info)
        if "launches" in trace:
            con.print(_launch_table(trace["launches"], info.sm_count))
    kept = _kept_outputs(shp, d) if rec.spec.family in ("reduce", "statistics") else None
    if kept is not None and problem.layout == "strided" and problem.outputs != kept:
        if rec.spec.family == "statistics":
            con.print(f"the call's {kept} outputs each merge {problem.outputs // kept} partials (its reduced dims "
                      "make two strided axes): the rows above are one per output and outer slice (docs/api.md)")
        else:
            con.print(f"the call's {kept} outputs come in stages (its reduced dims are not one strided axis): this "
                      "is the first, over the whole input, into a temporary (docs/api.md)")


def _rule_docs(rule: str | None) -> list[tuple[str, str]]:
    """(name, docstring) of each rule named in ``LaunchConfig.rule`` (``module:function`` joined by `` > ``,
    outermost first): the rule, its reason and its figures, as the plugin documents them. Only modules already
    imported are read (a rule that decided has run; naming a module imports nothing); any other name, or one
    without a function part, keeps an empty docstring."""
    out = []
    for name in (rule or "").split(" > "):
        if not name:
            continue
        module, _, qualname = name.partition(":")
        obj: Any = sys.modules.get(module) if qualname else None
        for part in qualname.split(".") if obj is not None else ():
            obj = getattr(obj, part, None)
        doc = (inspect.getdoc(obj) or "") if obj is not None and callable(obj) else ""
        out.append((name, doc))
    return out


def _call_trace(rec: Any, args: Any, kwargs: dict[str, Any], info: Any) -> dict[str, Any]:
    """Every launch decision and kernel launch of a built-in op's call on ``info`` (meta tensors, nothing launched;
    ``tritred_ops.runtime.trace.explain``), or the error the call raised on the way."""
    from tritred_ops.runtime.trace import explain

    try:
        trace = explain(rec.impl, *args, device=info, **kwargs)
    except Exception as e:  # informational: the Problem and config above stand
        return {"trace_error": f"{type(e).__name__}: {e}"}
    return {"decisions": [{"op": dec.spec.name, "problem": dec.problem.model_dump(),
                           "config": dec.config.model_dump() if dec.config is not None else None}
                          for dec in trace.decisions],
            "launches": [{"kernel": launch.kernel, "grid": list(launch.grid), "args": list(launch.args),
                          "kwargs": launch.kwargs} for launch in trace.launches]}


def _launch_table(launches: list[dict[str, Any]], sm_count: int) -> Table:
    """The call's kernel launches with the quantities the launch rules reason about: programs and programs per SM
    (waves), the register tile and its elements per thread."""
    table = Table(title="Launches (the host path on meta tensors: a grid sized from a GPU's occupancy is not)",
                  title_justify="left")
    for col in ("kernel", "grid", "programs", "per SM", "num_warps", "tile (M x N x K)", "elements a thread"):
        table.add_column(col, no_wrap=col == "kernel")
    for launch in launches:
        kw = launch["kwargs"]
        programs = math.prod(launch["grid"])
        warps = int(kw.get("num_warps", 4))
        dims = [int(kw[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if isinstance(kw.get(k), int)]
        tile = math.prod(dims) if dims else None
        table.add_row(launch["kernel"], "x".join(map(str, launch["grid"])), str(programs),
                      f"{programs / max(sm_count, 1):.3g}", str(warps),
                      " x ".join(map(str, dims)) if dims else "-",
                      f"{tile / (32 * warps):.3g}" if tile else "-")
    return table


def _kept_outputs(shape: tuple[int, ...], dim: Any) -> int | None:
    """Outputs of a reduction of ``shape`` over ``dim`` (None when dim is not a plain int or tuple of ints)."""
    if dim is None:
        return 1
    dims = (dim,) if isinstance(dim, int) else dim
    if not isinstance(dims, tuple) or not all(isinstance(x, int) for x in dims):
        return None
    wrapped = {x % len(shape) for x in dims} if shape else set()
    return math.prod(size for i, size in enumerate(shape) if i not in wrapped)
