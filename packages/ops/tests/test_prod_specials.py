"""prod of slices holding +-inf, 0 or NaN among finite values whose partial products leave float range: the exact
answer on every dispatch branch (rows, columns, split slices and their merge, stages), in every float dtype.

The partial products of values in [0.02, 0.06] underflow float32 within ~40 elements and of values in [20, 60]
overflow it within ~30, so a tree of partial products meets 0 * inf (NaN) unless the kernel keeps the infinities
and zeros apart (``families.reduce.kernels._prod_specials``).
"""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import seed
from test_reduce import COL_CONFIGS, ROW_CONFIGS

SPECIALS = (float("inf"), -float("inf"), 0.0, -0.0, float("nan"))


def _exact(x: torch.Tensor, dim: int | None) -> torch.Tensor:
    """The exact product (rounded to x's dtype) of each slice holding a special value, from its specials alone:
    NaN (a NaN, or an inf and a 0), else +-0 (a 0), else +-inf; the sign is the parity of the sign bits. Slices
    of finite values only: their float64 product (0 or inf in float64 only where the exact product rounds to 0
    or inf in x's dtype too)."""
    xd = x.detach().cpu().double()
    xd = xd.reshape(-1) if dim is None else xd.movedim(dim, -1)
    a = xd.abs()
    nan, inf, zero = a.isnan().any(-1), a.isinf().any(-1), (a == 0).any(-1)
    minus = (torch.signbit(xd) & ~a.isnan()).sum(-1) % 2 == 1
    one = torch.where(minus, -1.0, 1.0).double()
    special = torch.where(zero, one * 0.0, one * float("inf"))
    special = torch.where(nan | (inf & zero), float("nan"), special)
    value = torch.where(nan | inf | zero, special, xd.prod(-1))
    return value.to(x.dtype)


def _rows(shape, dtype, big: bool, g: torch.Generator, specials: float = 0.6) -> torch.Tensor:
    """Rows (last dim) of values in [0.02, 0.06] (``big``: [20, 60]) with random signs; a fraction ``specials`` of
    the rows get one to three special values at random places, the others none."""
    x = torch.rand(shape, generator=g, dtype=torch.float64) * 0.04 + 0.02
    if big:
        x = x * 1000
    x = x * torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
    flat = x.reshape(-1, shape[-1])
    for r in range(flat.shape[0]):
        if torch.rand((), generator=g) < specials:
            for _ in range(int(torch.randint(1, 4, (), generator=g))):
                pos = int(torch.randint(0, shape[-1], (), generator=g))
                flat[r, pos] = SPECIALS[int(torch.randint(0, len(SPECIALS), (), generator=g))]
    return x.to(dtype)


def _check(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    o, r = out.cpu(), ref.cpu()
    assert torch.equal(o.isnan(), r.isnan()), f"{what}: NaN positions differ\n{o}\n{r}"
    ok = ~r.isnan()
    assert torch.equal(o[ok].isinf(), r[ok].isinf()) and torch.equal(o[ok] == 0, r[ok] == 0), f"{what}\n{o}\n{r}"
    assert torch.equal(torch.signbit(o[ok]), torch.signbit(r[ok])), f"{what}: signs differ\n{o}\n{r}"
    rtol = 8e-3 if o.dtype == torch.bfloat16 else 2e-3  # (finite slices: one rounding of the output, ~1000 of
    torch.testing.assert_close(o[ok], r[ok], rtol=rtol, atol=0, msg=what)  # the float32 accumulator)


def _row_id(c) -> str:
    if c is None:
        return "built-in"
    return f"rows-{c['strategy']}-{c.get('split', 1)}-p{c.get('num_programs', 0)}-s{c.get('num_stages', 1)}"


@pytest.mark.parametrize("big", [False, True], ids=["underflow", "overflow"])
@pytest.mark.parametrize("cfg", [None, *ROW_CONFIGS], ids=_row_id)
def test_row_branches(cfg, big, force, device):
    if cfg is not None:
        force("prod", **cfg)
    g = torch.Generator().manual_seed(seed())
    lengths = (100,) if cfg and cfg["strategy"] == "single_pass" else (300, 160)  # (160: num_stages loops)
    for n in lengths:
        x = _rows((6, n), torch.float32, big, g)
        _check(tr.prod(x.to(device), 1), _exact(x, 1), f"prod {cfg} seed {g.initial_seed()}")


@pytest.mark.parametrize("big", [False, True], ids=["underflow", "overflow"])
@pytest.mark.parametrize("cfg", COL_CONFIGS, ids=lambda c: f"cols-{c['strategy']}-s{c.get('num_stages', 1)}")
def test_col_branches(cfg, big, force, device):
    force("prod", **cfg)
    g = torch.Generator().manual_seed(seed())
    n = 100 if cfg["strategy"] == "single_pass" else 300
    x = _rows((13, n), torch.float32, big, g).t()  # (n, 13) contiguous: prod over dim 0 reads columns
    _check(tr.prod(x.contiguous().to(device), 0), _exact(x, 0), f"prod {cfg} seed {g.initial_seed()}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_dtypes(dtype, device):
    """float16 products overflow on the first few values, bfloat16 keeps float32's range (both accumulate in
    float32); float64 slices of tiny values (1e-30 times as small) underflow its range within 8 values."""
    g = torch.Generator().manual_seed(seed())
    x = _rows((8, 400), torch.float64, False, g)
    if dtype == torch.float64:
        x = torch.where(x.isfinite() & (x != 0), x * 1e-30, x)
    x = x.to(dtype)
    _check(tr.prod(x.to(device), -1), _exact(x, -1), f"prod {dtype} seed {g.initial_seed()}")


def test_split_slices_out_of_range_meet_specials(force, device):
    """A slice whose product underflowed meets another slice's inf in the merge (+-inf, not NaN); one that
    overflowed meets another's 0 (+-0); the merge tells such partials from the slices' own 0 and inf."""
    force("prod", strategy="split", BLOCK_M=1, BLOCK_N=16, split=4)
    small = torch.full((2, 1000), 0.5)
    small[0, 900] = float("inf")  # slices of 250: three underflow to 0, the last holds the inf
    small[1, 10] = -float("inf")
    big = torch.full((2, 1000), 3.0)
    big[0, 999] = 0.0
    big[1, 0] = -0.0
    for x in (small, big):
        _check(tr.prod(x.to(device), 1), _exact(x, 1), "split")
    both = torch.cat([torch.full((750,), 0.5), torch.full((250,), 3.0)])[None]  # 2^-750 * 3^250: out of range
    assert tr.prod(both.to(device), 1).cpu().isnan().all()  # (documented: neither 0 nor inf can be told)


def test_split_slices_with_specials_in_later_chunks(force, device):
    """Slices of a split product go out of range in the common case: marked from the main loop's note of 0s and
    infs (``kernels._specials_seen``), NaN read again in chunks of the main loop's width (1024 lanes here):
    specials and signs in any chunk of a slice, past the first, and the slices' marks carried to the merge."""
    force("prod", strategy="split", BLOCK_M=1, BLOCK_N=2048, split=2)
    g = torch.Generator().manual_seed(seed())
    x = _rows((4, 9001), torch.float32, False, g, specials=0.0)  # slices of 4501: five chunks each
    x[0, 4500 + 3000] = float("inf")  # row 0: the second slice's inf, in its third chunk, meets the first's underflow
    x[1, 2500] = -0.0  # row 1: a 0 in the first slice's third chunk
    x[2, 1100] = float("nan")  # row 2: NaN in the first slice's second chunk
    x[3, 4600:6000] = -1.0  # row 3: 1400 negative values across two chunks of the second slice (an even count)
    x[3, 6000] = -40.0
    _check(tr.prod(x.to(device), 1), _exact(x, 1), f"wide chunks seed {g.initial_seed()}")


def _launches(monkeypatch) -> list[dict]:
    """The kernel launches of the calls that follow (their keyword arguments), recorded by a spy."""
    from tritred_ops.runtime import replay

    seen, real = [], replay.Recorder.launch

    def spy(self, kernel, grid, *args, **kwargs):
        seen.append(kwargs)
        return real(self, kernel, grid, *args, **kwargs)
    monkeypatch.setattr(replay.Recorder, "launch", spy)
    return seen


def test_stages_and_full_reduction(device, monkeypatch):
    """prod(x) of an input whose rows are sliced (``x[:, 1:]``: not one strided axis) goes in stages, the first
    marking its temporary, the second reading the marks: they carry over."""
    launches = _launches(monkeypatch)
    g = torch.Generator().manual_seed(seed())
    for shape in ((40, 51), (3, 7001)):
        base = _rows(shape, torch.float32, False, g, specials=0.0)
        base.view(-1)[int(torch.randint(0, base.numel(), (), generator=g))] = float("inf")
        launches.clear()
        _check(tr.prod(base.to(device)[:, 1:]), _exact(base[:, 1:], None), f"prod(x) {shape} seed {g.initial_seed()}")
        assert any(k.get("MARK_OUT") for k in launches) and any(k.get("MARK_IN") for k in launches), launches
        _check(tr.prod(base.to(device)), _exact(base, None), f"prod(x) contiguous {shape} seed {g.initial_seed()}")


def test_lost_magnitude_meets_another_slices_inf_or_zero(force, device, monkeypatch):
    """Finite values whose partial products both overflowed and underflowed have lost their magnitude (NaN
    alone), but they are finite and nonzero: another slice's inf still makes the product +-inf, its 0 makes it
    +-0 (a lost mark, 5/6, carries them to the merge and between stages)."""
    pattern = torch.tensor([1e25] * 8 + [1e-25] * 8)  # of 16 lanes, 8 overflow and 8 underflow: 0 * inf
    x = torch.ones(3, 2000)
    x[:, :512] = pattern.repeat(32)
    x[0, 1999] = -float("inf")
    x[1, 1500] = 0.0
    x[2, 7] = -3.0  # finite values only: NaN (documented)
    force("prod", strategy="split", BLOCK_M=1, BLOCK_N=16, split=4)
    got = tr.prod(x.to(device), 1).cpu()
    assert got[0] == -float("inf") and got[1] == 0 and not got[1].signbit() and got[2].isnan(), got
    # between stages: every other row's first value dropped (two launches, marks between them)
    force("prod", strategy="multi_pass", BLOCK_M=1, BLOCK_N=16)
    launches = _launches(monkeypatch)
    base = torch.ones(2, 2001)
    base[0, 1:] = pattern.repeat(125)
    base[1, 10] = -float("inf")
    got = tr.prod(base.to(device)[:, 1:]).cpu()
    assert got == -float("inf"), got
    assert any(k.get("MARK_OUT") for k in launches) and any(k.get("MARK_IN") for k in launches), launches


def test_integer_products_unchanged(device):
    """Integer products keep wrapping in int64 (no specials there): the same answer as torch."""
    x = torch.randint(-3, 4, (5, 300))
    assert torch.equal(tr.prod(x.to(device), 1).cpu(), torch.prod(x, 1))
