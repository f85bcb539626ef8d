"""Training-step time of whole models, side by side: torch eager, tritred, torch.compile.

One training step is ``zero_grad -> loss = model(batch) -> loss.backward() -> optimizer.step()`` (AdamW, fused on
CUDA). Each mode builds the same model from the same seed and runs warm-up steps (compilation happens there), then
``steps`` timed steps; the median milliseconds per step, the throughput, the peak memory of the steps and the
first loss (a sanity column: every mode trains the same model on the same batch) are reported.

Modes (:data:`MODES`):

- ``torch``: the model built with torch's modules, eager.
- ``tritred``: the model built with tritred's functional ops (``tritred_bench.models``: LayerNorm/RMSNorm,
  the attention softmax, BatchNorm2d, CrossEntropyLoss and the CNN's mean pool), eager.
- ``tritred-compile``: ``torch.compile`` of the ``tritred`` model (tritred's registered ops inside the graph).
- ``torch-compile``: ``torch.compile`` of the ``torch`` model.
- ``patched``, ``compiled-patched``: the ``torch`` model after ``tritred_ops.patch(model)``, eager and compiled;
  ``enabled``: the ``torch`` model run inside ``tritred_ops.enable()`` (CUDA tensors; on the CPU only under the
  Triton interpreter: elsewhere its row says so instead of a time).

Models (:data:`MODELS`): ``gpt`` (d_model 1024, 16 heads, 8 layers, vocabulary 32000, sequence 1024, batch 8),
``resnet18`` (torchvision's, batch 64 at 224x224, 1000 classes; needs torchvision), ``cnn`` (the small CNN of the
tests, batch 64 at 32x32). bf16 by default (``--dtype``). ``--quick``: tiny sizes and one step, for a CPU (the
interpreter: the numbers mean nothing there, the machinery runs). On the GPU::

    python -m tritred_bench.model_step                                  # gpt and resnet18, every mode
    python -m tritred_bench.model_step --model gpt --modes torch,tritred,torch-compile --steps 20
    python -m tritred_bench.model_step --json model-step.json

From Python: :func:`measure` returns :class:`StepResult` rows; :func:`format_table` prints them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .timing import device_name, select_device, sync

#: Mode -> (what the model is built with: a ``tritred_bench.models.VARIANTS`` name, torch.compile it).
MODES: dict[str, tuple[str, bool]] = {
    "torch": ("torch", False),
    "tritred": ("tritred", False),
    "patched": ("patched", False),
    "enabled": ("enabled", False),
    "tritred-compile": ("tritred", True),
    "compiled-patched": ("patched", True),
    "torch-compile": ("torch", True),
}
#: The start of a row's message when its mode does not run on the device (not a failure).
NOT_ON_DEVICE = "not on this device"
MODELS: tuple[str, ...] = ("gpt", "resnet18", "cnn")


@dataclass
class StepResult:
    """One (model, mode): median ms per step over ``steps`` timed steps (None: not run, see ``message``)."""

    model: str
    mode: str
    ms: float | None = None
    items_per_s: float | None = None  # tokens (gpt) or images per second
    peak_gib: float | None = None
    first_loss: float | None = None
    steps: int = 0
    message: str = ""


@dataclass(frozen=True)
class Workload:
    """A model family at one size: ``make(variant)`` builds the module (its forward returns the loss) and
    ``batch()`` the inputs of one step; ``items``: tokens or images per step."""

    name: str
    make: Callable[[str], nn.Module]
    batch: Callable[[], tuple[torch.Tensor, ...]]
    items: int


def workload(name: str, device: torch.device, dtype: torch.dtype, quick: bool = False) -> Workload:
    """The ``gpt``, ``resnet18`` or ``cnn`` workload on ``device`` in ``dtype`` (``quick``: tiny sizes)."""
    from . import models as M  # imports tritred_ops: after select_device

    if name == "gpt":
        cfg = M.GPTConfig(vocab=97, d_model=32, heads=2, layers=2, max_seq=8) if quick else M.GPTConfig(
            vocab=32000, d_model=1024, heads=16, layers=8, max_seq=1024)
        batch = 2 if quick else 8
        idx, targets = M.gpt_batch(cfg, batch, device=device, ignored=0)
        return Workload("gpt", lambda be: M.GPT(cfg, be), lambda: (idx, targets), batch * cfg.max_seq)
    if name == "cnn":
        n, size = (2, 8) if quick else (64, 32)
        images, labels = M.image_batch(n, size=size, device=device)
        images = images.to(dtype)
        return Workload("cnn", lambda be: M.ConvNet(be), lambda: (images, labels), n)
    if name == "resnet18":
        try:
            import torchvision  # type: ignore[import-not-found, unused-ignore]
        except ImportError as e:
            raise RuntimeError("resnet18 needs torchvision") from e
        n, size, classes = (2, 32, 10) if quick else (64, 224, 1000)
        g = torch.Generator().manual_seed(0)
        images = torch.randn(n, 3, size, size, generator=g).to(device, dtype)
        labels = torch.randint(classes, (n,), generator=g).to(device)

        def make(be: str) -> nn.Module:
            model = _Classifier(torchvision.models.resnet18(weights=None, num_classes=classes))
            if be == "tritred":
                M.tritred_ops.patch(model)  # BatchNorm2d and CrossEntropyLoss to tritred's, in place
            return model

        return Workload("resnet18", make, lambda: (images, labels), n)
    raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")


class _Classifier(nn.Module):
    """An image classifier and a cross-entropy loss module: ``forward(images, labels) -> loss``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.loss = nn.CrossEntropyLoss()

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.loss(self.net(images), labels)


def mode_available(mode: str, device: torch.device) -> str:
    """"" when ``mode`` runs on ``device``, else why not."""
    from . import models as M

    if mode not in MODES:
        return f"unknown mode {mode!r}; expected one of {list(MODES)}"
    if not M.variant_available(MODES[mode][0], device):
        return f"{NOT_ON_DEVICE}: {mode} takes CUDA tensors (CPU ones only under the Triton interpreter)"
    return ""


def _build(work: Workload, mode: str, device: torch.device, dtype: torch.dtype,
           backend: str) -> tuple[nn.Module, Callable[..., torch.Tensor], contextlib.AbstractContextManager[Any]]:
    from . import models as M

    variant, compiled = MODES[mode]
    torch.manual_seed(0)
    if variant in ("patched", "enabled"):
        model, context = M.build_variant(work.make, variant, device)
    else:
        model, context = work.make(variant), contextlib.nullcontext()
    model = model.to(device, dtype).train()
    fn: Callable[..., torch.Tensor] = torch.compile(model, backend=backend) if compiled else model
    return model, fn, context


def run_mode(work: Workload, mode: str, device: torch.device, dtype: torch.dtype, steps: int, warmup: int,
             backend: str) -> StepResult:
    """Time ``steps`` training steps of ``work`` in ``mode`` after ``warmup`` steps."""
    res = StepResult(work.name, mode)
    why = mode_available(mode, device)
    if why:
        res.message = why
        return res
    torch._dynamo.reset()
    model, fn, context = _build(work, mode, device, dtype, backend)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    batch = work.batch()

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = fn(*batch)
        loss.backward()
        opt.step()
        return loss.detach()

    times: list[float] = []
    with context:
        first = step()
        res.first_loss = float(first)
        for _ in range(max(warmup - 1, 0)):
            step()
        sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        for _ in range(steps):
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                step()
                times.append(1e3 * (time.perf_counter() - t0))
        if device.type == "cuda":
            res.peak_gib = (torch.cuda.max_memory_allocated(device) - base) / 2**30
    res.ms, res.steps = statistics.median(times), len(times)
    res.items_per_s = work.items / (res.ms / 1e3)
    return res  # the model, its optimizer and the compiled function go with this frame


def measure(models: Sequence[str] = ("gpt", "resnet18"), modes: Sequence[str] | None = None,
            device: str | torch.device | None = None, dtype: torch.dtype = torch.bfloat16, steps: int = 10,
            warmup: int = 3, quick: bool = False, backend: str | None = None) -> list[StepResult]:
    """Training-step times of ``models`` x ``modes`` (default: every mode). A mode or model that fails (or is
    unavailable) gets a row with its message instead of a time. ``backend``: torch.compile's (default inductor on
    CUDA, aot_eager on a CPU, where the kernels run in Triton's interpreter)."""
    dev = select_device(device)
    if quick:
        steps, warmup = min(steps, 1), min(warmup, 1)
    backend = backend or ("inductor" if dev.type == "cuda" else "aot_eager")
    rows: list[StepResult] = []
    for name in models:
        try:
            work = workload(name, dev, dtype, quick)
        except Exception as e:  # e.g. resnet18 without torchvision
            rows += [StepResult(name, m, message=f"{type(e).__name__}: {e}") for m in modes or MODES]
            continue
        for mode in modes or MODES:
            try:
                rows.append(run_mode(work, mode, dev, dtype, steps, warmup, backend))
            except Exception as e:
                rows.append(StepResult(name, mode, message=f"{type(e).__name__}: {e}"[:300]))
            gc.collect()  # the last mode's model and optimizer state, before the next one allocates
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def format_table(rows: Sequence[StepResult]) -> str:
    """A plain-text table: per model, each mode's ms per step, its speed against ``torch`` eager, the
    throughput, the peak memory of a step and the first loss."""
    head = f"{'model':<9} {'mode':<17} {'ms/step':>9} {'vs torch':>8} {'items/s':>11} {'peak GiB':>8} {'loss[0]':>9}"
    lines = [head, "-" * len(head)]
    eager = {r.model: r.ms for r in rows if r.mode == "torch" and r.ms}
    for r in rows:
        if r.ms is None:
            lines.append(f"{r.model:<9} {r.mode:<17} {'-':>9}  {r.message}")
            continue
        ratio = f"{eager[r.model] / r.ms:.2f}x" if r.model in eager else "-"
        peak = f"{r.peak_gib:.2f}" if r.peak_gib is not None else "-"
        lines.append(f"{r.model:<9} {r.mode:<17} {r.ms:>9.2f} {ratio:>8} {r.items_per_s:>11.0f} {peak:>8} "
                     f"{r.first_loss:>9.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tritred_bench.model_step", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt,resnet18", help=f"comma-separated, of {','.join(MODELS)}")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated (default: all)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--backend", default=None, help="torch.compile backend (default: inductor on CUDA)")
    p.add_argument("--device", default=None)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one step (checks the machinery)")
    p.add_argument("--json", default=None, help="write the rows to this JSON file")
    a = p.parse_args(argv)
    rows = measure(a.model.split(","), a.modes.split(","), a.device, getattr(torch, a.dtype), a.steps, a.warmup,
                   a.quick, a.backend)
    dev = select_device(a.device)
    print(f"device: {device_name(dev)}; dtype {a.dtype}; torch {torch.__version__}")
    print(format_table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": device_name(dev), "dtype": a.dtype, "torch": torch.__version__,
                       "rows": [dataclasses.asdict(r) for r in rows]}, f, indent=1)
    return 0 if all(r.ms is not None or r.message.startswith(NOT_ON_DEVICE) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
