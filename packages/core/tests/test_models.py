"""Validation of the frozen pydantic models: ReductionSpec, Problem, DeviceInfo, LaunchConfig, Reduction."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from tritred_core import (
    FLOAT_DTYPES,
    INTEGER_DTYPES,
    KNOBS,
    STRATEGIES,
    DeviceInfo,
    LaunchConfig,
    Problem,
    Reduction,
    ReductionSpec,
)


def _spec(**kw: object) -> ReductionSpec:
    args: dict[str, object] = {"name": "toy_sum", "family": "reduce", "mirrors": "torch.sum"}
    args.update(kw)
    return ReductionSpec(**args)  # type: ignore[arg-type]


# -- frozen, extra="forbid", hashable ---------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: _spec(),
    lambda: Problem(op="sum", dtype="float32", M=2, N=3, K=1),
    lambda: DeviceInfo(name="cpu", backend="interpreter"),
    lambda: LaunchConfig(strategy="single_pass", BLOCK_N=8),
])
def test_models_are_frozen_and_hashable(make: object) -> None:
    obj = make()  # type: ignore[operator]
    field = next(iter(type(obj).model_fields))
    with pytest.raises(ValidationError):
        setattr(obj, field, getattr(obj, field))
    assert hash(obj) == hash(make())  # type: ignore[operator]
    assert obj == make()  # type: ignore[operator]
    assert {obj: 1}[make()] == 1  # usable as a cache key  # type: ignore[operator]


@pytest.mark.parametrize("cls, kwargs", [
    (ReductionSpec, {"name": "x", "family": "reduce", "mirrors": "torch.x"}),
    (Problem, {"op": "sum", "dtype": "float32", "M": 1, "N": 1, "K": 1}),
    (DeviceInfo, {"name": "cpu", "backend": "interpreter"}),
    (LaunchConfig, {"strategy": "multi_pass"}),
])
def test_extra_fields_are_forbidden(cls: type, kwargs: dict[str, object]) -> None:
    cls(**kwargs)
    with pytest.raises(ValidationError, match=r"[Ee]xtra"):
        cls(**kwargs, unexpected=1)


def test_reduction_record_is_frozen_and_forbids_extra() -> None:
    rec = Reduction(spec=_spec(), impl=len, reference=len, make_inputs=len,
                    problem=lambda: Problem(op="toy_sum", dtype="float32", M=1, N=1, K=1))
    assert rec.byte_count is None
    with pytest.raises(ValidationError):
        rec.impl = abs  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Reduction(spec=_spec(), impl=len, reference=len, make_inputs=len, problem=len, extra=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Reduction(spec=_spec(), impl="not callable", reference=len, make_inputs=len, problem=len)  # type: ignore[arg-type]


# -- ReductionSpec ----------------------------------------------------------------------------------------------

def test_spec_defaults_and_tuple_fields() -> None:
    spec = _spec(dtypes=["float32", "float16"], outputs=["values", "indices"])
    assert spec.dtypes == ("float32", "float16")
    assert isinstance(spec.outputs, tuple)
    assert _spec().dtypes == FLOAT_DTYPES
    assert _spec().outputs == ("out",)
    assert _spec().plugin is None and _spec().version is None


@pytest.mark.parametrize("name", ["Softmax", "1sum", "my-op", "", "sum op"])
def test_spec_name_pattern(name: str) -> None:
    with pytest.raises(ValidationError):
        _spec(name=name)


def test_spec_family_and_dtypes_validated() -> None:
    with pytest.raises(ValidationError):
        _spec(family="elementwise")
    with pytest.raises(ValidationError, match="unknown or empty dtypes"):
        _spec(dtypes=("float32", "complex64"))
    with pytest.raises(ValidationError, match="unknown or empty dtypes"):
        _spec(dtypes=())
    assert _spec(dtypes=INTEGER_DTYPES + FLOAT_DTYPES).dtypes[0] == "bool"


def test_spec_declares_every_strategy_and_knob_by_default() -> None:
    """A spec that declares none takes every strategy and knob (third-party specs written before they existed)."""
    spec = _spec()
    assert spec.strategies == STRATEGIES == ("single_pass", "multi_pass", "split", "split_rows")
    assert spec.knobs == KNOBS == ("BLOCK_TAIL", "threads_per_row", "num_programs")
    spec.check_takes(LaunchConfig(strategy="split_rows", BLOCK_N=64, split=4, num_programs=8))
    with pytest.raises(ValidationError):
        _spec(strategies=())
    with pytest.raises(ValidationError):
        _spec(strategies=("two_pass",))
    with pytest.raises(ValidationError):
        _spec(knobs=("num_stages",))


def test_spec_refuses_what_it_does_not_declare() -> None:
    """check_takes: a knob set to anything but its default, or a strategy, that the spec does not declare raises
    ValueError naming the field and who gave the config; a knob left at its default is fine."""
    spec = _spec(strategies=("single_pass", "multi_pass"), knobs=("num_programs",))
    spec.check_takes(LaunchConfig(strategy="multi_pass", num_programs=4))
    spec.check_takes(LaunchConfig(strategy="single_pass", BLOCK_TAIL=0, threads_per_row=0))
    with pytest.raises(ValueError, match=r"toy_sum: BLOCK_TAIL=16 \(config from plug\) is not taken"):
        spec.check_takes(LaunchConfig(strategy="single_pass", BLOCK_N=32, BLOCK_TAIL=16, decided_by="plug"))
    with pytest.raises(ValueError, match="threads_per_row=8 .*declares: num_programs"):
        spec.check_takes(LaunchConfig(strategy="single_pass", threads_per_row=8))
    with pytest.raises(ValueError, match="strategy 'split' .*implement: single_pass, multi_pass"):
        spec.check_takes(LaunchConfig(strategy="split", split=2))
    with pytest.raises(ValueError, match="knobs it declares: none"):
        _spec(knobs=()).check_takes(LaunchConfig(strategy="multi_pass", num_programs=4))


# -- Problem ----------------------------------------------------------------------------------------------------

def test_problem_properties() -> None:
    p = Problem(op="sum", dtype="float32", M=3, N=5, K=7, stride_m=35, stride_n=7, stride_k=1)
    assert p.outputs == 21
    assert p.numel == 105
    assert not p.inner  # K > 1 and the reduced axis is strided: column kernels
    assert Problem(op="sum", dtype="float32", M=3, N=5, K=1).inner
    assert Problem(op="sum", dtype="float32", M=3, N=5, K=7, stride_n=1, stride_k=5).inner
    assert Problem(op="sum", dtype="float32", M=3, N=1, K=7, stride_n=7).inner
    assert p.layout == "strided"
    assert p.direction == "forward"
    back = p.model_copy(update={"direction": "backward"})
    assert back != p and hash(back) != hash(p)  # distinct cache keys for the two passes
    with pytest.raises(ValidationError):
        Problem(op="sum", dtype="float32", M=3, N=5, K=1, direction="sideways")


def test_problem_bounds() -> None:
    Problem(op="sum", dtype="float32", M=0, N=0, K=1)  # empty problems are representable
    with pytest.raises(ValidationError):
        Problem(op="sum", dtype="float32", M=-1, N=1, K=1)
    with pytest.raises(ValidationError):
        Problem(op="sum", dtype="float32", M=1, N=1, K=0)
    with pytest.raises(ValidationError):
        Problem(op="sum", dtype="float32", M=1, N=1, K=1, layout="transposed")  # type: ignore[arg-type]


# -- DeviceInfo -------------------------------------------------------------------------------------------------

def test_device_info_validation() -> None:
    d = DeviceInfo(name="NVIDIA H200", backend="cuda", compute_capability=(9, 0), sm_count=132)
    assert d.compute_capability == (9, 0)
    with pytest.raises(ValidationError):
        DeviceInfo(name="x", backend="rocm")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        DeviceInfo(name="x", backend="cuda", sm_count=0)


# -- LaunchConfig -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"])
@pytest.mark.parametrize("value", [0, 3, 6, 1000, -4])
def test_launch_config_blocks_must_be_powers_of_two(field: str, value: int) -> None:
    with pytest.raises(ValidationError, match="power of two"):
        LaunchConfig(strategy="multi_pass", **{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["BLOCK_M", "BLOCK_N", "BLOCK_K"])
@pytest.mark.parametrize("value", [1, 2, 64, 1024])
def test_launch_config_powers_of_two_accepted(field: str, value: int) -> None:
    assert getattr(LaunchConfig(strategy="multi_pass", **{field: value}), field) == value  # type: ignore[arg-type]


def test_launch_config_limits() -> None:
    LaunchConfig(strategy="multi_pass", num_warps=32)
    with pytest.raises(ValidationError, match="num_warps"):
        LaunchConfig(strategy="multi_pass", num_warps=64)
    with pytest.raises(ValidationError, match="num_stages"):
        LaunchConfig(strategy="multi_pass", num_stages=0)
    with pytest.raises(ValidationError, match="num_stages"):
        LaunchConfig(strategy="multi_pass", num_stages=9)
    with pytest.raises(ValidationError):
        LaunchConfig(strategy="multi_pass", num_programs=-1)
    with pytest.raises(ValidationError, match="2\\*\\*20"):
        LaunchConfig(strategy="multi_pass", BLOCK_M=1024, BLOCK_N=2048)
    LaunchConfig(strategy="multi_pass", BLOCK_M=512, BLOCK_N=2048)  # exactly 2**20
    with pytest.raises(ValidationError):
        LaunchConfig(strategy="two_stage")  # type: ignore[arg-type]


def test_split_only_with_strategy_split() -> None:
    assert LaunchConfig(strategy="split", split=8).split == 8
    assert LaunchConfig(strategy="split").split == 1
    for strategy in ("single_pass", "multi_pass"):
        assert LaunchConfig(strategy=strategy).split == 1  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="needs strategy='split' or 'split_rows'"):
            LaunchConfig(strategy=strategy, split=2)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        LaunchConfig(strategy="split", split=0)


def test_check_fits_single_pass_needs_block_n_at_least_n() -> None:
    p = Problem(op="softmax", dtype="float16", M=8, N=1000, K=1)
    LaunchConfig(strategy="single_pass", BLOCK_N=1024).check_fits(p)
    with pytest.raises(ValueError, match=r"single_pass needs BLOCK_N \+ BLOCK_TAIL >= N.*BLOCK_N=512.*N=1000.*softmax"):
        LaunchConfig(strategy="single_pass", BLOCK_N=512).check_fits(p)
    # multi_pass and split loop over N: any BLOCK_N fits
    LaunchConfig(strategy="multi_pass", BLOCK_N=16).check_fits(p)
    LaunchConfig(strategy="split", BLOCK_N=16, split=4).check_fits(p)
    # N == BLOCK_N is the boundary
    LaunchConfig(strategy="single_pass", BLOCK_N=1024).check_fits(p.model_copy(update={"N": 1024}))


def test_model_copy_keeps_validation_semantics() -> None:
    cfg = LaunchConfig(strategy="single_pass", BLOCK_N=64)
    tagged = cfg.model_copy(update={"decided_by": "me"})
    assert tagged.decided_by == "me" and cfg.decided_by is None
    assert tagged != cfg  # decided_by is part of equality
    assert LaunchConfig.model_validate(tagged.model_dump()) == tagged


def test_launch_fields_leave_out_the_annotations() -> None:
    """Two configs that launch alike compare equal by ``launch_fields`` whatever their annotations (who decided,
    tuned, the rules, the reasons); any knob tells them apart."""
    from tritred_core import ANNOTATIONS

    cfg = LaunchConfig(strategy="multi_pass", BLOCK_N=4096, num_warps=16)
    tagged = cfg.model_copy(update={"decided_by": "me", "tuned": True, "rule": "m:f", "why": "BLOCK_N=4096: x"})
    assert tagged != cfg and tagged.launch_fields() == cfg.launch_fields()
    assert set(cfg.model_dump()) - set(cfg.launch_fields()) == ANNOTATIONS
    assert cfg.model_copy(update={"num_warps": 8}).launch_fields() != cfg.launch_fields()
