"""tritred_ops.nn: torch.nn modules whose computations run in tritred's kernels (one import per module)."""

from .activation import LogSoftmax as LogSoftmax
from .activation import Softmax as Softmax
from .loss import CrossEntropyLoss as CrossEntropyLoss
from .normalization import BatchNorm1d as BatchNorm1d
from .normalization import BatchNorm2d as BatchNorm2d
from .normalization import BatchNorm3d as BatchNorm3d
from .normalization import LayerNorm as LayerNorm
from .normalization import RMSNorm as RMSNorm
from .sync_batch_norm import SyncBatchNorm as SyncBatchNorm
