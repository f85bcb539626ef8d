"""The specs of softmax, log_softmax and logsumexp (what their kernels take), shared by the public functions,
the autograd functions and the registered torch ops."""

from __future__ import annotations

from tritred_core import Knob, ReductionSpec

from ... import runtime as rt

#: What the kernels take: rows held by several programs (``split`` or ``split_rows``) for softmax and log_softmax;
#: logsumexp's ``split`` splits columns, and its few long rows as columns of one (partials, no barrier: it reads a
#: row once in any strategy). A tail tile on the row single
#: pass, persistent row grids (and a cap on the split rows' grid). The backward kernels (``direction="backward"``)
#: take ``single_pass`` and ``multi_pass``, and ``num_programs`` on rows.
_KNOBS: tuple[Knob, ...] = ("BLOCK_TAIL", "num_programs")
SPECS = {
    "softmax": ReductionSpec(name="softmax", family="softmax", mirrors="torch.softmax",
                             summary="exp(x - max) / sum, single pass or online (Milakov & Gimelshein 2018)",
                             strategies=("single_pass", "multi_pass", "split", "split_rows"), knobs=_KNOBS),
    "log_softmax": ReductionSpec(name="log_softmax", family="softmax", mirrors="torch.log_softmax",
                                 summary="x - max - log(sum(exp(x - max)))",
                                 strategies=("single_pass", "multi_pass", "split", "split_rows"), knobs=_KNOBS),
    "logsumexp": ReductionSpec(name="logsumexp", family="softmax", dtypes=rt.ALL_DTYPES,
                               mirrors="torch.logsumexp", summary="log(sum(exp(x))) over dims, max-shifted",
                               strategies=("single_pass", "multi_pass", "split"), knobs=_KNOBS),
}
