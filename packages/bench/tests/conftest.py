"""tritred-bench tests: the quick suite on the CPU under the Triton interpreter (CUDA when present).

TRITON_INTERPRET must be set before tritred_ops (and its @triton.jit kernels) is imported, so it is decided here.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(__file__))  # bench_helpers (pytest runs in importlib mode)


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="session")
def quick_report(device: str):  # type: ignore[no-untyped-def]
    """The quick suite with tritred and eager, run once per session (a few seconds on the interpreter)."""
    from tritred_bench import load_suite, run

    cases, _ = load_suite("quick")
    return run(cases, providers=["eager"], device=device, quick=True, progress=False)


FAKE_PEERS = os.path.join(os.path.dirname(__file__), "fake_peers")
_FAKE_MODULES = ("quack", "liger_kernel", "flag_gems")


@pytest.fixture
def fake_peers(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The CPU stand-ins of quack, Liger-Kernel and FlagGems (tests/fake_peers) importable for one test, quack
    allowed on the CPU; the real packages, if installed, are shadowed and come back afterwards."""
    import sys

    from tritred_bench.providers import QuackProvider

    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in _FAKE_MODULES}
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(FAKE_PEERS)
    monkeypatch.setattr(QuackProvider, "devices", ("cuda", "cpu"))
    yield FAKE_PEERS
    for k in [k for k in sys.modules if k.split(".")[0] in _FAKE_MODULES]:
        del sys.modules[k]
    sys.modules.update(saved)


def _record(name: str, impl, make_inputs, byte_count):  # type: ignore[no-untyped-def]
    from tritred_core import Problem, Reduction, ReductionSpec

    family = "softmax" if name == "cross_entropy" else "normalize"
    spec = ReductionSpec(name=name, family=family, dtypes=("float16", "bfloat16", "float32"),
                         mirrors=f"torch.nn.functional.{name}")
    return Reduction(spec=spec, impl=impl, reference=impl, make_inputs=make_inputs,
                     problem=lambda *a, **k: Problem(op=name, dtype="float32", M=1, N=1, K=1), byte_count=byte_count)


def stand_in_records() -> dict:  # type: ignore[type-arg]
    """Torch-only ``rms_norm`` and ``cross_entropy`` records (impl = reference = torch's, with autograd), made like
    tritred's own will be: for the bench's paths of these ops wherever tritred does not register them yet."""
    import torch.nn.functional as F

    def ce_inputs(shape, dtype, device="cpu", dim=-1, seed=0):  # type: ignore[no-untyped-def]
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(tuple(shape), generator=g).to(dtype).to(device)
        t = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=g).to(device)
        return (x, t), {}

    def ce_bytes(x, target, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = F.cross_entropy(x.to("meta"), target.to("meta"), *args, **kwargs)
        return x.numel() * x.element_size() + target.numel() * 8 + out.numel() * x.element_size()

    def rms_inputs(shape, dtype, device="cpu", dim=-1, seed=0):  # type: ignore[no-untyped-def]
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(tuple(shape), generator=g).to(dtype).to(device)
        w = torch.randn(tuple(shape[-1:]), generator=g).to(dtype).to(device)
        return (x, [shape[-1]], w), {"eps": None}

    def rms_bytes(x, normalized_shape, weight=None, eps=None):  # type: ignore[no-untyped-def]
        return 2 * x.numel() * x.element_size() + (weight.numel() * weight.element_size() if weight is not None else 0)

    return {"cross_entropy": _record("cross_entropy", F.cross_entropy, ce_inputs, ce_bytes),
            "rms_norm": _record("rms_norm", F.rms_norm, rms_inputs, rms_bytes)}


@pytest.fixture
def training_registry():  # type: ignore[no-untyped-def]
    """A registry of the installed reductions plus :func:`stand_in_records` for the ops not registered."""
    from tritred_core import Registry, get_registry, hookimpl

    have = dict(get_registry().reductions(strict=False))
    for name, rec in stand_in_records().items():
        have.setdefault(name, rec)
    records = list(have.values())

    class Plugin:
        @hookimpl
        def tritred_register_reductions(self):  # type: ignore[no-untyped-def]
            return records

    reg = Registry(autoload=False)
    reg.register(Plugin(), name="bench-tests")
    return reg
