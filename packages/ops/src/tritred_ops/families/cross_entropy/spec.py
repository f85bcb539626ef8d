"""cross_entropy's :class:`~tritred_core.ReductionSpec`: what its kernels take (a module of its own: the host
path, the autograd and the public function all need it)."""

from __future__ import annotations

from tritred_core import ReductionSpec

#: Rows in registers (``single_pass``), loops over chunks (``multi_pass``), rows held by several programs meeting
#: at a barrier (``split_rows``, unit-stride rows); no knobs (no tail tile, no persistent grid, no threads per
#: row). Decisions with ``direction="backward"`` are those of the launch that forms the gradient (and of the
#: backward's scale of it), see ``rules.py``.
SPEC = ReductionSpec(name="cross_entropy", family="softmax", mirrors="torch.nn.functional.cross_entropy",
                     summary="log-sum-exp of each row (Milakov & Gimelshein 2018) and the gathered target logit; "
                             "with grad, the gradient formed in the same launch",
                     strategies=("single_pass", "multi_pass", "split_rows"), knobs=())
