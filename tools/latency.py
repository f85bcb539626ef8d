"""Per-call latency on tiny inputs (host-bound): tritred vs torch eager, median of many calls, CUDA.

Usage: python tools/latency.py   (prints one line per op; wall time per call, synchronizing every 100 calls)
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
import tritred_ops as tr


def per_call_us(fn, n: int = 500) -> float:
    """Median wall time per call over batches of 100 calls (synchronizing after each batch)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(n // 100):
        t = time.perf_counter()
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t) / 100 * 1e6)
    return statistics.median(samples)


def interleaved(ours, eager, rounds: int = 9) -> tuple[float, float]:
    """Both measured in alternation, ``rounds`` times: the host's speed drifts, the ratio of medians does not."""
    a, e = [], []
    for _ in range(rounds):
        a.append(per_call_us(ours))
        e.append(per_call_us(eager))
    return statistics.median(a), statistics.median(e)


def tiny_cases() -> dict:
    """name -> (tritred call, torch eager call) on tiny CUDA inputs (8x1024 fp32, batch_norm 8x16x8x8)."""
    x = torch.randn(8, 1024, device="cuda")
    w, b = torch.randn(1024, device="cuda"), torch.randn(1024, device="cuda")
    xb = torch.randn(8, 16, 8, 8, device="cuda")
    rm, rv, wb, bb = (torch.rand(16, device="cuda") + 0.5 for _ in range(4))
    return {
        "softmax 8x1024": (lambda: tr.softmax(x, -1), lambda: torch.softmax(x, -1)),
        "log_softmax 8x1024": (lambda: tr.log_softmax(x, -1), lambda: torch.log_softmax(x, -1)),
        "logsumexp 8x1024": (lambda: tr.logsumexp(x, -1), lambda: torch.logsumexp(x, -1)),
        "sum 8x1024": (lambda: tr.sum(x, -1), lambda: torch.sum(x, -1)),
        "sum (all) 8x1024": (lambda: tr.sum(x), lambda: torch.sum(x)),
        "mean dim=0 8x1024": (lambda: tr.mean(x, 0), lambda: torch.mean(x, 0)),
        "amax 8x1024": (lambda: tr.amax(x, -1), lambda: torch.amax(x, -1)),
        "max dim 8x1024": (lambda: tr.max(x, -1), lambda: torch.max(x, -1)),
        "var 8x1024": (lambda: tr.var(x, -1), lambda: torch.var(x, -1)),
        "layer_norm 8x1024": (lambda: tr.layer_norm(x, (1024,), w, b), lambda: F.layer_norm(x, (1024,), w, b)),
        "batch_norm train 8x16x8x8": (lambda: tr.batch_norm(xb, rm, rv, wb, bb, True),
                                      lambda: F.batch_norm(xb, rm, rv, wb, bb, True)),
        "batch_norm eval 8x16x8x8": (lambda: tr.batch_norm(xb, rm, rv, wb, bb, False),
                                     lambda: F.batch_norm(xb, rm, rv, wb, bb, False)),
    }


def main() -> None:
    for name, (ours, eager) in tiny_cases().items():
        a, e = interleaved(ours, eager)
        print(f"{name}: tritred {a:.1f} us, eager {e:.1f} us, ratio {a / e:.2f}x")


if __name__ == "__main__":
    main()
