"""The checks of tritred's distributed ops, run inside each process of a group (test_distributed.py starts them).

Every process builds the same global tensors from one seed (the concatenated global batch for SyncBatchNorm, the
gathered logits for the vocab-parallel ops), takes its own part, runs tritred's distributed op, and compares its
part of the result and of the gradients with the single-device op on the global tensors (float64 references).
A check is one function; a suite (``w2``, ``w4``, ``nccl2``) is the list of checks that one group of processes runs
one after another on one process group. A failing check ends the process (its peers then fail in their next
collective instead of waiting): what follows it is reported as not run.

As a script (the NCCL run: one process per GPU, no interpreter)::

    python dist_checks.py RANK WORLD INIT_FILE OUT_DIR SUITE SEED nccl
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

CHECKS: dict[str, tuple[tuple[str, ...], Callable[[Ctx], None]]] = {}


@dataclass
class Ctx:
    rank: int
    world: int
    device: torch.device
    seed: int

    def gen(self, salt: int) -> torch.Generator:
        """The generator every process shares for one check (the same global tensors everywhere)."""
        return torch.Generator().manual_seed(self.seed * 1000 + salt)


def check(*suites: str) -> Callable[[Callable[[Ctx], None]], Callable[[Ctx], None]]:
    def register(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        CHECKS[fn.__name__] = (suites, fn)
        return fn
    return register


def suite(name: str) -> list[str]:
    return [n for n, (suites, _) in CHECKS.items() if name in suites]


def close(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str) -> None:
    """``out`` vs the float64 ``ref``: same shape, NaN and inf at the same places, the rest within
    ``tol * (1 + |ref|)``."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    o, r = out.detach().double().cpu(), ref.detach().double().cpu()
    assert torch.equal(o.isnan(), r.isnan()), f"{what}: NaN at other places\n{o}\n{r}"
    fin = r.isfinite()
    assert torch.equal(o[~fin & ~r.isnan()], r[~fin & ~r.isnan()]), f"{what}: inf differs"
    err = ((o - r).abs() / (1 + r.abs()))[fin]
    assert err.numel() == 0 or err.max() <= tol, f"{what}: max error {err.max():.3g} > {tol:g}\n{o}\n{r}"


def all_sum(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().clone()
    dist.all_reduce(t)
    return t


def same_everywhere(t: torch.Tensor, what: str) -> None:
    """``t`` bit for bit equal on every process."""
    out = torch.empty(dist.get_world_size() * t.numel(), dtype=t.dtype, device=t.device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, t.detach().contiguous().reshape(-1))
    parts = out.view(dist.get_world_size(), -1)
    assert all(torch.equal(parts[0], p) for p in parts), f"{what}: differs between processes"


# -- SyncBatchNorm ------------------------------------------------------------------------------------------------

def _bn_step(ctx: Ctx, sizes: list[int], shape: tuple[int, ...], dtype: torch.dtype, *, steps: int = 2,
             momentum: float | None = 0.1, affine: bool = True, track: bool = True, channels_last: bool = False,
             input_grad: bool = True, group: object = None, salt: int = 0) -> None:
    """``steps`` training steps of tritred's SyncBatchNorm on this process's part of a global batch (``sizes``:
    every process's batch size) against torch's BatchNorm in float64 on the whole batch: outputs, input
    gradients, the weight and bias gradients summed over processes, the running statistics (the same bits on
    every process)."""
    import tritred_ops

    C = shape[0]
    tol = {torch.float64: 1e-10, torch.float32: 2e-5, torch.bfloat16: 3e-2}[dtype]
    g = ctx.gen(salt)
    mod = tritred_ops.nn.SyncBatchNorm(C, momentum=momentum, affine=affine, track_running_stats=track,
                                       process_group=group).to(ctx.device, dtype)
    ref = torch.nn.BatchNorm1d(C, momentum=momentum, affine=affine, track_running_stats=track).double()
    if affine:
        with torch.no_grad():
            for p, q in ((mod.weight, ref.weight), (mod.bias, ref.bias)):
                v = torch.randn(C, generator=g, dtype=torch.float64)
                p.copy_(v)
                q.copy_(v)
    lo, hi = sum(sizes[: ctx.rank]), sum(sizes[: ctx.rank + 1])
    for step in range(steps):
        full = (torch.randn(sum(sizes), *shape, generator=g, dtype=torch.float64) * 2 + 1.5).to(dtype).double()
        dy_full = torch.randn(full.shape, generator=g, dtype=torch.float64)
        xr = full.clone().requires_grad_(input_grad)
        yr = ref(xr.reshape(sum(sizes), C, -1))
        (yr * dy_full.reshape(yr.shape)).sum().backward()
        x = full[lo:hi].to(ctx.device, dtype)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        x.requires_grad_(input_grad)
        y = mod(x)
        (y * dy_full[lo:hi].to(ctx.device, dtype)).sum().backward()
        close(y, yr.reshape(full.shape)[lo:hi], tol, f"step {step}: y")
        if input_grad:
            close(x.grad, xr.grad[lo:hi], tol, f"step {step}: grad_input")
        if affine:
            close(all_sum(mod.weight.grad), ref.weight.grad, tol, f"step {step}: grad_weight summed")
            close(all_sum(mod.bias.grad), ref.bias.grad, tol, f"step {step}: grad_bias summed")
        if track:
            close(mod.running_mean, ref.running_mean, tol, f"step {step}: running_mean")
            close(mod.running_var, ref.running_var, tol, f"step {step}: running_var")
            same_everywhere(mod.running_var, "running_var")
            assert int(mod.num_batches_tracked) == step + 1
        for m in (mod, ref):
            m.zero_grad()


@check("w2", "nccl2")
def bn_uneven_nchw_float64(ctx: Ctx) -> None:
    _bn_step(ctx, [3, 2, 1, 2][: ctx.world], (3, 4, 3), torch.float64)


@check("w2", "nccl2")
def bn_channels_last_float32_momentum_none(ctx: Ctx) -> None:
    _bn_step(ctx, [2, 1, 3, 2][: ctx.world], (5, 3, 2), torch.float32, momentum=None, channels_last=True, salt=1)


@check("w2")
def bn_2d_no_affine_no_running_stats(ctx: Ctx) -> None:
    _bn_step(ctx, [4, 3], (3,), torch.float64, affine=False, track=False, steps=1, salt=2)


@check("w2")
def bn_weight_gradients_only_explicit_group(ctx: Ctx) -> None:
    group = dist.new_group(list(range(ctx.world)))
    _bn_step(ctx, [2, 3], (2, 5), torch.float64, input_grad=False, steps=1, group=group, salt=3)


@check("w4", "nccl2")
def bn_empty_rank(ctx: Ctx) -> None:
    _bn_step(ctx, [2, 3, 0, 1][: ctx.world] if ctx.world == 4 else [3, 0], (3, 2), torch.float64, salt=4)


@check("w4")
def bn_2d_one_value_per_channel_ranks(ctx: Ctx) -> None:
    _bn_step(ctx, [1, 2, 1, 3], (4,), torch.float32, salt=5)  # (torch's local batch_norm would refuse ranks 0, 2)


@check("w2")
def bn_eval_and_single_process_groups(ctx: Ctx) -> None:
    """Eval mode, and a group of one process: batch_norm with the running (or local) statistics, no collective."""
    import tritred_ops

    groups = [dist.new_group([r]) for r in range(ctx.world)]  # (every process creates every group)
    g = ctx.gen(6)
    x = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    for mode in ("eval", "one process"):
        mod = tritred_ops.nn.SyncBatchNorm(4, process_group=groups[ctx.rank]).double()
        with torch.no_grad():
            mod.running_mean.copy_(torch.randn(4, generator=g))
            mod.running_var.copy_(torch.rand(4, generator=g) + 0.5)
            mod.weight.copy_(torch.randn(4, generator=g))
        rm, rv = mod.running_mean.clone(), mod.running_var.clone()
        mod.train(mode != "eval")
        xt = x.clone().requires_grad_()
        y = mod(xt)
        ref = F.batch_norm(x, rm, rv, mod.weight.detach(), mod.bias.detach(), mode != "eval", 0.1, 1e-5)
        close(y, ref, 1e-12, f"{mode}: y")
        close(mod.running_mean, rm, 1e-12, f"{mode}: running_mean")
        y.sum().backward()
        assert xt.grad is not None


@check("nccl2")
def bn_bfloat16_channels_last(ctx: Ctx) -> None:
    _bn_step(ctx, [8, 5], (16, 7, 7), torch.bfloat16, channels_last=True, salt=8)


@check("nccl2")
def bn_same_as_torch_sync_batchnorm(ctx: Ctx) -> None:
    """Side by side with torch.nn.SyncBatchNorm (NCCL only: torch's refuses CPU tensors): outputs, gradients and
    running statistics of two steps on uneven batches."""
    import tritred_ops

    C, sizes = 8, [5, 3]
    g = ctx.gen(9)
    lo, hi = sum(sizes[: ctx.rank]), sum(sizes[: ctx.rank + 1])
    w, b = torch.randn(C, generator=g), torch.randn(C, generator=g)
    mods = [cls(C).to(ctx.device) for cls in (torch.nn.SyncBatchNorm, tritred_ops.nn.SyncBatchNorm)]
    for m in mods:
        with torch.no_grad():
            m.weight.copy_(w)
            m.bias.copy_(b)
    for step in range(2):
        full = torch.randn(sum(sizes), C, 6, 6, generator=g) * 2 + 1
        dy = torch.randn(full.shape, generator=g)
        outs = []
        for m in mods:
            x = full[lo:hi].to(ctx.device).requires_grad_()
            y = m(x)
            (y * dy[lo:hi].to(ctx.device)).sum().backward()
            outs.append([y, x.grad, m.weight.grad.clone(), m.bias.grad.clone(), m.running_mean, m.running_var])
            m.zero_grad()
        for what, theirs, ours in zip(("y", "dx", "dw", "db", "running_mean", "running_var"), *outs):
            close(ours, theirs.double(), 2e-5, f"step {step}: {what} against torch.nn.SyncBatchNorm")


@check("nccl2")
def vp_cross_entropy_large_vocab_bfloat16(ctx: Ctx) -> None:
    cases = [dict(reduction="mean", label_smoothing=0.1), dict(reduction="sum", weighted=True)]
    _cross_entropy_cases(ctx, [32000, 32257], torch.bfloat16, (64,), cases, 70, 2e-2)


@check("w2", "nccl2")
def bn_convert_and_state_dict(ctx: Ctx) -> None:
    """convert_sync_batchnorm makes tritred's class, sharing parameters and buffers; state_dicts load both ways."""
    import tritred_ops

    model = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 1), torch.nn.BatchNorm2d(3),
                                torch.nn.Sequential(torch.nn.BatchNorm1d(4, affine=False)),
                                torch.nn.SyncBatchNorm(3, momentum=None))
    keys = list(model.state_dict())
    bn, w = model[1], model[1].weight
    conv = tritred_ops.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert conv is model and model[1] is not bn
    for m in (model[1], model[2][0], model[3]):
        assert type(m) is tritred_ops.nn.SyncBatchNorm and isinstance(m, torch.nn.SyncBatchNorm)
    assert model[1].weight is w and model[1].running_mean is bn.running_mean and model[3].momentum is None
    assert list(model.state_dict()) == keys
    assert type(torch.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm2d(2))) is torch.nn.SyncBatchNorm
    one = tritred_ops.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm3d(5, eps=1e-3))
    assert type(one) is tritred_ops.nn.SyncBatchNorm and one.eps == 1e-3
    theirs = torch.nn.SyncBatchNorm(3)
    with torch.no_grad():
        for t in (theirs.weight, theirs.bias, theirs.running_mean, theirs.running_var):
            t.copy_(torch.randn(3, generator=ctx.gen(7)))
    ours = tritred_ops.nn.SyncBatchNorm(3, process_group=None)
    ours.load_state_dict(theirs.state_dict())
    back = torch.nn.BatchNorm2d(3)
    back.load_state_dict(ours.state_dict())
    for k, v in theirs.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


# -- vocab-parallel cross_entropy, log_softmax, logsumexp ---------------------------------------------------------

def _shards(ctx: Ctx, sizes: list[int]) -> tuple[int, int]:
    return sum(sizes[: ctx.rank]), sum(sizes[: ctx.rank + 1])


def _logits(ctx: Ctx, lead: tuple[int, ...], sizes: list[int], dtype: torch.dtype, salt: int,
            special: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(the gathered float64 logits, this process's shard of them in ``dtype``, requiring grad)."""
    full = (torch.randn(*lead, sum(sizes), generator=ctx.gen(salt), dtype=torch.float64) * 3).to(dtype).double()
    if special:  # a row of -inf, a row holding +inf, a row holding NaN (in different shards)
        full[0] = float("-inf")
        full[1, -1] = float("inf")
        full[2, 0] = float("nan")
    lo, hi = _shards(ctx, sizes)
    return full, full[..., lo:hi].to(ctx.device, dtype).requires_grad_()


def _grads(out: torch.Tensor, x: torch.Tensor, ref: torch.Tensor, full: torch.Tensor, ctx: Ctx, sizes: list[int],
           salt: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.randn(ref.shape, generator=ctx.gen(salt + 500), dtype=torch.float64)
    (gx,) = torch.autograd.grad(out, x, g.to(out.device, out.dtype))
    (gr,) = torch.autograd.grad(ref, full, g)
    lo, hi = _shards(ctx, sizes)
    return gx, gr[..., lo:hi]


def _cross_entropy_cases(ctx: Ctx, sizes: list[int], dtype: torch.dtype, lead: tuple[int, ...],
                         cases: list[dict], salt: int, tol: float) -> None:
    from tritred_ops.distributed import vocab_parallel_cross_entropy

    V = sum(sizes)
    g = ctx.gen(salt)
    target = torch.randint(0, V, lead, generator=g)
    target.view(-1)[1] = -100
    weight = (torch.rand(V, generator=g, dtype=torch.float64) + 0.1).to(dtype).double()
    for i, case in enumerate(cases):
        kw = dict(case)
        t = target if kw.get("ignore_index", -100) == -100 else target.masked_fill(target == -100, 2)
        w = weight if kw.pop("weighted", False) else None
        full, x = _logits(ctx, lead, sizes, dtype, salt + i)
        full.requires_grad_()
        out = vocab_parallel_cross_entropy(x, t.to(ctx.device), None,
                                           None if w is None else w.to(ctx.device, dtype), **kw)
        ref = F.cross_entropy(full.reshape(-1, V), t.reshape(-1), w, **kw)
        if kw.get("reduction") == "none":
            ref = ref.reshape(t.shape)
        assert out.dtype == dtype
        close(out, ref, tol, f"{case}: loss")
        gx, gr = _grads(out, x, ref, full, ctx, sizes, salt + i)
        close(gx, gr, tol, f"{case}: grad")


_CE_CASES = [dict(reduction=r, weighted=w, label_smoothing=s) for r in ("mean", "sum", "none")
             for w in (False, True) for s in (0.0, 0.2)]


@check("w2", "nccl2")
def vp_cross_entropy_float64_unequal_shards(ctx: Ctx) -> None:
    _cross_entropy_cases(ctx, [4, 7, 2, 5][: ctx.world], torch.float64, (5,), _CE_CASES, 10, 1e-11)


@check("w2", "nccl2")
def vp_cross_entropy_bfloat16_3d_ignore_index(ctx: Ctx) -> None:
    cases = [dict(reduction="mean", ignore_index=2), dict(reduction="none", weighted=True, label_smoothing=0.1)]
    _cross_entropy_cases(ctx, [6, 3, 4, 4][: ctx.world], torch.bfloat16, (2, 3), cases, 30, 2e-2)


@check("w4")
def vp_cross_entropy_empty_shard(ctx: Ctx) -> None:
    cases = [dict(reduction="mean", weighted=True, label_smoothing=0.3), dict(reduction="none")]
    _cross_entropy_cases(ctx, [3, 0, 5, 3], torch.float32, (4,), cases, 40, 2e-5)


@check("w2", "w4", "nccl2")
def vp_log_softmax_and_logsumexp(ctx: Ctx) -> None:
    from tritred_ops.distributed import vocab_parallel_log_softmax, vocab_parallel_logsumexp

    sizes = [5, 2, 0, 4][: ctx.world] if ctx.world > 2 else [5, 3]
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        for fn, ref_fn in ((vocab_parallel_log_softmax, lambda t: torch.log_softmax(t, -1)),
                           (vocab_parallel_logsumexp, lambda t: torch.logsumexp(t, -1))):
            full, x = _logits(ctx, (4, 2), sizes, dtype, 50)
            full.requires_grad_()
            out, ref = fn(x), ref_fn(full)
            lo, hi = _shards(ctx, sizes)
            ref_part = ref[..., lo:hi] if fn is vocab_parallel_log_softmax else ref
            close(out, ref_part, tol, f"{fn.__name__} {dtype}")
            if fn is vocab_parallel_log_softmax:
                g = torch.randn(ref.shape, generator=ctx.gen(51), dtype=torch.float64)
                (gx,) = torch.autograd.grad(out, x, g[..., lo:hi].to(out.device, dtype))
                (gr,) = torch.autograd.grad(ref, full, g)
                close(gx, gr[..., lo:hi], tol, f"{fn.__name__} {dtype}: grad")
            else:
                gx, gr = _grads(out, x, ref, full, ctx, sizes, 52)
                close(gx, gr, tol, f"{fn.__name__} {dtype}: grad")
        full, x = _logits(ctx, (3,), sizes, dtype, 53, special=True)
        lo, hi = _shards(ctx, sizes)
        with torch.no_grad():
            close(vocab_parallel_logsumexp(x), torch.logsumexp(full, -1), tol, "logsumexp: -inf, inf, NaN rows")
            close(vocab_parallel_log_softmax(x), torch.log_softmax(full, -1)[..., lo:hi], tol,
                  "log_softmax: -inf, inf, NaN rows")


@check("w2")
def vp_errors_as_torch(ctx: Ctx) -> None:
    """Out-of-range targets and bad arguments raise torch's errors on every process alike."""
    from tritred_ops.distributed import vocab_parallel_cross_entropy as ce

    x = torch.randn(3, 4, dtype=torch.float64)  # every process's shard: V = 4 * world
    V = 4 * ctx.world
    for target, err in ((torch.tensor([0, V, 1]), "out of bounds"), (torch.tensor([0, -2, 1]), "out of bounds")):
        try:
            ce(x, target)
            raise AssertionError("no error")
        except IndexError as e:
            assert err in str(e), e
    for kwargs, exc in ((dict(reduction="avg"), ValueError), (dict(label_smoothing=1.5), RuntimeError),
                        (dict(weight=torch.ones(V + 1, dtype=torch.float64)), RuntimeError)):
        try:
            ce(x, torch.tensor([0, 1, 2]), **kwargs)
            raise AssertionError(f"{kwargs}: no error")
        except exc:
            pass
    for target, exc in ((torch.tensor([0, 1]), ValueError), (torch.tensor([0, 1, 2], dtype=torch.int32),
                                                             RuntimeError)):
        try:
            ce(x, target)
            raise AssertionError("no error")
        except exc:
            pass
    ok = ce(x, torch.tensor([0, V - 1, -100]), reduction="none")  # the group still works after the errors
    assert ok[2] == 0 and ok.isfinite().all()


@check("w2")
def vp_under_torch_compile(ctx: Ctx) -> None:
    """torch.compile runs the ops eagerly at a graph break; fullgraph=True refuses them."""
    from tritred_ops.distributed import vocab_parallel_cross_entropy as ce

    full, x = _logits(ctx, (4,), [3] * ctx.world, torch.float32, 60)
    t = torch.randint(0, 3 * ctx.world, (4,), generator=ctx.gen(61))

    def f(logits: torch.Tensor) -> torch.Tensor:
        return ce(logits * 2.0, t) + 1.0

    torch._dynamo.reset()
    out = torch.compile(f, backend="eager")(x)
    ref = F.cross_entropy(full * 2.0, t) + 1.0
    close(out, ref, 2e-6, "compiled")
    out.backward()
    assert x.grad is not None and x.grad.isfinite().all()
    try:
        torch.compile(f, backend="eager", fullgraph=True)(x.detach())
        raise AssertionError("fullgraph=True compiled a collective")
    except AssertionError:
        raise
    except Exception:  # noqa: BLE001 (dynamo's Unsupported, whatever its class in this torch)
        pass
    torch._dynamo.reset()


# -- the worker ---------------------------------------------------------------------------------------------------

def poison() -> None:
    """Every torch.empty / empty_like / empty_strided of the process starts as NaN (as conftest's fixture)."""
    real = torch.empty, torch.empty_like, torch.empty_strided

    def fill(t: torch.Tensor) -> torch.Tensor:
        if t.numel() and t.dtype.is_floating_point and t.device.type != "meta":
            t.fill_(float("nan"))
        return t

    torch.empty = lambda *a, **k: fill(real[0](*a, **k))  # type: ignore[assignment]
    torch.empty_like = lambda *a, **k: fill(real[1](*a, **k))  # type: ignore[assignment]
    torch.empty_strided = lambda *a, **k: fill(real[2](*a, **k))  # type: ignore[assignment]


def run_worker(rank: int, world: int, init_file: str, out_dir: str, suite_name: str, seed: int,
               backend: str = "gloo") -> None:
    """Run ``suite_name``'s checks in this process (rank ``rank`` of ``world``) and write
    ``out_dir/rank{rank}.json``: check name -> "ok" or the failure's traceback. Stops at the first failure."""
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    poison()
    results: dict[str, str] = {}
    path = os.path.join(out_dir, f"rank{rank}.json")
    try:
        extra = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=60 if backend == "gloo" else 180), **extra)
        ctx = Ctx(rank, world, device, seed)
        for name in suite(suite_name):
            try:
                CHECKS[name][1](ctx)
                results[name] = "ok"
            except BaseException:  # noqa: BLE001 (reported, then the process ends: its peers fail fast)
                results[name] = traceback.format_exc()
                break
        else:
            dist.barrier()
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001
        results["<setup>"] = traceback.format_exc()
    with open(path + ".tmp", "w") as f:
        json.dump(results, f)
    os.replace(path + ".tmp", path)
    sys.stdout.flush()
    os._exit(0)  # (no teardown of a group a peer may still hold: the parent reads the files)


if __name__ == "__main__":
    r, w, init, out, name, seed_, backend_ = sys.argv[1:8]
    run_worker(int(r), int(w), init, out, name, int(seed_), backend_)
