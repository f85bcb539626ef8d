"""Small models written once, with a switch between torch's ops and tritred's: the training tests' and the
training-step benchmark's workloads.

- :class:`GPT`: token + position embeddings, pre-norm blocks (``norm -> causal softmax attention -> residual``,
  ``norm -> MLP -> residual``; the attention written with matmuls and a softmax), a final norm, a linear head and
  a cross-entropy loss over the vocabulary. ``GPTConfig.norm`` picks LayerNorm or RMSNorm.
- :class:`ConvNet`: ``conv -> BatchNorm2d -> relu`` twice, a mean pool over the image, a linear head and a
  cross-entropy loss (with label smoothing).

The switch is a :class:`Backend`: the classes of the modules that carry a reduction (``LayerNorm``, ``RMSNorm``,
``BatchNorm2d``, ``Softmax``, ``CrossEntropyLoss``: the torch.nn classes that ``tritred_ops.nn`` mirrors) and
the pooling mean. ``"torch"`` builds with torch.nn's classes and ``torch.mean``; ``"tritred"`` with
:mod:`tritred_ops.nn`'s subclasses of them (same constructor, same parameters and buffers, same ``state_dict``;
their forward calls tritred's functional ops) and ``tritred_ops.mean``. Both build the same parameters from the
same seed::

    torch.manual_seed(0); ref = GPT(GPTConfig(), "torch")
    torch.manual_seed(0); tri = GPT(GPTConfig(), "tritred")      # ref.state_dict() == tri.state_dict()
    loss = tri(tokens[:, :-1], tokens[:, 1:]); loss.backward()

A model one did not write (a transformers BERT, a torchvision ResNet) reaches tritred through
``tritred_ops.patch(model)`` or ``tritred_ops.enable()``: :data:`VARIANTS`.

Import this module after the device is chosen: it imports ``tritred_ops``, which needs ``TRITON_INTERPRET=1``
set first on a machine without a GPU (:func:`tritred_bench.select_device` does that).

:data:`VARIANTS` names the ways a torch-built model reaches tritred (``"patched"``: ``tritred_ops.patch``;
``"enabled"``: the model run inside ``tritred_ops.enable()``); :func:`variant_available` says which of them run
on a device.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import tritred_ops
from torch import nn
from torch.nn import functional as F
from tritred_ops import nn as tritred_nn

# -- the switch -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Backend:
    """The module classes (and the pooling mean) a model is built with."""

    name: str
    layer_norm: type[nn.LayerNorm]
    rms_norm: type[nn.RMSNorm]
    batch_norm2d: type[nn.BatchNorm2d]
    softmax: type[nn.Softmax]
    cross_entropy: type[nn.CrossEntropyLoss]
    mean: Callable[..., torch.Tensor]


BACKENDS: dict[str, Backend] = {
    "torch": Backend("torch", nn.LayerNorm, nn.RMSNorm, nn.BatchNorm2d, nn.Softmax, nn.CrossEntropyLoss,
                     torch.mean),
    "tritred": Backend("tritred", tritred_nn.LayerNorm, tritred_nn.RMSNorm, tritred_nn.BatchNorm2d,
                       tritred_nn.Softmax, tritred_nn.CrossEntropyLoss, tritred_ops.mean),
}

#: The ways a model reaches tritred: ``torch`` (not at all), ``tritred`` (built with the backend above: the
#: functional ops), ``patched`` (built with torch, then ``tritred_ops.patch(model)``), ``enabled`` (built with
#: torch, run inside ``tritred_ops.enable()``: CUDA tensors only).
VARIANTS: tuple[str, ...] = ("torch", "tritred", "patched", "enabled")


def variant_available(variant: str, device: torch.device | str = "cpu") -> bool:
    """Whether ``variant`` runs on ``device``: every one does but ``enabled`` on a CPU without the Triton
    interpreter (the aten override takes CUDA tensors, and CPU ones only under the interpreter:
    ``enable(device="cpu")``). Raises ValueError for a name not in :data:`VARIANTS`."""
    if variant in ("torch", "tritred", "patched"):
        return True
    if variant == "enabled":
        kind = torch.device(device).type
        return kind == "cuda" or (kind == "cpu" and _interpreting())
    raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")


def build_variant(make: Callable[[str], nn.Module], variant: str,
                  device: torch.device | str = "cuda") -> tuple[nn.Module, contextlib.AbstractContextManager[Any]]:
    """``(model, context)``: the model ``make(backend_name)`` builds, prepared for ``variant``, and the context to
    run its steps in (``tritred_ops.enable(device=...)`` for ``enabled``: the dispatch key of ``device``'s type,
    else a null context)."""
    if variant in BACKENDS:
        return make(variant), contextlib.nullcontext()
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    model = make("torch")
    if variant == "patched":
        return tritred_ops.patch(model), contextlib.nullcontext()
    return model, _enabled(torch.device(device).type)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@contextlib.contextmanager
def _enabled(device_type: str) -> Iterator[None]:
    """``tritred_ops.enable()`` from entering to leaving (not from the call: ``enable()`` may switch at once)."""
    with tritred_ops.enable(device=device_type):
        yield


def backend(name: str | Backend) -> Backend:
    """``BACKENDS[name]`` (a :class:`Backend` passes through)."""
    if isinstance(name, Backend):
        return name
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; expected one of {sorted(BACKENDS)}") from None


# -- GPT --------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GPTConfig:
    """Sizes of :class:`GPT`. The defaults are the CPU tests' (seconds under the interpreter)."""

    vocab: int = 97
    d_model: int = 32
    heads: int = 2
    layers: int = 2
    max_seq: int = 8
    mlp_ratio: int = 4
    norm: Literal["layer_norm", "rms_norm"] = "layer_norm"
    eps: float = 1e-5


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: ``softmax(q k^T / sqrt(d) + causal mask) v`` with matmuls and the
    backend's softmax over the last dim."""

    def __init__(self, cfg: GPTConfig, be: Backend) -> None:
        super().__init__()
        if cfg.d_model % cfg.heads:
            raise ValueError(f"d_model {cfg.d_model} is not a multiple of heads {cfg.heads}")
        self.heads = cfg.heads
        # No bias on q, k, v: the key bias's gradient is zero in exact arithmetic (softmax is invariant to a shift
        # of a row, and q . b_k shifts each row), so an optimizer that normalizes updates (Adam) turns two runs'
        # different rounding noise there into updates of +-lr: runs that cannot be compared.
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.softmax = be.softmax(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)  # each [B, H, T, D]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)  # (not a sliced buffer: a slice
        scores = scores.masked_fill(future, float("-inf"))                     # specializes T under compile)
        att = self.softmax(scores)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    """A pre-norm transformer block."""

    def __init__(self, cfg: GPTConfig, be: Backend) -> None:
        super().__init__()
        self.norm1 = _norm(cfg, be)
        self.attn = CausalSelfAttention(cfg, be)
        self.norm2 = _norm(cfg, be)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model), nn.GELU(),
                                 nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def _norm(cfg: GPTConfig, be: Backend) -> nn.Module:
    if cfg.norm == "layer_norm":
        return be.layer_norm(cfg.d_model, eps=cfg.eps)
    if cfg.norm == "rms_norm":
        return be.rms_norm(cfg.d_model, eps=cfg.eps)
    raise ValueError(f"unknown norm {cfg.norm!r}")


class GPT(nn.Module):
    """A small GPT-style language model. ``forward(idx, targets)``: ``idx`` and ``targets`` are ``[B, T]`` int64
    token ids (targets may hold ``-100``: ignored); returns the mean cross-entropy loss (a 0-d tensor)."""

    def __init__(self, cfg: GPTConfig, be: str | Backend = "torch") -> None:
        super().__init__()
        be = backend(be)
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, be) for _ in range(cfg.layers))
        self.norm = _norm(cfg, be)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.loss = be.cross_entropy()

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return self.loss(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gpt_batch(cfg: GPTConfig, batch: int, seq: int | None = None, device: torch.device | str = "cpu",
              seed: int = 0, ignored: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``(idx, targets)``: random token ids ``[batch, seq]`` and the next tokens, with the last ``ignored`` targets
    of the first sequence set to -100 (cross_entropy's ignore_index)."""
    seq = cfg.max_seq if seq is None else seq
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(cfg.vocab, (batch, seq + 1), generator=g)
    idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    if ignored:
        targets[0, -ignored:] = -100
    return idx.to(device), targets.to(device)


# -- CNN --------------------------------------------------------------------------------------------------------

class ConvNet(nn.Module):
    """``conv3x3 -> BatchNorm2d -> relu -> conv3x3 (stride 2) -> BatchNorm2d -> relu -> mean over H, W -> linear``
    and a cross-entropy loss with label smoothing. ``forward(images, labels)``: ``[B, C, H, W]`` floating and
    ``[B]`` int64; returns the loss (0-d)."""

    def __init__(self, be: str | Backend = "torch", channels: Sequence[int] = (3, 8, 16), classes: int = 10,
                 label_smoothing: float = 0.1) -> None:
        super().__init__()
        be = backend(be)
        c0, c1, c2 = channels
        self.conv1 = nn.Conv2d(c0, c1, 3, padding=1, bias=False)
        self.bn1 = be.batch_norm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, stride=2, padding=1, bias=False)
        self.bn2 = be.batch_norm2d(c2)
        self.head = nn.Linear(c2, classes)
        self.loss = be.cross_entropy(label_smoothing=label_smoothing)
        self._mean = be.mean

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(images)))
        h = F.relu(self.bn2(self.conv2(h)))
        return self.head(self._mean(h, (2, 3)))

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss(self.logits(images), labels)


def image_batch(batch: int = 2, channels: int = 3, size: int = 8, classes: int = 10,
                device: torch.device | str = "cpu", seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(images, labels)``: ``[batch, channels, size, size]`` float32 N(0, 1) and ``[batch]`` int64 labels."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, channels, size, size, generator=g)
    labels = torch.randint(classes, (batch,), generator=g)
    return images.to(device), labels.to(device)


# -- training ---------------------------------------------------------------------------------------------------

def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer,
                batches: Sequence[tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
    """One optimizer step per batch (``zero_grad``, ``loss = model(*batch)``, ``backward``, ``step``); returns the
    losses, detached (no host synchronization)."""
    losses = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = model(*batch)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return losses
