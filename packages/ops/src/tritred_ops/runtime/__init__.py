"""The host machinery of tritred's ops, split by job; no Triton kernels here.

- :mod:`.checks`: torch-compatible argument checks (types, dtypes, devices, dims) with torch's messages;
- :mod:`.view`: the canonical M x N x K view of a call's tensors (and the gathered copy when there is none);
- :mod:`.device`: the :class:`~tritred_core.DeviceInfo` of a torch device, dependent launches, occupancy;
- :mod:`.caches`: the ops state kept per registry (views, configs, plans ...), each kind bounded;
- :mod:`.launch`: the launch decision (:func:`decide`, asking the ``tritred_launch_config`` hook) and grids;
- :mod:`.hints`: per-launch kernel knobs derived from a view and a config (divisibility, shifted tiles, tails);
- :mod:`.replay`: call plans, which replay a call's allocations and launches on the next call with its key;
- :mod:`.autograd`: :func:`apply_function`, an autograd Function's ``apply`` without per-call signature binding;
  :func:`once_differentiable`, a backward whose gradients raise when differentiated again;
  :func:`twice_differentiable`, backward kernels whose gradients under ``create_graph=True`` come from torch's ops;
  :func:`save_for_jvp`, :func:`normalized_product` and :func:`affine_tangent`, for the Functions' forward-mode AD
  (``jvp``) and the norms' backward under ``create_graph``;
  :func:`batch_front` and :func:`batched_dims`, for their ``torch.func.vmap`` rules.

The families (``tritred_ops.families``), the CLI, the bench and third-party plugins import the names below from
here (``tritred_ops.host`` is the short list a plugin needs).
"""

from .autograd import (
    affine_tangent,
    apply_function,
    batch_front,
    batched_dims,
    normalized_product,
    once_differentiable,
    save_for_jvp,
    twice_differentiable,
)
from .checks import (
    ALL_DTYPES,
    FLOATS,
    INTEGERS,
    SCALAR_TYPE_NAMES,
    UNSET,
    Unset,
    as_index,
    check_float,
    check_keepdim,
    check_runnable,
    check_same_device,
    check_supported,
    check_tensor,
    dim_list,
    dtype_name,
    float_arg,
    grad_needed,
    interpreting,
    reduced_shape,
    scalar_of,
    torch_accepts,
    unit_stride,
    warn,
    wrap_dim,
    wrap_dims,
)
from .device import dependent_launch, device_info, programs_per_sm, resident_programs
from .hints import (
    UNROLL_CHUNK_PER_THREAD,
    UNROLL_CHUNKS,
    UNROLL_PER_THREAD,
    col_hint,
    even_rows,
    hint_covers_align,
    no_row_threads,
    no_tail,
    pow2_divisor,
    row_align,
    row_align_out,
    row_cols,
    row_hint,
    single_tail,
    unrolled_chunks,
)
from .launch import (
    cdiv,
    combine_blocks,
    decide,
    launch_config,
    launch_split_rows,
    next_pow2,
    problem_of,
    prod,
    row_programs,
    slices,
    split_plan,
    split_row_chunks,
)
from .replay import Plan, Recorder, find_plan, tensor_key
from .view import (
    View,
    canonical_view,
    dim_groups,
    gathering,
    map_view,
    out_strides,
    rows_layout,
    view_of_groups,
)

__all__ = [
    "ALL_DTYPES",
    "FLOATS",
    "INTEGERS",
    "SCALAR_TYPE_NAMES",
    "UNROLL_CHUNKS",
    "UNROLL_CHUNK_PER_THREAD",
    "UNROLL_PER_THREAD",
    "UNSET",
    "Plan",
    "Recorder",
    "Unset",
    "View",
    "affine_tangent",
    "apply_function",
    "as_index",
    "batch_front",
    "batched_dims",
    "canonical_view",
    "cdiv",
    "check_float",
    "check_keepdim",
    "check_runnable",
    "check_same_device",
    "check_supported",
    "check_tensor",
    "col_hint",
    "combine_blocks",
    "decide",
    "dependent_launch",
    "device_info",
    "dim_groups",
    "dim_list",
    "dtype_name",
    "even_rows",
    "find_plan",
    "float_arg",
    "gathering",
    "grad_needed",
    "hint_covers_align",
    "interpreting",
    "launch_config",
    "launch_split_rows",
    "map_view",
    "next_pow2",
    "no_row_threads",
    "no_tail",
    "normalized_product",
    "once_differentiable",
    "out_strides",
    "pow2_divisor",
    "problem_of",
    "prod",
    "programs_per_sm",
    "reduced_shape",
    "resident_programs",
    "row_align",
    "row_align_out",
    "row_cols",
    "row_hint",
    "row_programs",
    "rows_layout",
    "save_for_jvp",
    "scalar_of",
    "single_tail",
    "slices",
    "split_plan",
    "split_row_chunks",
    "tensor_key",
    "torch_accepts",
    "twice_differentiable",
    "unit_stride",
    "unrolled_chunks",
    "view_of_groups",
    "warn",
    "wrap_dim",
    "wrap_dims",
]
