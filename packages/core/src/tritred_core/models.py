"""Frozen pydantic models shared by every layer of tritred.

They describe *what* a reduction is (:class:`ReductionSpec`), *which call* is being made in canonical form
(:class:`Problem`), *where* it runs (:class:`DeviceInfo`) and *how* it is launched (:class:`LaunchConfig`).
All are frozen with tuple fields, so they are hashable and serve as cache keys. Nothing here imports torch or
triton: dtypes are spelled as torch spells them without the ``torch.`` prefix (``"bfloat16"``, ``"int64"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Floating dtypes every float reduction accepts.
FLOAT_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")
#: Integer and bool dtypes that sum/prod/amax/amin/max/min also accept.
INTEGER_DTYPES: tuple[str, ...] = ("bool", "uint8", "int8", "int16", "int32", "int64")

Family = Literal["reduce", "statistics", "softmax", "normalize"]
Strategy = Literal["single_pass", "multi_pass", "split", "split_rows"]
#: The optional fields of a :class:`LaunchConfig` that only some kernels honour (each has a default that every kernel
#: takes: 0). A spec declares the ones its kernels honour (:attr:`ReductionSpec.knobs`).
Knob = Literal["BLOCK_TAIL", "threads_per_row", "num_programs"]

#: Every strategy and every knob: a spec's defaults (a third-party spec that declares none takes any config).
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
KNOBS: tuple[Knob, ...] = get_args(Knob)
#: The fields of a :class:`LaunchConfig` that say where it came from, not how it launches (left out where two
#: configs are compared as launches, and from tuning files).
ANNOTATIONS: frozenset[str] = frozenset({"decided_by", "tuned", "rule", "why"})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _is_pow2(v: int) -> bool:
    return v >= 1 and (v & (v - 1)) == 0


class ReductionSpec(_Frozen):
    """What a reduction is: its name, family, dtypes, outputs, the torch op it mirrors, and the launch configs its
    kernels take.

    ``strategies`` are the :data:`Strategy` values its kernels implement, ``knobs`` the optional
    :class:`LaunchConfig` fields (:data:`Knob`) they honour. The registry refuses a config whose strategy, or whose
    knob set to anything but its default, the spec does not declare (:meth:`check_takes`). Both default to
    everything, so that a spec that declares neither takes any config its kernels can be given (the launcher then
    decides what a config it has no kernel for means).
    """

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    family: Family
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    outputs: tuple[str, ...] = ("out",)
    mirrors: str = Field(description="the torch op this reduction mirrors, e.g. 'torch.softmax'")
    summary: str = ""
    strategies: tuple[Strategy, ...] = Field(default=STRATEGIES, min_length=1,
                                             description="the strategies its kernels implement")
    knobs: tuple[Knob, ...] = Field(default=KNOBS, description="the optional LaunchConfig fields its kernels honour")
    plugin: str | None = Field(default=None, description="filled by the registry: the plugin that provided it")
    version: str | None = Field(default=None, description="filled by the registry: that plugin's version")

    @field_validator("dtypes")
    @classmethod
    def _known_dtypes(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = set(v) - set(FLOAT_DTYPES) - set(INTEGER_DTYPES)
        if unknown or not v:
            raise ValueError(f"unknown or empty dtypes {sorted(unknown)}; known: {FLOAT_DTYPES + INTEGER_DTYPES}")
        return v

    def check_takes(self, config: LaunchConfig) -> None:
        """Raise ValueError when ``config`` asks for a strategy or a knob (a :data:`Knob` field set to anything but
        its default) that this spec does not declare; the message names the field and who gave the config."""
        who = config.decided_by or "the launch-config hook"
        for knob in KNOBS:
            value = getattr(config, knob)
            if value != LaunchConfig.model_fields[knob].default and knob not in self.knobs:
                raise ValueError(f"{self.name}: {knob}={value} (config from {who}) is not taken by its kernels; "
                                 f"the knobs it declares: {', '.join(self.knobs) or 'none'}")
        if config.strategy not in self.strategies:
            raise ValueError(f"{self.name}: strategy {config.strategy!r} (config from {who}) is not one its kernels "
                             f"implement: {', '.join(self.strategies)}")


class Problem(_Frozen):
    """The canonical form of one call: the input viewed as M x N x K, reduced over N.

    ``M`` is the product of the kept dims before the reduced axis, ``K`` of those after it, ``N`` of the reduced
    dims; ``stride_*`` are element strides of that view (any value: views, transposes and expanded inputs keep
    their layout). ``layout`` says how the view was obtained: ``"strided"`` is a free view of the caller's
    tensor, ``"gathered"`` means the dims could not be expressed as one strided reduced axis and at most two
    kept ones, and were packed into a contiguous buffer first (one extra copy, logged: in the input's own order
    where that gives such a view, else kept dims first). ``direction`` says which pass of the op it is: the
    forward pass, or the backward pass's kernel over the same view (the gradient of a row from the row's saved
    output or statistics, weight gradients as column reductions); the built-in rules answer both, and a
    plugin that tunes only the forward pass returns None for ``direction="backward"``.
    """

    op: str
    dtype: str
    direction: Literal["forward", "backward"] = "forward"
    M: int = Field(ge=0)
    N: int = Field(ge=0)
    K: int = Field(ge=1)
    stride_m: int = 0
    stride_n: int = 1
    stride_k: int = 1
    layout: Literal["strided", "gathered"] = "strided"

    @property
    def outputs(self) -> int:
        """Number of reduced results (rows): M * K."""
        return self.M * self.K

    @property
    def numel(self) -> int:
        return self.M * self.N * self.K

    @property
    def inner(self) -> bool:
        """True when the row kernels apply: the reduced axis has unit stride, or there is no faster kept axis K.

        Otherwise (K > 1, strided N) the column kernels tile along K.
        """
        return self.stride_n == 1 or self.K == 1 or self.N <= 1


class DeviceInfo(_Frozen):
    """The device a launch is planned for, read once per device by the ops layer."""

    name: str
    backend: Literal["cuda", "interpreter"]
    compute_capability: tuple[int, int] = (0, 0)
    sm_count: int = Field(default=1, ge=1)
    max_shared_mem: int = Field(default=48 * 1024, ge=0, description="bytes per block")
    regs_per_sm: int = Field(default=65536, ge=0)
    l2_bytes: int = Field(default=0, ge=0)
    warp_size: int = 32


class LaunchConfig(_Frozen):
    """How one problem is launched.

    ``strategy``: ``single_pass`` (a row lives in registers: needs ``BLOCK_N >= N``), ``multi_pass`` (loop over N
    with an online combine: Welford, online softmax), ``split`` (``split`` programs per output each reduce a slice
    of N into partials, a second tiny launch combines them in a fixed order: deterministic; for softmax rows,
    ``split`` programs of at least ``BLOCK_N`` elements hold a row together and merge their partials after a
    per-row barrier in one cooperative launch), ``split_rows`` (that same row holding, named for what it is:
    softmax and log_softmax as ``split``, layer_norm rows of ``split`` programs of at least ``BLOCK_N``
    elements; one read of the input instead of two. For layer_norm not a built-in choice: measured slower than
    its loop on the H200; a plugin or ``tritred tune`` can pick it). Which strategies an op's kernels implement
    is :attr:`ReductionSpec.strategies`.
    ``num_programs`` = 0 lets the launcher use one program per tile; a positive value makes the grid persistent
    (batch_norm: its normalize launch uses about that many programs, each looping over tiles of one channel block).
    ``num_stages``: software-pipelining depth of loops; for the plain reductions (sum, mean, prod, amax, amin) the
    number of tiles loaded per loop iteration: column tiles (a non-contiguous dim), or whole row chunks, unrolled;
    for max/min with indices the whole row chunks per loop iteration; for batch_norm's statistics launch, > 1
    loads each tile one iteration ahead.
    ``BLOCK_TAIL`` (single_pass rows only; 0: none): a second, power-of-two tile of at most ``BLOCK_N`` lanes after
    the first, so that a row just past a power of two (2049 elements) is held in BLOCK_N + BLOCK_TAIL lanes, not
    in a tile twice its width, half of it masked.
    ``threads_per_row`` (single_pass rows only; 0: the kernel's own layout, a warp or more across each row): each
    row spread over that many threads (a power of two <= 32), its other elements in the same threads' registers, so
    that a row's sums take log2(threads_per_row) shuffle levels and its per-row arithmetic is shared by fewer
    threads. Taken by the row single passes of var/std/var_mean/std_mean and layer_norm (the built-in choice for
    short power-of-two rows); their other paths raise ValueError for it when the call runs.
    ``BLOCK_TAIL``, ``threads_per_row`` and ``num_programs`` are the knobs (:data:`Knob`): an op's spec declares
    those its kernels honour (:attr:`ReductionSpec.knobs`), and the registry refuses a config that sets another.
    ``decided_by`` is filled by the registry with the name of the plugin whose hook returned the config, and
    ``tuned`` is set when the config came from a tuning cache. ``rule`` (optional, for people, not launches) names
    the plugin's rules that produced the config, outermost first, as ``module:function`` joined by `` > ``:
    ``tritred explain`` prints each one's docstring (the rule, its reason and its figures). ``why`` (optional, for
    people) gives, knob by knob, the constraint that set it in the innermost rule (``BLOCK_N=4096: the row in one
    tile (N <= 16384 in registers)``), ``; ``-separated.
    """

    strategy: Strategy
    BLOCK_M: int = 1
    BLOCK_N: int = 1024
    BLOCK_K: int = 1
    num_warps: int = 4
    num_stages: int = 1
    num_programs: int = Field(default=0, ge=0)
    split: int = Field(default=1, ge=1)
    BLOCK_TAIL: int = Field(default=0, ge=0)
    threads_per_row: int = Field(default=0, ge=0)
    decided_by: str | None = None
    tuned: bool = False
    rule: str | None = None
    why: str | None = None

    @field_validator("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps")
    @classmethod
    def _pow2(cls, v: int) -> int:
        if not _is_pow2(v):
            raise ValueError(f"must be a power of two >= 1, got {v}")
        return v

    @field_validator("num_warps")
    @classmethod
    def _warps(cls, v: int) -> int:
        if v > 32:
            raise ValueError(f"num_warps must be <= 32, got {v}")
        return v

    @field_validator("num_stages")
    @classmethod
    def _stages(cls, v: int) -> int:
        if not 1 <= v <= 8:
            raise ValueError(f"num_stages must be in [1, 8], got {v}")
        return v

    @model_validator(mode="after")
    def _split_only_for_split(self) -> LaunchConfig:
        if self.strategy not in ("split", "split_rows") and self.split != 1:
            raise ValueError(f"split={self.split} needs strategy='split' or 'split_rows' (got {self.strategy!r})")
        if self.BLOCK_TAIL:
            if self.strategy != "single_pass":
                raise ValueError(f"BLOCK_TAIL={self.BLOCK_TAIL} needs strategy='single_pass' (got {self.strategy!r})")
            if not _is_pow2(self.BLOCK_TAIL):
                raise ValueError(f"BLOCK_TAIL must be 0 or a power of two, got {self.BLOCK_TAIL}")
            if self.BLOCK_TAIL > self.BLOCK_N:
                raise ValueError(f"BLOCK_TAIL={self.BLOCK_TAIL} must be <= BLOCK_N={self.BLOCK_N} (a tail wider "
                                 f"than the first tile is a wider first tile)")
        if self.threads_per_row:
            if self.strategy != "single_pass":
                raise ValueError(f"threads_per_row={self.threads_per_row} needs strategy='single_pass' "
                                 f"(got {self.strategy!r})")
            if not _is_pow2(self.threads_per_row) or self.threads_per_row > 32:
                raise ValueError(f"threads_per_row must be 0 or a power of two <= 32, got {self.threads_per_row}")
            if self.BLOCK_TAIL:
                raise ValueError("threads_per_row and BLOCK_TAIL cannot be combined (a tail tile keeps the "
                                 "kernel's own layout)")
        if self.BLOCK_M * self.BLOCK_N * self.BLOCK_K > 1 << 20:
            raise ValueError("BLOCK_M * BLOCK_N * BLOCK_K must be <= 2**20 elements")
        return self

    def launch_fields(self) -> dict[str, Any]:
        """The fields that decide the launch: all but :data:`ANNOTATIONS` (where the config came from). Two configs
        launch alike when these are equal; tuning files store them."""
        return self.model_dump(exclude=set(ANNOTATIONS))

    def check_fits(self, problem: Problem) -> None:
        """Raise ValueError when this config cannot compute ``problem`` correctly."""
        if self.strategy == "single_pass" and self.BLOCK_N + self.BLOCK_TAIL < problem.N:
            raise ValueError(
                f"single_pass needs BLOCK_N + BLOCK_TAIL >= N, got BLOCK_N={self.BLOCK_N}, "
                f"BLOCK_TAIL={self.BLOCK_TAIL} for N={problem.N} ({problem.op})"
            )


class Reduction(BaseModel):
    """A registered reduction: its spec plus the callables the ops layer, the CLI and the bench use.

    - ``impl(*args, **kwargs)``: the op itself, called like the torch op it mirrors.
    - ``reference(*args, **kwargs)``: a torch implementation to compare against (the CLI's ``check``).
    - ``make_inputs(shape, dtype, device, dim, seed) -> (args, kwargs)``: a random call of the op. ValueError or
      IndexError (a shape or dim the op does not take) and NotImplementedError (a dtype) say the case does not
      apply: the conformance checks skip it. Any other exception is a failure of the check.
    - ``problem(*args, **kwargs) -> Problem``: the canonical problem of a call (``tritred explain``).
    - ``byte_count(*args, **kwargs) -> int``: bytes read once + written once by a call (the bench).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    spec: ReductionSpec
    impl: Callable[..., Any]
    reference: Callable[..., Any]
    make_inputs: Callable[..., Any]
    problem: Callable[..., Problem]
    byte_count: Callable[..., int] | None = None
