"""batch_norm's :class:`~tritred_core.ReductionSpec` (its own module: the launchers, the autograd and the public
function all name it)."""

from __future__ import annotations

from tritred_core import ReductionSpec

#: ``split``: the statistics launch over slices of each channel block's tiles (a split of 1: one slice), then the
#: normalize launch; ``num_programs``: normalize programs looping over several tiles of a channel block. The
#: backward pass (``Problem.direction == "backward"``) takes the same: the sums launch over slices, then the dx
#: launch.
SPEC = ReductionSpec(name="batch_norm", family="normalize", outputs=("out",),
                     mirrors="torch.nn.functional.batch_norm",
                     summary="per-channel statistics over (batch, *spatial); running stats updated in training",
                     strategies=("split",), knobs=("num_programs",))
