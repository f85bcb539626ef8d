import torch, triton, tritred_ops as tr
from triton.testing import do_bench
src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); dst = torch.empty_like(src)
copy = 2 * src.numel() / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6
del src, dst
for shape, dims, dt in [((64, 512, 64, 64), (0, 2, 3), torch.bfloat16), ((64, 512, 64, 64), (0, 2, 3), torch.float32),
                        ((256, 64, 56, 56), (0, 2, 3), torch.bfloat16), ((8, 64, 16, 32, 32), (0, 2, 3, 4), torch.float32)]:
    x = torch.randn(shape, device="cuda", dtype=dt)
    for name in ("sum", "mean", "amax"):
        f = getattr(tr, name); g = getattr(torch, name)
        out = f(x, dims); ref = g(x.double(), dims)
        ok = torch.allclose(out.double(), ref, rtol=2e-2, atol=2e-2 * (x.numel() / out.numel()) ** 0.5)
        ms = do_bench(lambda: f(x, dims), return_mode="median")
        me = do_bench(lambda: g(x, dims), return_mode="median")
        gb = x.numel() * x.element_size() / ms / 1e6
        print(f"{name} {shape} {dims} {dt}: ok={ok} tritred {100*gb/copy:.0f}% eager {100*x.numel()*x.element_size()/me/1e6/copy:.0f}%")
