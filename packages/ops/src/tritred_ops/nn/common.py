"""What tritred's modules share: whether tritred's kernels take a call, and the logged fallback to torch's forward.

A module's forward asks :func:`refusal` first. ``None`` means tritred runs the call; a string is the reason it
does not, and the module runs its torch class's own forward instead (:func:`log_fallback` logs the reason at DEBUG
on the ``"tritred"`` logger): tensors that are not plain tensors (``__torch_function__`` subclasses such as
DTensor, ``torch.fx`` proxies), devices tritred does not run on (not CUDA; the CPU only under Triton's
interpreter; meta), dtypes it has no kernel for, tensors on other devices than the input (torch then raises its own
error), parameters or buffers batched by ``torch.func.vmap`` (model ensembling with ``stack_module_state``) and,
for ops that torch's autocast recasts, calls under ``torch.autocast`` (tritred's ops are not autocast ops: torch's
forward keeps autocast's dtype policy exactly).
"""

from __future__ import annotations

import logging

import torch

from ..runtime import FLOATS, interpreting

logger = logging.getLogger("tritred")

#: Tensor types tritred takes as they are (a Parameter is a plain tensor with autograd metadata).
PLAIN = (torch.Tensor, torch.nn.Parameter)
#: Whether CPU tensors run (Triton's interpreter): fixed when triton is imported, as ``@triton.jit`` reads it then.
CPU_RUNS = interpreting()


def refusal(input: object, *others: object, dtypes: tuple[torch.dtype, ...] = FLOATS,
            autocast: bool = True) -> str | None:
    """Why tritred does not take a call of ``input`` with the tensors ``others`` (None entries are skipped), or None
    when it does. ``dtypes``: the input dtypes the op has kernels for; ``autocast``: whether torch's autocast
    recasts the torch op the module calls (then an autocast region is a refusal)."""
    if type(input) not in PLAIN:
        return f"the input is a {type(input).__name__}, not a plain tensor"
    assert isinstance(input, torch.Tensor)
    device = input.device
    if device.type != "cuda" and not (device.type == "cpu" and CPU_RUNS):
        return f"the input is on {device} (tritred runs on CUDA, on the CPU only under TRITON_INTERPRET=1)"
    if input.dtype not in dtypes:
        return f"no kernel for {input.dtype} inputs"
    transforms = torch._C._are_functorch_transforms_active()
    for t in others:
        if t is None:
            continue
        if type(t) not in PLAIN:
            return f"an argument is a {type(t).__name__}, not a plain tensor"
        assert isinstance(t, torch.Tensor)
        if t.device != device:
            return f"an argument is on {t.device}, the input on {device}"
        if transforms and _batched(t):
            return "a parameter or buffer is batched by torch.func.vmap (model ensembling): torch's forward batches it"
    if autocast and torch.is_autocast_enabled(device.type):
        return f"torch.autocast is on for {device.type} (torch's forward applies its dtype policy)"
    return None


def _batched(t: torch.Tensor) -> bool:
    """Whether ``t`` is batched by a torch.func.vmap level (under any grad or functionalization wrappers): a
    module's own parameters are, with ``stack_module_state`` and ``vmap(functional_call)``. tritred's ops batch
    the input only (their vmap rules refuse a batched weight)."""
    functorch = torch._C._functorch
    while True:
        if functorch.is_batchedtensor(t):
            return True
        if not (functorch.is_gradtrackingtensor(t) or functorch.is_functionaltensor(t)):
            return False
        t = functorch.get_unwrapped(t)


def log_fallback(module: torch.nn.Module, reason: str) -> None:
    """Log at DEBUG that ``module`` runs its torch class's forward, and why (not while dynamo traces: a logging
    call would break the graph)."""
    if not torch.compiler.is_compiling() and logger.isEnabledFor(logging.DEBUG):
        logger.debug("tritred_ops.nn: %s runs torch's forward: %s", type(module).__name__, reason)
