"""tritred-bench tests: the quick suite on the CPU under the Triton interpreter (CUDA when present).

TRITON_INTERPRET must be set before tritred_ops (and its @triton.jit kernels) is imported, so it is decided here.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


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


def cross_entropy_record():  # type: ignore[no-untyped-def]
    """A torch-only ``cross_entropy`` record (impl = reference = F.cross_entropy), registered like tritred's own
    will be: for the bench's cross_entropy paths before tritred ships the op."""
    import torch.nn.functional as F
    from tritred_core import Problem, Reduction, ReductionSpec

    def make_inputs(shape, dtype, device="cpu", dim=-1, seed=0):  # type: ignore[no-untyped-def]
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(tuple(shape), generator=g).to(dtype).to(device)
        t = torch.randint(0, shape[1], (shape[0], *shape[2:]), generator=g).to(device)
        return (x, t), {}

    def byte_count(x, target, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = F.cross_entropy(x.to("meta"), target.to("meta"), *args, **kwargs)
        return x.numel() * x.element_size() + target.numel() * 8 + out.numel() * x.element_size()

    spec = ReductionSpec(name="cross_entropy", family="softmax", dtypes=("float16", "bfloat16", "float32"),
                         mirrors="torch.nn.functional.cross_entropy")
    return Reduction(spec=spec, impl=F.cross_entropy, reference=F.cross_entropy, make_inputs=make_inputs,
                     problem=lambda *a, **k: Problem(op="cross_entropy", dtype="float32", M=1, N=1, K=1),
                     byte_count=byte_count)


@pytest.fixture
def registry_with_cross_entropy():  # type: ignore[no-untyped-def]
    """A registry of the installed reductions plus :func:`cross_entropy_record` when none is registered."""
    from tritred_core import Registry, get_registry, hookimpl

    have = get_registry().reductions(strict=False)
    records = list(have.values())
    if "cross_entropy" not in have:
        records.append(cross_entropy_record())

    class Plugin:
        @hookimpl
        def tritred_register_reductions(self):  # type: ignore[no-untyped-def]
            return records

    reg = Registry(autoload=False)
    reg.register(Plugin(), name="bench-tests")
    return reg
