"""tritred_ops.nn: torch.nn modules whose computations run in tritred's kernels (one import per module)."""

from .sync_batch_norm import SyncBatchNorm as SyncBatchNorm
