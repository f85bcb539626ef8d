"""The native launcher (``tritred_ops.runtime.native``): a compiled plan's allocations and launches in one C++ call.

Without a GPU: the extension builds from the package's own source (a C++ compiler and ninja, as a user's machine
needs them), the parameter packing follows Triton's types (its layout against the PTX of every launched kernel
variant is checked in ``sm90_compile.py``), and ``TRITRED_NATIVE=0`` turns it off. On CUDA: plans replay through it
(every replay of the suite does), bit for bit as Triton's launcher, under CUDA graph capture too.
"""

from __future__ import annotations

import struct

import pytest
import torch
import tritred_ops as tr
from ops_helpers import randn, seed
from tritred_ops.runtime import native
from tritred_ops.runtime import replay as _replay
from tritred_ops.runtime.caches import caches


def test_the_extension_builds_from_the_package_source(device):
    ext = native.extension()
    assert ext is not None, "the native launcher did not build (see the warning logged)"
    assert {"make_plan", "run", "param_sizes"} <= set(dir(ext))
    if device == "cpu" and not torch.cuda.is_available():
        try:  # a machine without a driver: the plan cannot be made, with the reason
            ext.make_plan(0, 1, [], 0, 0, [], [])
        except RuntimeError as e:
            assert "libcuda" in str(e)
    with pytest.raises(TypeError, match="plan"):
        ext.run(object())


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


CALLS = {  # name: (call, shape, forced launch config of amax or None)
    "softmax": (lambda x, w: tr.softmax(x, -1), (24, 1000), None),
    "var_mean (two outputs)": (lambda x, w: tr.var_mean(x, -1), (24, 1000), None),
    "amax split columns (a workspace)": (lambda x, w: tr.amax(x, 0), (300, 40),
                                         dict(strategy="split", BLOCK_N=8, BLOCK_K=16, split=3)),
    "layer_norm, no bias (a null pointer)": (lambda x, w: tr.layer_norm(x, x.shape[-1:], w, None), (24, 1000), None),
    "max with indices": (lambda x, w: tr.max(x, 0), (24, 1000), None),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_native_replays_give_tritons_launchers_bits(name, force, device):
    if device != "cuda":
        pytest.skip("compiled plans only")
    call, shape, cfg = CALLS[name]
    if cfg is not None:
        force("amax", **cfg)
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
    if cfg is not None:
        assert plans[0].ws_bytes > 0
    caches().clear()


def test_native_replays_capture_in_a_cuda_graph(device):
    if device != "cuda":
        pytest.skip("CUDA graphs")
    caches().clear()
    x = randn((32, 777), torch.float32, device)
    tr.softmax(x, -1)
    assert _native_plans()
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
    if device != "cuda":
        pytest.skip("compiled plans only")
    caches().clear()
    x = randn((8, 300), torch.float32, device)
    tr.softmax(x, -1)
    plan = _native_plans()[0]
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
