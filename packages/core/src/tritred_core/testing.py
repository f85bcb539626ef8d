"""Torch-free helpers for testing plugins and launch rules: fake devices and a problem grid.

The torch-based conformance kit (each reduction against its reference) is ``tritred_ops.testing``.
"""

from __future__ import annotations

from collections.abc import Iterator

from .models import DeviceInfo, LaunchConfig, Problem, ReductionSpec
from .registry import Registry

#: An H200 as tritred sees it (132 SMs, 228 KiB shared memory per SM, 60 MiB L2).
FAKE_H200 = DeviceInfo(name="NVIDIA H200", backend="cuda", compute_capability=(9, 0), sm_count=132,
                       max_shared_mem=227 * 1024, regs_per_sm=65536, l2_bytes=60 * 1024 * 1024)
#: The Triton interpreter on a CPU (``TRITON_INTERPRET=1``).
FAKE_INTERPRETER = DeviceInfo(name="cpu (TRITON_INTERPRET=1)", backend="interpreter")


def problem_grid(op: str, dtype: str = "float32") -> Iterator[Problem]:
    """Canonical problems covering inner/outer layouts, tiny to huge N, few to many outputs."""
    for M in (1, 3, 4096):
        for N in (1, 7, 256, 1000, 4096, 65537, 1 << 20):
            yield Problem(op=op, dtype=dtype, M=M, N=N, K=1, stride_m=N, stride_n=1)
            yield Problem(op=op, dtype=dtype, M=M, N=N, K=33, stride_m=N * 33, stride_n=33, stride_k=1)


def assert_valid_launch_configs(registry: Registry, spec: ReductionSpec, device: DeviceInfo,
                                problems: Iterator[Problem] | None = None) -> list[LaunchConfig]:
    """Ask the registry for every problem of the grid; each answer must be a LaunchConfig that fits."""
    configs = []
    for problem in problems if problems is not None else problem_grid(spec.name):
        config = registry.launch_config(spec, problem, device)
        assert isinstance(config, LaunchConfig), f"{spec.name}: {problem} -> {config!r}"
        config.check_fits(problem)
        assert config.decided_by, f"{spec.name}: decided_by not recorded for {problem}"
        configs.append(config)
    return configs
