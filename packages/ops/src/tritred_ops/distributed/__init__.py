"""tritred_ops.distributed: reductions whose data is split across processes, built on torch.distributed.

- :func:`sync_batch_norm`: batch_norm over the batches of every process of a group (data parallelism; the function
  behind :class:`tritred_ops.nn.SyncBatchNorm`): one all_gather forward, one all_reduce backward.
- :func:`vocab_parallel_cross_entropy`, :func:`vocab_parallel_log_softmax`, :func:`vocab_parallel_logsumexp`: the
  softmax family over a class dim split across the processes of a group (tensor parallelism, Megatron-LM's
  vocab-parallel cross entropy): two small all_reduces forward, no gather of the logits.

The collectives are torch.distributed's (NCCL for CUDA tensors, gloo for CPU tensors under the Triton interpreter);
the local reductions are tritred's kernels. These functions are eager only: under ``torch.compile`` each runs
eagerly at a graph break (see ``docs/distributed.md``).
"""

from .batch_norm import sync_batch_norm
from .vocab_parallel import vocab_parallel_cross_entropy, vocab_parallel_log_softmax, vocab_parallel_logsumexp

__all__ = ["sync_batch_norm", "vocab_parallel_cross_entropy", "vocab_parallel_log_softmax",
           "vocab_parallel_logsumexp"]
