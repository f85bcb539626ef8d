"""The reductions' specs (what each op's kernels take); re-exported by the package as ``SPECS``."""

from __future__ import annotations

from tritred_core import Knob, ReductionSpec, Strategy

from ... import runtime as rt

#: What the kernels take. The plain reductions: a tail tile on their row single pass, persistent row grids. max and
#: min with indices: neither (their row and column kernels hold a row in one tile, one program per row block).
_STRATEGIES: tuple[Strategy, ...] = ("single_pass", "multi_pass", "split")
_PLAIN: tuple[Knob, ...] = ("BLOCK_TAIL", "num_programs")

SPECS = {
    "sum": ReductionSpec(name="sum", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.sum",
                         summary="sum over dims (integer and bool inputs sum into int64)",
                         strategies=_STRATEGIES, knobs=_PLAIN),
    "mean": ReductionSpec(name="mean", family="reduce", mirrors="torch.mean", summary="arithmetic mean over dims",
                          strategies=_STRATEGIES, knobs=_PLAIN),
    "prod": ReductionSpec(name="prod", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.prod",
                          summary="product over dims", strategies=_STRATEGIES, knobs=_PLAIN),
    "amax": ReductionSpec(name="amax", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.amax",
                          summary="maximum over dims (NaN propagates)", strategies=_STRATEGIES, knobs=_PLAIN),
    "amin": ReductionSpec(name="amin", family="reduce", dtypes=rt.ALL_DTYPES, mirrors="torch.amin",
                          summary="minimum over dims (NaN propagates)", strategies=_STRATEGIES, knobs=_PLAIN),
    "max": ReductionSpec(name="max", family="reduce", dtypes=rt.ALL_DTYPES, outputs=("values", "indices"),
                         mirrors="torch.max", summary="max, or (values, indices) of the first max along dim",
                         strategies=_STRATEGIES, knobs=()),
    "min": ReductionSpec(name="min", family="reduce", dtypes=rt.ALL_DTYPES, outputs=("values", "indices"),
                         mirrors="torch.min", summary="min, or (values, indices) of the first min along dim",
                         strategies=_STRATEGIES, knobs=()),
}
