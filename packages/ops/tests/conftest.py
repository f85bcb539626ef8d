"""Test setup for tritred_ops: CPU interpreter by default, compiled CUDA with TRITRED_TEST_DEVICE=cuda.

TRITON_INTERPRET must be set before tritred_ops (and its @triton.jit kernels) is imported, so it is decided here,
at conftest import time.
"""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
import torch

_DEVICE = os.environ.get("TRITRED_TEST_DEVICE") or (
    "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0") else "cpu"
)
if _DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(__file__))  # ops_helpers (pytest runs in importlib mode)
# Never read (or write) the user's tuning cache from tests.
os.environ.setdefault("TRITRED_TUNE_CACHE", os.path.join(tempfile.mkdtemp(prefix="tritred-tune-"), "tuning.json"))

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("dev", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("gpu", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if _DEVICE == "cpu" else "gpu"))


@pytest.fixture(scope="session")
def device() -> str:
    return _DEVICE


@pytest.fixture(autouse=True, scope="session")
def bfloat16_rounds_to_nearest():
    """On the CPU, float32 -> bfloat16 conversions inside kernels round to nearest even, as the GPU's ``cvt.rn``
    does. The Triton interpreter truncates them (its ``_convert_float`` drops the low bits whatever the rounding
    mode): bfloat16 outputs came out up to one ulp low, and a gradient that reuses its op's output (logsumexp's
    exp(x - out)) then missed torch's by up to |out| 2^-7 relative, failing about 1 draw in 200. torch converts."""
    from triton.runtime import interpreter

    real = getattr(interpreter, "_convert_float", None)
    if _DEVICE != "cpu" or real is None:
        yield
        return
    import numpy as np
    import triton.language as tl

    def convert(data, src, dst, rounding_mode):  # noqa: ANN001, ANN202
        if src == tl.float32 and dst == tl.bfloat16:
            x = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))
            return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return real(data, src, dst, rounding_mode)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(interpreter, "_convert_float", convert)
        yield


@pytest.fixture(autouse=True)
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tensor tritred allocates starts as NaN (or a sentinel): an element a kernel forgets stays visible."""
    real_empty, real_empty_like, real_empty_strided = torch.empty, torch.empty_like, torch.empty_strided

    def fill(t: torch.Tensor) -> torch.Tensor:
        if t.numel() and t.device.type != "meta":
            if t.dtype.is_floating_point:
                t.fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.fill_(True)
            else:
                t.fill_(-77)
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: fill(real_empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: fill(real_empty_like(*a, **k)))
    monkeypatch.setattr(torch, "empty_strided", lambda *a, **k: fill(real_empty_strided(*a, **k)))  # replays


@pytest.fixture
def force(monkeypatch: pytest.MonkeyPatch):
    """force(op, direction="forward", **config): register a plugin whose launch config wins for ``op``'s
    problems of that direction ("forward", "backward"; None: both), to reach every dispatch branch."""
    from tritred_core import LaunchConfig, get_registry, hookimpl

    reg = get_registry()
    names: list[str] = []

    def _force(op: str, direction: str | None = "forward", **cfg: object) -> None:
        config = LaunchConfig(**cfg)  # type: ignore[arg-type]

        class Forced:
            @hookimpl
            def tritred_launch_config(self, spec, problem, device):  # noqa: ANN001
                if spec.name != op or direction not in (None, problem.direction):
                    return None
                return config

        names.append(reg.register(Forced(), name=f"test-force-{op}-{len(names)}"))

    yield _force
    for n in names:
        reg.unregister(n)


def _spy_on_common(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """What each call of ``_common.<name>`` returned during the test, in order (the function still runs)."""
    from tritred_ops import runtime as C

    seen: list[int] = []
    real = getattr(C, name)
    monkeypatch.setattr(C, name, lambda *a: seen.append(real(*a)) or seen[-1])
    return seen


@pytest.fixture
def unroll_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The UNROLL each launch of the call received from ``runtime.unrolled_chunks`` (0: the rolled loop), in order."""
    return _spy_on_common(monkeypatch, "unrolled_chunks")


@pytest.fixture
def align_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ALIGN each row launch of the call received from ``runtime.row_align`` (0: unshifted tiles), in order."""
    return _spy_on_common(monkeypatch, "row_align")


@pytest.fixture
def tail_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The TAIL each single-pass row launch of the call received from ``runtime.single_tail`` (0: one tile)."""
    return _spy_on_common(monkeypatch, "single_tail")


def _spy_on_launch(monkeypatch: pytest.MonkeyPatch, option: str) -> list[object]:
    """From now on, the keyword ``option`` of each kernel launch (``_replay.Recorder.launch``), in order (None
    where a launch has none); the launch still runs."""
    from tritred_ops.runtime import replay as _replay

    seen: list[object] = []
    real = _replay.Recorder.launch

    def spy(self, kernel, grid, *args, **kwargs):  # noqa: ANN001
        seen.append(kwargs.get(option))
        return real(self, kernel, grid, *args, **kwargs)

    monkeypatch.setattr(_replay.Recorder, "launch", spy)
    return seen


@pytest.fixture
def launch_spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    """From now on, each kernel launch (``_replay.Recorder.launch``) as (kernel name, keyword options), in order:
    which kernel a shrunk test reached, with which constexprs (a replayed plan launches without it)."""
    from tritred_ops.runtime import replay as _replay

    seen: list[tuple[str, dict]] = []
    real = _replay.Recorder.launch

    def spy(self, kernel, grid, *args, **kwargs):  # noqa: ANN001
        seen.append((getattr(getattr(kernel, "fn", kernel), "__name__", repr(kernel)), dict(kwargs)))
        return real(self, kernel, grid, *args, **kwargs)

    monkeypatch.setattr(_replay.Recorder, "launch", spy)
    return seen


@pytest.fixture
def config_spy(monkeypatch: pytest.MonkeyPatch) -> list:
    """The LaunchConfig of each decision (``runtime.decide``) of the test, in order: the strategy a call took."""
    from tritred_ops import runtime as C

    seen: list = []
    real = C.decide
    monkeypatch.setattr(C, "decide", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    return seen


@pytest.fixture
def unroll_out_spy(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The UNROLL_OUT of each launch of the test (layer_norm's unrolled normalizing sweep), in order."""
    return _spy_on_launch(monkeypatch, "UNROLL_OUT")


@pytest.fixture
def phase_spy(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The PHASE of each launch of the test (split rows: 3 for the one cooperative launch, 1 and 2 for two)."""
    return _spy_on_launch(monkeypatch, "PHASE")


@pytest.fixture
def wait_spy(monkeypatch: pytest.MonkeyPatch):
    """wait_spy() -> list: from now on, the WAIT option of each kernel launch, in order: None for a plain launch,
    False for one that ``runtime.dependent_launch`` made dependent (patched to ``{"WAIT": False}``: the interpreter
    cannot wait, and a CPU run has no dependent launch). Saved plans are cleared: the next call takes the full
    path, which is where launches are decided."""
    from tritred_ops import runtime as C
    from tritred_ops.runtime.caches import caches

    def start() -> list[object]:
        seen = _spy_on_launch(monkeypatch, "WAIT")
        monkeypatch.setattr(C, "dependent_launch", lambda d: {"WAIT": False})
        caches().clear()
        return seen

    return start
