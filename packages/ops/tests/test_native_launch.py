"""The native launcher (``tritred_ops.runtime.native``): a compiled plan's allocations and launches in one C++ call.

Without a GPU: the extension builds from the package's own source (a C++ compiler and ninja, as a user's machine
needs them), the parameter packing follows Triton's types (its layout against the PTX of every launched kernel
variant is checked in ``sm90_compile.py``), and ``TRITRED_NATIVE=0`` turns it off. On CUDA: plans replay through it
(every replay of the suite does), bit for bit as Triton's launcher, under CUDA graph capture too.
"""

from __future__ import annotations

import struct
import types

import pytest
import torch
import tritred_ops as tr
from ops_helpers import assert_close, randn, seed
from tritred_ops.runtime import native
from tritred_ops.runtime import replay as _replay
from tritred_ops.runtime.caches import caches


def _compiler() -> bool:
    import os
    import shutil

    return any(shutil.which(c) for c in (os.environ.get("CXX", "c++"), "g++", "clang++"))


def test_the_extension_builds_from_the_package_source(device):
    if not _compiler():
        pytest.skip("no C++ compiler here: the native launcher cannot be built (the fallback is tested below)")
    ext = native.extension()
    assert ext is not None, "the native launcher did not build (see the warning logged)"
    assert {"make_plan", "run", "param_sizes"} <= set(dir(ext))
    if device == "cpu" and not torch.cuda.is_available():
        try:  # a machine without a driver: the plan cannot be made, with the reason
            ext.make_plan(0, 1, [], 0, [], [])
        except RuntimeError as e:
            assert "libcuda" in str(e)
    with pytest.raises(TypeError, match="plan"):
        ext.run(object())


def test_a_failed_build_warns_with_the_compilers_error_and_falls_back(monkeypatch, caplog):
    from torch.utils import cpp_extension

    def broken(*args, **kwargs):
        raise RuntimeError("Error building extension 'tritred_native'\n[1/2] c++ -MMD -c launcher.cpp\n"
                           "FAILED: [code=127] launcher.o\n/bin/sh: 1: c++: not found\n"
                           "ninja: build stopped: subcommand failed.")

    native.extension.cache_clear()
    monkeypatch.setattr(cpp_extension, "load", broken)
    try:
        with caplog.at_level("WARNING", logger="tritred"):
            assert native.extension() is None
        assert "c++: not found" in caplog.text and "FAILED" in caplog.text and "Triton's launcher" in caplog.text
        plan = types.SimpleNamespace(device=torch.device("cuda", 0), zero_bytes=0)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        assert native.native_plan(plan) is None  # (no extension: every plan replays through Triton's launcher)
    finally:
        native.extension.cache_clear()


def test_parameters_pack_as_tritons_launcher_passes_them():
    sig = {"x_ptr": "*fp32", "w_ptr": "*bf16", "n": "i32", "BLOCK": "constexpr", "s": "i64", "eps": "fp32",
           "flag": "u1", "big": "u64", "lo": "fp64"}
    data, offsets, patches, sizes = native.pack(sig, [None, None, 7, 16, -3, 0.1, True, 2**63, -0.5], {0: 2})
    assert offsets == [0, 8, 16, 24, 32, 40, 48, 56, 64, 72] and sizes == [8, 8, 4, 8, 4, 1, 8, 8, 8, 8]
    assert patches == [(0, 2)]  # the tensor's pointer, filled per call; the absent weight is a null pointer
    assert data[8:16] == bytes(8) and struct.unpack_from("<i", data, 16)[0] == 7
    assert struct.unpack_from("<q", data, 24)[0] == -3 and struct.unpack_from("<f", data, 32)[0] == struct.unpack(
        "<f", struct.pack("<f", 0.1))[0]
    assert data[40] == 1 and struct.unpack_from("<Q", data, 48)[0] == 2**63
    assert struct.unpack_from("<d", data, 56)[0] == -0.5 and data[64:80] == bytes(16)  # then the two scratch pointers


@pytest.mark.parametrize("sig,values", [
    ({"a": "fp16"}, [0.5]),             # half-precision scalars: Triton's own rounding, not packed here
    ({"a": "bf16"}, [0.5]),
    ({"a": ("i32", "i32")}, [(1, 2)]),  # tuple arguments
    ({"a": "nvTmaDesc"}, [None]),       # tensor descriptors
    ({"a": "*fp32"}, [object()]),       # a pointer that is neither a tensor nor an address
    ({"a": "i32"}, [1.5]),              # a value of another type than the parameter's
    ({"a": "i32", "b": "i32"}, [1]),    # a template that does not match the signature
])
def test_parameters_this_path_does_not_pack_go_to_tritons_launcher(sig, values):
    assert native.pack(sig, values, {}) is None


class _Metadata:
    num_ctas, launch_cooperative_grid, launch_pdl, global_scratch_size, profile_scratch_size = 1, False, False, 0, 0
    num_warps, shared, tensordesc_meta = 4, 1024, None


class _Compiled:
    function = 1234
    src = types.SimpleNamespace(signature={"x_ptr": "*fp32", "n": "i32", "B": "constexpr"})

    def __init__(self, **metadata):
        self.metadata = _Metadata()
        vars(self.metadata).update(metadata)


class _Ext:
    def __init__(self, sizes):
        self.sizes = sizes

    def param_sizes(self, function):
        return self.sizes


def _fake_launch(grid=(4, 1, 1), **metadata):
    return types.SimpleNamespace(compiled=_Compiled(**metadata), grid=grid, template=[None, 7, 16], slots=((0, 0),),
                                 kernel="k")


def test_a_launch_is_taken_as_packed_and_refused_otherwise():
    ext = _Ext([8, 4, 8, 8])  # the driver's sizes: the pointer, n, the two scratch pointers
    taken = native._launch(ext, _fake_launch())
    assert taken is not None and taken[:4] == (1234, (4, 1, 1), 128, 1024) and taken[6] == [(0, 0)]
    assert native._launch(_Ext([8, 4, 8]), _fake_launch()) is None  # the driver's layout differs
    for refused in (dict(launch_pdl=True), dict(launch_cooperative_grid=True), dict(num_ctas=2),
                    dict(global_scratch_size=64), dict(shared=native.SHARED_LIMIT + 1)):
        assert native._launch(ext, _fake_launch(**refused)) is None, refused
    assert native._launch(ext, _fake_launch(grid=(0, 1, 1))) is None  # an empty grid (Triton skips the launch)


def test_plans_with_zeroed_temporaries_or_off_cuda_are_not_taken():
    assert native.native_plan(types.SimpleNamespace(device=torch.device("cpu"), zero_bytes=0)) is None
    assert native.native_plan(types.SimpleNamespace(device=torch.device("cuda", 0), zero_bytes=256)) is None


def test_an_out_of_range_value_is_refused_not_wrapped():
    with pytest.raises(struct.error):
        native.pack({"a": "i32"}, [2**31], {})


def test_turned_off_with_the_environment(monkeypatch, device):
    monkeypatch.setenv("TRITRED_NATIVE", "0")
    assert not native.wanted()
    caches().clear()
    x = randn((4, 100), torch.float32, device)
    tr.softmax(x, -1)
    plans = [p for p in caches().plans.values() if isinstance(p, _replay.Plan)]
    assert plans and all("native_run" not in getattr(p.run, "__globals__", {}) for p in plans)
    caches().clear()


def _native_plans() -> list:
    return [p for p in caches().plans.values()
            if isinstance(p, _replay.Plan) and "native_run" in getattr(p.run, "__globals__", {})]


CALLS = {  # name: (call, shape, forced launch config or None)
    "softmax": (lambda x, w: tr.softmax(x, -1), (24, 1000), None),
    "var_mean (two outputs)": (lambda x, w: tr.var_mean(x, -1), (24, 1000), None),
    # (two stages, the first into a temporary of the workspace; a split's merge is a dependent launch, which the
    # native path leaves to Triton's launcher)
    "sum of two dims in stages (a workspace)": (lambda x, w: tr.sum(x, (0, 2)), (64, 32, 48), None),
    "layer_norm, no bias (a null pointer)": (lambda x, w: tr.layer_norm(x, x.shape[-1:], w, None), (24, 1000), None),
    "max with indices": (lambda x, w: tr.max(x, 0), (24, 1000), None),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_native_replays_give_tritons_launchers_bits(name, force, device):
    if device != "cuda":
        pytest.skip("compiled plans only")
    call, shape, cfg = CALLS[name]
    if cfg is not None:
        force(name.split()[0], **cfg)
    caches().clear()
    call(randn(shape, torch.float32, device), randn(shape[-1:], torch.float32, device))
    plans = _native_plans()
    assert len(plans) == 1, "the plan did not take the native launcher"
    x = randn(shape, torch.float32, device, gen_seed=seed() + 1)
    inputs = (x, randn(shape[-1:], torch.float32, device, gen_seed=seed() + 2), None) if "layer_norm" in name else (x,)
    native_out, generic = plans[0].run(*inputs), plans[0].run_generic(*inputs)
    assert len(native_out) == len(generic) >= 1
    for a, b in zip(native_out, generic):
        assert a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype and a.device == b.device
        assert torch.equal(a, b)
    if "workspace" in name:
        assert plans[0].ws_bytes > 0 and len(plans[0].launches) == 2
    caches().clear()


def _recorded_softmax(shape: tuple[int, ...], device: str) -> tuple[torch.Tensor, _replay.Plan]:
    """(an input, the native plan its softmax over rows just recorded); CUDA only (compiled plans)."""
    if device != "cuda":
        pytest.skip("compiled plans only")
    caches().clear()
    x = randn(shape, torch.float32, device)
    tr.softmax(x, -1)
    plans = _native_plans()
    assert plans, "the plan did not take the native launcher"
    return x, plans[0]


def test_native_replays_capture_in_a_cuda_graph(device):
    x, _ = _recorded_softmax((32, 777), device)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        tr.softmax(x, -1)  # warm on the side stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tr.softmax(x, -1)
    x.copy_(randn((32, 777), torch.float32, device, gen_seed=seed() + 1))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(y, torch.softmax(x.double(), -1).float(), rtol=1e-5, atol=1e-7)
    caches().clear()


def test_native_replay_refuses_other_inputs(device):
    x, plan = _recorded_softmax((8, 300), device)
    with pytest.raises(TypeError, match="tensors or None"):
        native.extension().run(plan.run.__globals__["PLAN"], 3)
    with pytest.raises(TypeError, match="inputs"):
        native.extension().run(plan.run.__globals__["PLAN"], x, x)
    caches().clear()


def test_a_stale_build_lock_is_removed_and_a_live_one_kept(tmp_path):
    """torch's build lock has no timeout: a lock older than any build (a process killed while building) must not
    leave every later process waiting; a fresh one (a build in progress elsewhere) stays."""
    import os
    import time

    lock = tmp_path / "lock"
    lock.touch()
    native._clear_stale_lock(lock)
    assert lock.exists()
    old = time.time() - native.STALE_LOCK_SECONDS - 5
    os.utime(lock, (old, old))
    native._clear_stale_lock(lock)
    assert not lock.exists()
    native._clear_stale_lock(lock)  # (no lock: nothing to do)


STUB_DRIVER = r"""
#include <stddef.h>
static size_t sizes[] = {8, 4, 8, 8};  /* a kernel (x_ptr, n) and Triton's two scratch pointers */
int cuLaunchKernel(void) { return 0; }
int cuGetErrorString(int r, const char** s) { *s = "stub"; return 0; }
int cuFuncGetParamInfo(void* f, size_t i, size_t* off, size_t* size) {
  if (i >= 4) return 1;
  *off = 0; *size = sizes[i]; return 0;
}
int cuCtxGetCurrent(void** c) { *c = 0; return 0; }
int cuCtxSetCurrent(void* c) { return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)1; return 0; }
"""

STUB_CHECKS = r"""
import torch
from tritred_ops.runtime import native
ext = native.extension()
data, offs, patches, sizes = native.pack({"x_ptr": "*fp32", "n": "i32", "B": "constexpr"}, [None, 7, 16], {0: 0})
assert list(ext.param_sizes(1)) == sizes == [8, 4, 8, 8]
good = (1, (4, 1, 1), 128, 0, data, offs, patches)
out = [((8, 4), (4, 1), torch.float32)]
ext.make_plan(0, 1, out, 0, [], [good])
bad = {  # each must be refused with a ValueError (no out-of-bounds pointer or parameter reaches a launch)
    "temporaries without a workspace": (0, [0], [good]),
    "a temporary past the workspace": (256, [256], [good]),
    "an empty grid": (0, [], [(1, (0, 1, 1), 128, 0, data, offs, patches)]),
    "fewer parameters than the kernel's": (0, [], [(1, (4, 1, 1), 128, 0, data, offs[:3], patches)]),
    "parameter bytes too short": (0, [], [(1, (4, 1, 1), 128, 0, data[:20], offs, patches)]),
    "a pointer slot out of range": (0, [], [(1, (4, 1, 1), 128, 0, data, offs, [(0, 5)])]),
    "a misaligned pointer patch": (0, [], [(1, (4, 1, 1), 128, 0, data, offs, [(4, 0)])]),
}
for what, (ws, temps, launches) in bad.items():
    try:
        ext.make_plan(0, 1, out, ws, temps, launches)
    except ValueError:
        continue
    raise AssertionError(f"accepted: {what}")
print("ok")
"""


def test_the_extension_checks_plans_against_the_drivers_layout(tmp_path):
    """make_plan (C++) against a stub driver (``libcuda.so.1`` built here, first on the library path of a child
    process): the parameters must be as many as the driver's and of its sizes, and every offset, pointer slot and
    grid inside its bounds, before anything can be launched."""
    import os
    import shutil
    import subprocess
    import sys

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not _compiler():
        pytest.skip("no C or C++ compiler here")
    assert native.extension() is not None
    (tmp_path / "stub.c").write_text(STUB_DRIVER)
    subprocess.run([cc, "-shared", "-fPIC", str(tmp_path / "stub.c"), "-o", str(tmp_path / "libcuda.so.1")],
                   check=True)
    env = {**os.environ, "LD_LIBRARY_PATH": f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    done = subprocess.run([sys.executable, "-c", STUB_CHECKS], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr[-3000:]


def _load_native() -> None:
    if not _compiler():
        pytest.skip("no C++ compiler here: the native launcher cannot be built")
    assert native.extension() is not None


def test_the_native_key_separates_what_find_plan_separates():
    """The C++ key (native_launcher.cpp, make_key) of a call: equal for an equal call, different wherever a plan
    could differ (argument types, sequence types, shape, strides, dtype, alignment, the default dtype, an absent
    tensor), never equal to a find_plan key, and NotImplemented (find_plan keys the call) for what it does not read."""
    _load_native()
    replay, _ = native.loaded_replays({}, _replay.PLAIN)  # (bound to an empty map: every call misses)

    def key(args, *tensors):
        found = replay("op", args, *tensors)
        return found if found is NotImplemented else found[1]

    x = randn((6, 10), torch.float32, "cpu")
    base = key((1, None), x)
    assert key((1, None), x.clone()) == base and hash(key((1, None), x.clone())) == hash(base)
    others = [key((1.0, None), x), key((True, None), x), key((2, None), x), key((1, torch.float32), x),
              key(((1,), None), x), key(([1], None), x), key((torch.Size([1]), None), x), key(((1.0,), None), x),
              key((1, None), x.t()), key((1, None), randn((10, 6), torch.float32, "cpu")),
              key((1, None), x.double()), key((1, None), x.view(-1)[1:60]),
              key((1, None), randn((6, 10), torch.float32, "cpu")[:, :9]), key((1, None), x, None),
              key((1, None), x, x)]
    assert len({base, *others}) == len(others) + 1, "two different calls share a key"
    flat = randn((100,), torch.float32, "cpu")
    assert key((1, None), flat[4:63]) == key((1, None), flat[8:67]) != key((1, None), flat[1:60])  # 16-byte alignment
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert key((1, None), x) != base
    finally:
        torch.set_default_dtype(previous)
    _, python_key = _replay.find_plan("op", (1, None), x)
    assert python_key != base and len(base) == 5 and len(python_key) >= 10

    class Sub(torch.Tensor):
        pass
    import numpy as np

    for args, tensors in [((1,), (x.as_subclass(Sub),)), ((1,), (torch._neg_view(x),)), ((np.int64(1),), (x,)),
                          (([1, torch.tensor(1)],), (x,)), ((object(),), (x,)), ([1], (x,)), ((1,), (3,)),
                          ((1,), (x.to_sparse(),))]:
        assert key(args, *tensors) is NotImplemented, (args, tensors)

    class Unhashable(type):  # (a metaclass with __eq__ and no __hash__: its classes cannot be hashed)
        def __eq__(cls, other):  # noqa: ANN001, ANN204
            return cls is other
    dim = Unhashable("Dim", (), {"__index__": lambda self: 1})()
    assert key((dim,), x) is NotImplemented and key(((dim,),), x) is NotImplemented  # (find_plan: no key either)


def test_the_entry_replay_reads_tensors_by_their_real_type(device):
    """An object that fakes ``__class__`` passes isinstance(..., Tensor), but must never be read as one by the
    entry replay's gradient check (with grad mode on): the op then fails as on the Python path, it does not crash."""
    _load_native()
    tr.softmax(randn((2, 3), torch.float32, device), -1)  # (plugins loaded: the caches below stay)
    caches().load_native()
    assert caches().native_inference is not None

    class Fake:
        requires_grad = False

        @property
        def __class__(self):  # noqa: ANN204
            return torch.Tensor
    with torch.enable_grad(), pytest.raises(AttributeError):
        tr.softmax(Fake(), -1)


def test_native_replay_runs_a_found_plan_and_its_hooks(monkeypatch, device):
    """With the extension loaded, a repeated call is keyed, found and run in one C++ call: the plan's native form
    directly (its Python ``run`` is not called), or its ``run`` where a launch hook (a profiler) is installed, or
    where the plan has no native form (the interpreter; Triton's launcher)."""
    _load_native()
    caches().clear()
    caches().load_native()
    x = randn((8, 300), torch.float32, device)
    tr.softmax(x, -1)
    (key, plan), = caches().plans.items()
    assert len(key) == 5, "the call was not keyed by the native launcher"
    calls: list[int] = []
    run = plan.run

    def counted(*inputs):  # noqa: ANN002, ANN202
        calls.append(1)
        return run(*inputs)
    plan.run = counted
    y = randn((8, 300), torch.float32, device, gen_seed=seed() + 1)
    assert_close(tr.softmax(y, -1), torch.softmax(y.double().cpu(), -1), n=300, scale=4, what="replayed")
    assert calls == ([] if plan.native is not None else [1])
    if plan.native is not None:
        from triton import knobs

        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: None)
        assert_close(tr.softmax(y, -1), torch.softmax(y.double().cpu(), -1), n=300, scale=4, what="hooked")
        assert calls == [1], "a launch hook must see the launch: the plan's run, not its native form"
    caches().clear()
