"""Side-by-side timing of tritred's distributed ops on a group of GPUs (NCCL): SyncBatchNorm against
torch.nn.SyncBatchNorm, vocab-parallel cross entropy against the same algorithm in torch ops (Megatron-LM's).

Run one process per GPU::

    torchrun --nproc-per-node 2 -m tritred_bench.distributed --json dist-h200x2.json

Each case times a training step (forward + backward) per process: CUDA events around ``--rep`` steps after
``--warmup`` steps, a barrier before each provider, the median over ``--rounds`` rounds, the slowest process's
median reported (a collective waits for the slowest). Bytes moved by the collectives are counted by wrapping
torch.distributed's collectives during one step (what each process sends into each collective, summed). Rank 0
prints a markdown table; ``--json`` writes it with the machine's details.

``--backend gloo`` runs it on CPU processes under the Triton interpreter with tiny shapes (``--smoke``): a check of
the code paths, no measurement (torch's SyncBatchNorm refuses CPU tensors: ``n/a``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

#: (name, per-process shape, dtype name) of the SyncBatchNorm cases: ResNet-50 stages, bf16 and fp32.
BN_CASES = [("resnet 56x56", (32, 256, 56, 56), "bfloat16"), ("resnet 14x14", (32, 1024, 14, 14), "bfloat16"),
            ("resnet 7x7", (32, 2048, 7, 7), "bfloat16"), ("resnet 56x56 fp32", (32, 256, 56, 56), "float32")]
#: (name, rows, vocabulary (all processes), dtype name) of the vocab-parallel cross entropy cases.
CE_CASES = [("llama3 8k tokens", 8192, 128256, "bfloat16"), ("32k vocab fp32", 16384, 32000, "float32"),
            ("gpt2 4k tokens", 4096, 50257, "bfloat16")]
SMOKE_BN = [("smoke", (2, 3, 4, 4), "float32")]
SMOKE_CE = [("smoke", 4, 10, "float32")]


class _ByteCounter:
    """Counts the bytes each collective sends while active (a wrapper on torch.distributed's functions)."""

    NAMES = ("all_reduce", "all_gather_single", "all_gather_into_tensor", "all_gather", "_all_gather_base")

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist, self.calls, self.bytes = dist, 0, 0
        self._saved: dict[str, Callable[..., Any]] = {}

    def __enter__(self) -> _ByteCounter:
        for name in self.NAMES:
            real = getattr(self.dist, name, None)
            if real is None:
                continue
            self._saved[name] = real

            def wrap(*args: Any, _real: Callable[..., Any] = real, _name: str = name, **kwargs: Any) -> Any:
                sent = args[0] if _name == "all_reduce" else args[1]
                tensors = sent if isinstance(sent, (list, tuple)) else [sent]
                self.calls += 1
                self.bytes += sum(t.numel() * t.element_size() for t in tensors)
                return _real(*args, **kwargs)

            setattr(self.dist, name, wrap)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, real in self._saved.items():
            setattr(self.dist, name, real)


def _time_steps(step: Callable[[], Any], warmup: int, rep: int, rounds: int, device: Any) -> float:
    """Median over rounds of the mean time of one step, in microseconds, this process."""
    import torch
    import torch.distributed as dist

    for _ in range(warmup):
        step()
    times = []
    for _ in range(rounds):
        dist.barrier()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(rep):
                step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / rep)
        else:
            t0 = time.perf_counter()
            for _ in range(rep):
                step()
            times.append((time.perf_counter() - t0) * 1e6 / rep)
    return statistics.median(times)


def _slowest(us: float, device: Any) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([us], dtype=torch.float64, device=device)
    dist.all_reduce(t, dist.ReduceOp.MAX)
    return float(t.item())


def _bn_providers(shape: tuple[int, ...], dtype: Any, device: Any) -> dict[str, Callable[[], Any] | None]:
    import torch
    import tritred_ops

    fmt = torch.channels_last if len(shape) == 4 else torch.contiguous_format  # (what convolutions give in bf16)
    x = torch.randn(shape, dtype=dtype, device=device).contiguous(memory_format=fmt).requires_grad_()
    dy = torch.randn(shape, dtype=dtype, device=device).contiguous(memory_format=fmt)

    def step_of(mod: torch.nn.Module) -> Callable[[], Any]:
        def step() -> Any:
            x.grad = None
            y = mod(x)
            torch.autograd.backward(y, dy)
            return y, x.grad
        return step

    ours = tritred_ops.nn.SyncBatchNorm(shape[1]).to(device)
    torch_sync = torch.nn.SyncBatchNorm(shape[1]).to(device) if device.type == "cuda" else None
    return {"tritred": step_of(ours), "torch.nn.SyncBatchNorm": step_of(torch_sync) if torch_sync else None}


class _TorchVocabParallelCE:
    """Megatron-LM's vocab-parallel cross entropy in torch ops (its ``_VocabParallelCrossEntropy``): three
    all_reduces (MAX of the row max, SUM of the target logit, SUM of the sum of exponentials), backward local."""

    @staticmethod
    def make() -> Callable[..., Any]:
        import torch
        import torch.distributed as dist

        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, logits: Any, target: Any) -> Any:  # type: ignore[override]
                x = logits.float()
                m = x.max(-1).values
                dist.all_reduce(m, dist.ReduceOp.MAX)
                x = x - m[:, None]
                v = x.shape[-1]
                lo = dist.get_rank() * v  # (equal shards)
                local = target - lo
                mask = (local < 0) | (local >= v)
                local = local.masked_fill(mask, 0)
                pred = x.gather(1, local[:, None])[:, 0].masked_fill(mask, 0.0)
                dist.all_reduce(pred)
                e = x.exp()
                s = e.sum(-1)
                dist.all_reduce(s)
                e.div_(s[:, None])
                ctx.save_for_backward(e, local, mask)
                ctx.dtype = logits.dtype
                return (s.log() - pred).mean()

            @staticmethod
            def backward(ctx: Any, g: Any) -> Any:  # type: ignore[override]
                p, local, mask = ctx.saved_tensors
                p.scatter_add_(1, local[:, None], -(~mask).float()[:, None])
                return (p * (g / p.shape[0])).to(ctx.dtype), None

        return Fn.apply


def _ce_providers(rows: int, vocab: int, dtype: Any, device: Any) -> dict[str, Callable[[], Any] | None]:
    import torch
    import torch.distributed as dist
    from tritred_ops.distributed import vocab_parallel_cross_entropy

    world = dist.get_world_size()
    shard = vocab // world + (1 if dist.get_rank() < vocab % world else 0)
    x = torch.randn(rows, shard, dtype=dtype, device=device).requires_grad_()
    target = torch.randint(0, vocab, (rows,), device=device)
    dist.broadcast(target, 0)
    torch_ce = _TorchVocabParallelCE.make()

    def ours() -> Any:
        x.grad = None
        loss = vocab_parallel_cross_entropy(x, target)
        loss.backward()
        return loss, x.grad

    def theirs() -> Any:
        x.grad = None
        loss = torch_ce(x, target)
        loss.backward()
        return loss, x.grad

    equal = vocab % world == 0
    return {"tritred": ours, "torch ops (Megatron-LM)": theirs if equal else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, few steps (CPU interpreter check)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rep", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.backend == "gloo":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import torch.distributed as dist

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    warmup, rep, rounds = (1, 2, 1) if args.smoke else (args.warmup, args.rep, args.rounds)
    rows: list[dict[str, Any]] = []
    cases: list[tuple[str, str, Callable[[], dict[str, Callable[[], Any] | None]]]] = []
    for name, shape, dt in (SMOKE_BN if args.smoke else BN_CASES):
        cases.append(("SyncBatchNorm", f"{name} {shape} {dt}",
                      functools.partial(_bn_providers, shape, getattr(torch, dt), device)))
    for name, n, v, dt in (SMOKE_CE if args.smoke else CE_CASES):
        cases.append(("vocab-parallel cross_entropy", f"{name} {n}x{v} {dt}",
                      functools.partial(_ce_providers, n, v, getattr(torch, dt), device)))
    for op, case, make in cases:
        ref: list[Any] = []
        for provider, step in make().items():
            row = {"op": op, "case": case, "provider": provider, "world": world, "us_per_step": None,
                   "collectives": None, "bytes_sent": None, "max_diff_vs_tritred": None}
            if step is not None:
                outs = [t.detach().double().clone() for t in step()]  # (compiles, records plans)
                if provider == "tritred":
                    ref = outs
                else:  # the same results as tritred's first (this process's output and input gradient)
                    diff = max(float((a - b).abs().max()) for a, b in zip(outs, ref))
                    row["max_diff_vs_tritred"] = _slowest(diff, device)
                with _ByteCounter() as counter:
                    step()
                row["collectives"], row["bytes_sent"] = counter.calls, counter.bytes
                row["us_per_step"] = _slowest(_time_steps(step, warmup, rep, rounds, device), device)
            rows.append(row)
    if rank == 0:
        print(f"| op | case | provider | us per step ({world} processes) | collectives per step | bytes sent per "
              "process | max abs diff vs tritred |\n|---|---|---|---:|---:|---:|---:|")
        for r in rows:
            us = f"{r['us_per_step']:.1f}" if r["us_per_step"] is not None else "n/a"
            print(f"| {r['op']} | {r['case']} | {r['provider']} | {us} | {r['collectives'] or 'n/a'} | "
                  f"{r['bytes_sent'] if r['bytes_sent'] is not None else 'n/a'} | "
                  f"{'' if r['max_diff_vs_tritred'] is None else format(r['max_diff_vs_tritred'], '.3g')} |")
        if args.json:
            about = {"torch": torch.__version__, "python": platform.python_version(), "backend": args.backend,
                     "world": world, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                     "warmup_rep_rounds": [warmup, rep, rounds], "date": time.strftime("%Y-%m-%d")}
            with open(args.json, "w") as f:
                json.dump({"about": about, "rows": rows}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
