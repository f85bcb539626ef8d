"""Call plans (``tritred_ops.runtime.replay``): a repeated call replays the first call's launches on new tensors.

Each case runs an op on inputs A (the full path records a plan), then on fresh inputs B of the same layout (the
plan replays), then on B again with the plans cleared (the full path): the replay must give the full path's
bits, outputs and in-place running statistics alike. Every dispatch branch is forced once. Arguments that are
equal as dict keys but not to the checks (``1`` / ``1.0`` / ``True``), copied layouts and aliased arguments must
not replay.
"""

from __future__ import annotations

import pytest
import torch
import tritred_ops as tr
from ops_helpers import assert_close, randn, seed
from tritred_ops.runtime import replay as _replay
from tritred_ops.runtime.caches import caches


@pytest.fixture(autouse=True, params=["find_plan", "native"])
def key_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Every case twice: calls keyed by :func:`find_plan` (Python), and by the native launcher (C++: the key, the
    lookup and the run, at the op's entry and in its host path) where the extension builds (CI has a compiler)."""
    from tritred_ops.runtime import native

    original = native.loaded_replays
    if request.param == "native":
        if native.extension() is None:
            pytest.skip("the native launcher cannot be built here")
    else:  # (the caches made during the test, after a plugin registers, take the same path)
        monkeypatch.setattr(native, "loaded_replays", lambda plans, plain: (None, None))
    caches().load_native()
    assert (caches().native_replay is None) == (request.param == "find_plan")
    yield request.param
    state = caches()
    state.native_replay, state.native_inference = original(state.plans, _replay.PLAIN)


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts Plan.run calls (``run`` is set per plan: the generated function or ``run_generic``; the native
    launcher's ``replay`` then calls it too: a plan's native form is dropped, which it would run directly)."""
    calls: list[int] = []
    real_init = _replay.Plan.__init__

    def init(self, *args):  # noqa: ANN001, ANN002, ANN202
        real_init(self, *args)
        run, self.native = self.run, None

        def counted(*inputs):  # noqa: ANN002, ANN202
            calls.append(1)
            return run(*inputs)
        self.run = counted

    monkeypatch.setattr(_replay.Plan, "__init__", init)
    return calls


def _plans() -> int:
    return sum(isinstance(v, _replay.Plan) for v in caches().plans.values())


def _bits(t):
    return t.detach().cpu().contiguous().view(torch.uint8) if t.dtype != torch.bool else t.cpu()


def _outputs(result):
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for t in result if isinstance(t, torch.Tensor)]


def _run_case(call, make, replays):
    """call three times: record on make(0), replay on make(1), full path on make(1) again; bits must agree.

    ``make(i)`` draws fresh values from seed ``base + i`` in a fixed layout (so make(1) twice is the same input).
    """
    base = seed()
    caches().clear()
    call(*make(base))
    assert _plans() >= 1, "the full path saved no plan"
    b = make(base + 1)
    b_full = make(base + 1)
    before = len(replays)
    out_replay = _outputs(call(*b))
    assert len(replays) == before + 1, "the second call did not replay"
    caches().clear()
    out_full = _outputs(call(*b_full))
    for r, f in zip(out_replay + [t for t in b if isinstance(t, torch.Tensor)],
                    out_full + [t for t in b_full if isinstance(t, torch.Tensor)]):
        assert r.shape == f.shape and r.dtype == f.dtype and r.stride() == f.stride(), "layouts differ"
        assert torch.equal(_bits(r), _bits(f)), "replay and full path differ"
    return out_replay, b


REDUCE_CASES = [  # (op, shape, dim, forced config or None)
    ("sum", (6, 300), 1, None),
    ("sum", (6, 300), 0, None),
    ("mean", (3, 2000), 1, dict(strategy="split", BLOCK_M=1, BLOCK_N=64, split=4)),
    ("amax", (300, 40), 0, dict(strategy="split", BLOCK_N=8, BLOCK_K=16, split=3)),
    ("prod", (5, 30), 1, None),
    ("var", (6, 300), 1, dict(strategy="split", BLOCK_M=1, BLOCK_N=64, split=3)),
    ("std_mean", (300, 20), 0, dict(strategy="multi_pass", BLOCK_N=8, BLOCK_K=16)),
    ("logsumexp", (6, 300), 1, dict(strategy="multi_pass", BLOCK_M=2, BLOCK_N=64)),
]


@pytest.mark.parametrize("name,shape,dim,cfg", REDUCE_CASES, ids=lambda v: str(v) if not isinstance(v, dict) else
                         v["strategy"])
def test_reductions_replay(name, shape, dim, cfg, force, replays, device):
    if cfg is not None:
        force(name, **cfg)
    op = getattr(tr, name)
    (out, *_), (x,) = _run_case(lambda x: op(x, dim), lambda i: (randn(shape, torch.float32, device, gen_seed=i),),
                                replays)
    ref = getattr(torch, name)(x.double().cpu(), dim)
    ref = ref[0] if isinstance(ref, tuple) else ref
    assert_close(out, ref, n=shape[dim], scale=4, what=name)


@pytest.mark.parametrize("cfg", [None, dict(strategy="split", BLOCK_M=1, BLOCK_N=32, split=4),
                                 dict(strategy="split", BLOCK_N=8, BLOCK_K=4, split=3)], ids=["plain", "split",
                                                                                           "cols-split"])
def test_max_with_indices_replays(cfg, force, replays, device):
    if cfg is not None:
        force("max", **cfg)
    dim = 0 if cfg is not None and "BLOCK_K" in cfg else 1
    (values, indices), (x,) = _run_case(lambda x: tr.max(x, dim),
                                        lambda i: (randn((40, 37), torch.float32, device, gen_seed=i),), replays)
    ref = torch.max(x.cpu(), dim)
    assert torch.equal(values.cpu(), ref.values) and torch.equal(indices.cpu(), ref.indices)


@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_softmax_replays(mode, layout, replays, device):
    op = getattr(tr, mode)
    (y,), (x,) = _run_case(lambda x: op(x, -1), lambda i: (randn((7, 45), torch.float32, device, layout, gen_seed=i),),
                           replays)
    assert_close(y, getattr(torch, mode)(x.double().cpu(), -1), n=45, scale=4, what=mode)


@pytest.mark.parametrize("mode", ["softmax", "log_softmax"])
def test_softmax_split_rows_replay_with_their_barrier_counters_zeroed(mode, force, replays, device):
    """Split rows count arrivals per row (compiled): a replay must zero its counters in the fresh workspace (the
    poisoned workspace would otherwise pass or block the barriers)."""
    force(mode, strategy="split", BLOCK_N=16, split=3)
    op = getattr(tr, mode)
    (y,), (x,) = _run_case(lambda x: op(x, -1), lambda i: (randn((7, 45), torch.float32, device, gen_seed=i),),
                           replays)
    assert_close(y, getattr(torch, mode)(x.double().cpu(), -1), n=45, scale=4, what=mode)
    plans = list(caches().plans.values())
    assert len(plans) == 1 and plans[0].zero_bytes >= 7 * 4  # one int32 counter per row, first in the workspace
    assert plans[0].temps[0][0][2] == torch.int32


def test_layer_norm_replays_weights_and_stats(replays, device):
    from tritred_ops import layer_norm_with_stats

    def make(i):
        return (randn((9, 70), torch.bfloat16, device, gen_seed=i),
                randn((70,), torch.bfloat16, device, gen_seed=i + 7),
                randn((70,), torch.bfloat16, device, gen_seed=i + 8))
    (y,), (x, w, b) = _run_case(lambda x, w, b: tr.layer_norm(x, (70,), w, b), make, replays)
    ref = torch.nn.functional.layer_norm(x.double().cpu(), (70,), w.double().cpu(), b.double().cpu())
    assert_close(y, ref, n=70, scale=8, what="layer_norm")
    _run_case(lambda x, w, b: layer_norm_with_stats(x, [70], w, b), make, replays)  # list normalized_shape


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_replays_running_stats(training, replays, device):
    def make(i):
        return (randn((4, 3, 5, 6), torch.float32, device, gen_seed=i),
                randn((3,), torch.float32, device, gen_seed=i + 5),
                randn((3,), torch.float32, device, gen_seed=i + 6).abs() + 0.5,
                randn((3,), torch.float32, device, gen_seed=i + 7), randn((3,), torch.float32, device, gen_seed=i + 8))
    (y,), (x, rm, rv, w, b) = _run_case(
        lambda x, rm, rv, w, b: tr.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5), make, replays)
    assert torch.isfinite(y).all()


def test_type_strict_keys(replays, device):
    """dim=1 is cached; dim=1.0 / True and keepdim=1 must still raise as the full path does."""
    x = randn((4, 5), torch.float32, device)
    tr.sum(x, 1)
    tr.sum(x, 1, True)
    tr.softmax(x, 1)
    with pytest.raises(TypeError):
        tr.sum(x, 1.0)
    with pytest.raises(TypeError):
        tr.sum(x, True)
    with pytest.raises(TypeError):
        tr.sum(x, 1, 1)
    with pytest.raises(TypeError):
        tr.softmax(x, 1.0)


def test_copied_layouts_and_aliases_do_not_replay(replays, device):
    caches().clear()
    x = randn((6, 7, 8, 9, 10), torch.float32, device)[:, ::2, :, ::3, :]
    tr.sum(x, (0, 2))  # reduced dims that cannot even go in stages: gathered (a copy): no plan
    w = randn((12,), torch.float32, device)[::2]  # strided weight: copied per call
    z = randn((3, 6), torch.float32, device)
    tr.layer_norm(z, (6,), w, w)  # and aliased weight and bias
    assert _plans() == 0
    rm = randn((6,), torch.float32, device)[::2]  # non-contiguous running mean: copied back per call
    rv = randn((3,), torch.float32, device).abs() + 0.5
    xb = randn((4, 3, 5), torch.float32, device)
    for _ in range(2):
        before = rm.clone()
        tr.batch_norm(xb, rm, rv, None, None, True, 0.5, 1e-5)
        assert not torch.equal(rm, before), "running_mean not updated"
    assert _plans() == 0 and not replays


def test_staged_reductions_replay(replays, device):
    """Reduced dims that go in stages (sum over (0, 2, 3) of NCHW) keep their temporary in the plan's workspace:
    the call replays, launch for launch."""
    caches().clear()
    x = randn((4, 6, 5, 7), torch.float32, device)
    first = tr.sum(x, (0, 2, 3))
    again = tr.sum(randn((4, 6, 5, 7), torch.float32, device), (0, 2, 3))
    assert _plans() == 1 and replays == [1]
    assert not torch.equal(first, again)


def test_plugin_registration_drops_plans(force, device):
    x = randn((4, 50), torch.float32, device)
    tr.sum(x, 1)
    assert _plans() >= 1
    force("sum", strategy="multi_pass", BLOCK_M=1, BLOCK_N=16)
    assert _plans() == 0


def _fake_plan(monkeypatch, log: list, zeroed: bool = False):
    """A compiled two-launch plan over a fake kernel and a fake Triton 3.6 launcher (no GPU needed): the C entry
    point logs its arguments; the launcher's ``run`` (taken with launch hooks) logs ("run", hooks)."""
    import inspect

    class Launcher:  # Triton 3.6's CudaLauncher layout
        launch_cooperative_grid, launch_pdl, global_scratch_size, profile_scratch_size = 0, 1, 0, 0

        def __call__(self, gridX, gridY, gridZ, stream, function, *args):  # noqa: ANN001, ANN204, N803
            log.append(("run", args[2], args[3]))

        def launch(self, *args):  # noqa: ANN002, ANN202
            log.append(args)

    class Compiled:
        function, packed_metadata = 7, (4, 1, 0)
        run = Launcher()

        def launch_metadata(self, grid, stream, *args):  # noqa: ANN001, ANN002, ANN202
            return None

    class Kernel:
        # (constants of every kind the generated code writes as literals, or as globals: -inf)
        signature = inspect.signature(lambda x_ptr, y_ptr, t_ptr, N, BLOCK=8, EPS=1e-5, LO=float("-inf"),
                                      MODE="rows", EVEN=True, SHAPE=(2, -3), NONE=None: None)

        def __getitem__(self, grid):  # noqa: ANN001, ANN204
            return lambda *a, **k: Compiled()

    pool: list = []

    def pinned(*a, **k):  # allocations replayed in a fixed order, so both runs see the same pointers
        return pool.pop(0)

    monkeypatch.setattr(torch, "empty_strided", pinned)
    monkeypatch.setattr(torch, "empty", lambda *a, **k: pool.pop(0) if pool else torch.zeros(*a, **k))
    monkeypatch.setattr(_replay, "_stream_getter", lambda: (lambda: 1234))
    monkeypatch.setattr(_replay, "_raw_stream", lambda: (lambda device: 1234, lambda: 0))  # (on a CUDA build)
    x, k = torch.randn(5), Kernel()
    caches().plans.pop(("fake-plan",), None)  # a plan saved by another test logs to that test's list
    rec = _replay.Recorder(x, None)
    y, t = rec.empty((4,), torch.float32, x.device), rec.empty((3, 2), torch.float64, x.device)
    t2 = rec.zeros((7,), torch.int32, x.device) if zeroed else rec.empty((7,), torch.int64, x.device)
    rec.launch(k, (2,), x, y, t, 5, BLOCK=16, EPS=0.1, EVEN=False)
    rec.launch(k, (1, 3), t, y, t2, 6)
    rec.save(("fake-plan",), y)
    plan = caches().plans[("fake-plan",)]
    assert plan.fast is not None and plan.ws_bytes == 512
    return plan, x, pool


def test_plans_zero_the_temporaries_that_start_at_zero(monkeypatch):
    """Barrier counters (``Recorder.zeros``) come first in the workspace and both replay paths zero them, and
    only them, before the launches."""
    log: list = []
    plan, x, pool = _fake_plan(monkeypatch, log, zeroed=True)
    assert plan.zero_bytes == 256 and plan.temps[0][1] == 0 and plan.temps[0][0][2] == torch.int32
    for run in (plan.run, plan.run_generic):
        out, ws = torch.zeros(4), torch.full((512,), 255, dtype=torch.uint8)
        pool[:] = [out, ws]
        run(x, None)
        assert ws[:256].eq(0).all() and ws[256:].eq(255).all()
        assert log[-2][13:18] == (x.data_ptr(), out.data_ptr(), ws.data_ptr() + 256, 5, 16)  # t after the counters
        assert log[-1][13:18] == (ws.data_ptr() + 256, out.data_ptr(), ws.data_ptr(), 6, 8)


def test_straight_line_plan_launches_as_the_generic_one(monkeypatch):
    """A compiled plan runs as generated straight-line code; it must make the launcher calls (every argument, in
    order) that the per-launch path makes."""
    log: list = []
    plan, x, pool = _fake_plan(monkeypatch, log)
    outputs = []
    out, ws = torch.zeros(4), torch.zeros(512, dtype=torch.uint8)
    for run in (plan.run, plan.run_generic):
        pool[:] = [out, ws]
        before = len(log)
        assert run(x, None)[0] is out
        outputs.append(log[before:])
    fast, generic = outputs
    assert fast == generic and len(fast) == 2
    # of the same types too (constants are written as literals: 1 == 1.0 == True would hide a wrong one)
    assert [list(map(type, call)) for call in fast] == [list(map(type, call)) for call in generic]
    w = ws.data_ptr()
    consts = (float("-inf"), "rows")
    assert fast[0][0:4] == (2, 1, 1, 1234)
    assert fast[0][13:] == (x.data_ptr(), out.data_ptr(), w, 5, 16, 0.1, *consts, False, (2, -3), None)
    assert fast[1][0:3] == (1, 3, 1)
    assert fast[1][13:] == (w, out.data_ptr(), w + 256, 6, 8, 1e-5, *consts, True, (2, -3), None)


def test_default_dtype_is_part_of_the_key(device):
    """logsumexp of integers returns the default dtype: a plan recorded under float32 must not serve float64."""
    x = torch.randint(0, 5, (4, 8), device=device)
    assert tr.logsumexp(x, 1).dtype == torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert tr.logsumexp(x, 1).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)


def test_tensor_arguments_are_never_keyed(device):
    """A 0-d tensor as dim, eps or a normalized_shape element can change in place: every call reads it again."""
    x = randn((4, 8), torch.float32, device)
    d = torch.tensor(1)
    tr.sum(x, d)
    d.fill_(0)
    assert tr.sum(x, d).shape == (8,)
    e = torch.tensor(1e-5, dtype=torch.float64)
    tr.layer_norm(x, [8], eps=e)
    e.fill_(100.0)
    assert_close(tr.layer_norm(x, [8], eps=e), torch.nn.functional.layer_norm(x.double().cpu(), [8], eps=100.0),
                 n=8, what="eps tensor")
    n = torch.tensor(8)
    tr.layer_norm(x, [n])
    n.fill_(4)
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[4\]"):  # the new value, read again
        tr.layer_norm(x, [n])


def test_plans_do_not_keep_the_first_calls_tensors(device):
    import gc
    import weakref

    x = randn((64, 50), torch.float32, device)
    w = randn((50,), torch.float32, device)
    refs = [weakref.ref(x), weakref.ref(w)]
    tr.sum(x, 1)
    tr.layer_norm(x, (50,), w, None)
    assert _plans() >= 2
    del x, w
    gc.collect()
    assert all(r() is None for r in refs), "a saved plan keeps a recorded call's tensor alive"


def test_negative_views_are_read_as_values(device):
    """torch._neg_view tensors hold un-negated memory: materialized by the full path, never replayed."""
    base = randn((4, 8), torch.float32, device)
    for _ in range(2):
        neg = torch._neg_view(base)
        assert_close(tr.sum(neg, 1), -base.double().sum(1).cpu(), n=8, what="sum of a neg view")
    w = randn((8,), torch.float32, device)
    ref = torch.nn.functional.layer_norm(base.double().cpu(), (8,), -w.double().cpu())
    assert_close(tr.layer_norm(base, (8,), torch._neg_view(w)), ref, n=8, what="neg weight")
    xb, rm = randn((4, 3, 5), torch.float32, device), randn((3,), torch.float32, device)
    rm_neg, rv = torch._neg_view(rm), torch.ones(3, device=device)
    rm_ref, rv_ref = -rm.double().cpu(), rv.double().cpu().clone()
    ref = torch.nn.functional.batch_norm(xb.double().cpu(), rm_ref, rv_ref, None, None, True, 0.5, 1e-5)
    assert_close(tr.batch_norm(xb, rm_neg, rv, None, None, True, 0.5, 1e-5), ref, n=20, what="bn")
    assert_close(rm_neg.clone(), rm_ref, n=20, what="neg running_mean updated through the view")


@pytest.mark.parametrize("hook", ["function", "chain"])
def test_straight_line_plan_takes_the_generic_path_under_launch_hooks(monkeypatch, hook):
    """A profiler's launch hook (a plain function, or a non-empty HookChain of Triton 3.x) must see every
    launch: the generated code then goes through the launcher's ``run`` with the hooks, never the C entry."""
    from triton import knobs

    log: list = []
    plan, x, pool = _fake_plan(monkeypatch, log)

    def enter(metadata):  # noqa: ANN001, ANN202
        return None
    if hook == "function":
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", enter)
    else:
        chain = knobs.HookChain()
        chain.add(enter)
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", chain)
    pool[:] = [torch.zeros(4), torch.zeros(512, dtype=torch.uint8)]
    plan.run(x, None)
    assert [entry[0] for entry in log] == ["run", "run"]
    assert all(entry[1] is knobs.runtime.launch_enter_hook for entry in log)


def test_saved_plans_never_serve_calls_that_need_autograd(device):
    """A plan recorded by an inference call must not answer the same layout when autograd needs the call: an input
    or a weight that requires grad (with grad mode on), an open forward-AD level with a dual input, a torch.func
    transform. Those calls take the ops' Functions (outputs attached to the graph, tangents kept)."""
    import torch.autograd.forward_ad as fwAD

    caches().clear()
    x = randn((6, 40), torch.float32, device)
    w = randn((40,), torch.float32, device)
    for _ in range(2):  # recorded, then replayed
        tr.softmax(x, -1)
        tr.layer_norm(x, (40,), w, None)
        tr.sum(x, -1)
    assert _plans() >= 3
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    assert tr.softmax(xg, -1).grad_fn is not None and tr.sum(xg, -1).grad_fn is not None
    assert tr.layer_norm(x, (40,), wg, None).grad_fn is not None, "a weight that requires grad was dropped"
    with torch.no_grad():
        assert tr.softmax(xg, -1).grad_fn is None
    tangent = randn((6, 40), torch.float32, device)
    with fwAD.dual_level():
        out = tr.softmax(fwAD.make_dual(x, tangent), -1)
        jvp = fwAD.unpack_dual(out).tangent
    assert jvp is not None, "the forward-AD tangent was dropped"
    y = torch.softmax(x.double().cpu(), -1)
    assert_close(jvp, y * (tangent.double().cpu() - (y * tangent.double().cpu()).sum(-1, keepdim=True)), n=40,
                 scale=4, what="softmax jvp")
    batched = torch.func.vmap(lambda r: tr.softmax(r, -1))(x.unsqueeze(1))
    assert_close(batched.squeeze(1), y, n=40, scale=4, what="vmap")
    grads = torch.func.grad(lambda r: tr.sum(tr.softmax(r, -1) * x))(x)
    assert grads.shape == x.shape
