"""The statistics' specs (what each op's kernels take); re-exported by the package as ``SPECS``."""

from __future__ import annotations

from tritred_core import ReductionSpec

#: What the kernels take: a tail tile and a few threads a row on the row single pass, persistent row grids.
SPECS = {
    name: ReductionSpec(name=name, family="statistics", outputs=outputs, mirrors=f"torch.{name}", summary=summary,
                        strategies=("single_pass", "multi_pass", "split"),
                        knobs=("BLOCK_TAIL", "threads_per_row", "num_programs"))
    for name, outputs, summary in (
        ("var", ("var",), "variance with Bessel-style correction"),
        ("std", ("std",), "standard deviation with correction"),
        ("var_mean", ("var", "mean"), "(variance, mean) in one sweep"),
        ("std_mean", ("std", "mean"), "(standard deviation, mean) in one sweep"),
    )
}
