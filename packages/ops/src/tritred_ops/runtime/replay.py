"""Call plans: what one call allocated and launched, replayed by the next call with the same key.

Why: a reduction on a small tensor is host-bound. The full host path of a call (argument checks, canonical view,
launch decision, and Triton's own per-call argument binding and specialization) costs tens of microseconds,
several times a small kernel's run time and several times torch's own dispatch.

How: the first call with a given key runs the full path through a :class:`Recorder`, which allocates the
outputs and temporaries and launches the kernels, noting each. The key holds the op, its non-tensor arguments
and, for every tensor argument, its type, shape, strides, dtype, device and 16-byte alignment: everything the
full path decides (checks, view, config, grid, every integer kernel argument, Triton's specialization) is a
function of it. Later calls with the key :meth:`Plan.run`: allocate the same outputs, launch the same compiled
kernels with the new tensors. No decision is re-made and no check can fail differently, so the result is the one
the full path gives.

A call is saved only when its kernels read and write nothing but the call's own tensors and the recorder's
allocations. A path that copies an input (a gathered layout, a strided weight), or that fills an output with
torch (empty inputs, 0-d max), does not call :meth:`Recorder.save` or fails that test, and runs in full every
time. Under the Triton interpreter (CPU) a plan replays through the JIT function, so CPU tests exercise the same
record and replay logic; compiled, it calls the cached kernel's launcher directly.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Hashable, Sequence
from typing import Any

import torch
from triton import knobs
from tritred_core import get_registry

from .caches import OWNER, Caches, caches
from .checks import Unset
from .native import extension, native_plan
from .trace import Launch, active
from .view import contiguous_strides


def tensor_key(t: torch.Tensor | None) -> Hashable:
    """What a plan depends on in one tensor argument (its data pointer only through Triton's 16-byte alignment
    specialization)."""
    if t is None:
        return None
    if t.is_neg():
        raise TypeError("a negative-bit view is materialized by the full path on every call")
    return (type(t), t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16)


_default_dtype = torch.get_default_dtype

PLAIN = frozenset({bool, int, float, str, type(None), torch.dtype, Unset})


def _plain(a: Any) -> bool:
    """Immutable scalar arguments a key may hold: Python and numpy numbers, None, strings, dtypes. A tensor
    (even 0-d: it can change in place and hashes by identity) or any other object is not one."""
    return type(a) in PLAIN or (isinstance(a, numbers.Number) and not isinstance(a, torch.Tensor))


def _typed(a: Any) -> Hashable:
    """An argument with its type (and its elements' types): ``1``, ``1.0`` and ``True`` are equal as dict keys
    but not to the full path's checks. Raises TypeError for an argument a plan cannot be keyed on."""
    t = type(a)
    if t is tuple or t is list or t is torch.Size:
        if not all(map(_plain, a)):
            raise TypeError("not a plain argument")
        return (t, tuple(map(type, a)), tuple(a))
    if not _plain(a):
        raise TypeError("not a plain argument")
    return (t, a)


def find_plan(op: str, args: tuple[Any, ...], x: Any, *tensors: Any) -> tuple[Plan | None, Hashable]:
    """(the saved plan or None, the call's key or None when the call has no key: a non-tensor or unhashable
    argument, which the full path then reports or handles). ``x`` is the first tensor argument (keyed inline:
    this is the hot path of every repeated call), ``tensors`` the others."""
    types = tuple(map(type, args))
    try:
        if not PLAIN.issuperset(types):  # sequences and other numbers: keyed with their elements' types
            args = tuple(map(_typed, args))
        if x.is_neg():
            raise TypeError("a negative-bit view is materialized by the full path on every call")
        # The default dtype is the result dtype of some calls (logsumexp of integers).
        key: tuple[Any, ...] = (op, _default_dtype(), types, args, type(x), x.shape, x.stride(), x.dtype,
                                x.device, x.data_ptr() % 16)
        if tensors:  # (most calls have one tensor: no map to build and unpack on their hot path)
            key += tuple(map(tensor_key, tensors))
        return get_registry().state(OWNER, Caches).plans.get(key), key
    except (AttributeError, TypeError):
        return None, None
    except RuntimeError as e:
        # A tensor without storage: a torch.func transform's wrapper, or a batched gradient (is_grads_batched runs
        # the backward under vmap, whose tensors torch does not even report as wrapped inside the backward).
        if "storage" in str(e):
            raise NotImplementedError(
                f"tritred {op}: torch.func transforms (vmap, grad, jvp, jacrev) and torch.autograd.grad(..., "
                "is_grads_batched=True) are not supported: the kernels read the tensors' memory, which a "
                "transform's wrapped tensors do not have") from e
        raise


def replay_plan(op: str, args: tuple[Any, ...], x: Any, *tensors: Any) -> tuple[list[torch.Tensor] | None, Hashable]:
    """(the saved plan's outputs for this call, None) when a plan is saved under the call's key, else (None, the
    call's key, or None when the call has none): :func:`find_plan` and :meth:`Plan.run` in one step, the tensor
    arguments (``x`` and ``tensors``) being the plan's inputs in order.

    Once the native launcher is loaded, its ``replay`` keys the call and runs the plan in one C++ call (~1 us less
    than keying in Python); a call it does not key (tensor subclasses, negative-bit views, tensors without storage,
    arguments other than plain scalars and sequences of them) takes :func:`find_plan`. The two keys never compare
    equal (native_launcher.cpp), so a call is always found under the key it was saved with.
    """
    fast = get_registry().state(OWNER, Caches).native_replay
    if fast is not None:
        found = fast(op, args, x, *tensors)
        if found is not NotImplemented:
            return found  # type: ignore[no-any-return]
    plan, key = find_plan(op, args, x, *tensors)
    return (plan.run(x, *tensors) if plan is not None else None), key


def replayed(op: str, args: tuple[Any, ...], x: Any, *tensors: Any) -> list[torch.Tensor] | None:
    """The outputs of the plan saved under the key :func:`replay_plan` gives this call, run, for a call that needs
    no autograd Function (not :func:`~.checks.grad_needed`); else None, and the op goes on as always (its checks,
    its Function or its host path, which keys and records). At a public op's entry, before its own Python layers:
    a repeated inference call is one C++ call (the native launcher's ``replay_inference``) after this one. None
    until the native launcher is loaded (the host path's :func:`replay_plan` then replays)."""
    fast = get_registry().state(OWNER, Caches).native_inference
    return None if fast is None else fast(op, args, x, *tensors)  # type: ignore[no-any-return]


def _hooks() -> tuple[Any, Any]:
    """Triton's launch hooks (profilers); None when none is installed (Triton 3.x keeps an empty chain)."""
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    if enter is not None and not getattr(enter, "calls", True):
        enter = None
    if leave is not None and not getattr(leave, "calls", True):
        leave = None
    return enter, leave


def _c_entry(compiled: Any) -> Any:
    """The launcher's C entry point when its argument layout is the one this module knows (Triton 3.6's
    ``CudaLauncher``: ``launch(grid x3, stream, function, cooperative, pdl, scratch x2, kernel metadata,
    launch metadata, hooks x2, *args)``) and the kernel needs no scratch memory; else None (use ``run``)."""
    run = compiled.run
    try:
        params = list(inspect.signature(type(run).__call__).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params[:6]]
    if (names != ["self", "gridX", "gridY", "gridZ", "stream", "function"] or len(params) != 7
            or params[6].kind is not inspect.Parameter.VAR_POSITIONAL):
        return None
    if any(getattr(run, a, None) != 0 for a in ("global_scratch_size", "profile_scratch_size")):
        return None
    if not all(hasattr(run, a) for a in ("launch", "launch_cooperative_grid", "launch_pdl")):
        return None
    return run


def _stream_getter() -> Any:
    """The function giving the stream Triton itself launches on (the current device's current stream)."""
    from triton.runtime import driver

    active = driver.active
    return lambda: active.get_current_stream(active.get_current_device())


def _raw_stream() -> tuple[Any, Any] | None:
    """(current stream of a device index, current device index): the two calls Triton's own driver makes when
    torch is present (``torch._C._cuda_getCurrentRawStream``), bound directly; None when not available."""
    get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    get_device = getattr(torch._C, "_cuda_getDevice", None)
    return (get_stream, get_device) if get_stream is not None and get_device is not None else None


class _Launch:
    """One kernel launch with the call's tensors as slots: ``args[pos] = pointers[slot]`` for each (pos, slot)."""

    __slots__ = ("c_entry", "compiled", "grid", "kernel", "kwargs", "slots", "template")

    def __init__(self, kernel: Any, compiled: Any, grid: tuple[int, ...], args: Sequence[Any],
                 kwargs: dict[str, Any], slots: tuple[tuple[int, int], ...]) -> None:
        self.kernel, self.compiled, self.slots = kernel, compiled, slots
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.c_entry = None
        # The recorded call's tensors are slots, not kept: a cached plan must not hold the first call's memory.
        args = [None if isinstance(a, torch.Tensor) else a for a in args]
        if compiled is not None:
            # The launcher takes every parameter in signature order, constexprs included (it skips them).
            names = list(kernel.signature.parameters)
            tail = [kwargs[n] if n in kwargs else kernel.signature.parameters[n].default for n in names[len(args):]]
            self.template = [*args, *tail]
            self.kwargs = {}
            self.c_entry = _c_entry(compiled)
        else:
            self.template, self.kwargs = list(args), kwargs

    def __call__(self, pointers: list[Any], stream: Any) -> None:
        args = self.template.copy()
        for pos, slot in self.slots:
            args[pos] = pointers[slot]
        c = self.compiled
        if c is None:  # interpreter: the JIT function runs the kernel on the new tensors
            self.kernel[self.grid](*args, **self.kwargs)
            return
        g0, g1, g2 = self.grid
        enter, leave = _hooks()
        if enter is None and leave is None and self.c_entry is not None:
            e = self.c_entry
            e.launch(g0, g1, g2, stream, c.function, e.launch_cooperative_grid, e.launch_pdl, None, None,
                     c.packed_metadata, None, None, None, *args)
            return
        meta = c.launch_metadata(self.grid, stream, *args) if enter is not None else None
        c.run(g0, g1, g2, stream, c.function, c.packed_metadata, meta, enter, leave, *args)


_ALIGN = 256  # bytes between temporaries in a plan's workspace (Triton specializes on 16-byte alignment)

Alloc = tuple[tuple[int, ...], tuple[int, ...], torch.dtype, torch.device]


class Plan:
    """The allocations and launches of one recorded call; :meth:`run` repeats them on new tensors.

    Pointer slots: the inputs, then the outputs, then the temporaries. Temporaries (partials, statistics) share
    one workspace allocation, each at a fixed, 256-byte aligned offset.
    """

    __slots__ = ("compiled", "device", "fast", "launches", "n_inputs", "native", "outputs", "run", "stream_of",
                 "temps", "ws_bytes", "zero_bytes")

    def __init__(self, n_inputs: int, outputs: list[Alloc], temps: list[tuple[Alloc, int]], ws_bytes: int,
                 launches: list[_Launch], zero_bytes: int = 0) -> None:
        self.n_inputs, self.outputs, self.temps, self.ws_bytes = n_inputs, outputs, temps, ws_bytes
        self.zero_bytes = zero_bytes  # the workspace's first bytes: temporaries that start at zero (counters)
        self.launches = launches
        self.compiled = launches[0].compiled is not None
        self.device = (outputs or [t for t, _ in temps])[0][3] if (outputs or temps) else None
        self.stream_of = _stream_getter() if self.compiled else None
        # run(*inputs): allocate the outputs (and the workspace), launch the kernels; returns the outputs. The
        # generated function itself when there is one (one Python call less per replay): the native launcher's
        # call where it takes the plan (native.py), else Triton's launchers' C calls in straight-line Python.
        native = self.native = native_plan(self) if self.compiled else None  # (native.replay runs it directly)
        if native is not None:
            self.fast = _native_call(self, native)
        elif self.compiled and all(x.c_entry for x in launches):
            self.fast = _straight_line(self)
        else:
            self.fast = None
        self.run = self.fast if self.fast is not None else self.run_generic

    def run_generic(self, *inputs: torch.Tensor | None) -> list[torch.Tensor]:
        """:meth:`run` through the per-launch objects (the interpreter, launch hooks, other launchers)."""
        outs = [torch.empty_strided(shape, stride, dtype=dtype, device=device)
                for shape, stride, dtype, device in self.outputs]
        ws = torch.empty(self.ws_bytes, dtype=torch.uint8, device=self.device) if self.ws_bytes else None
        if self.zero_bytes:
            ws[: self.zero_bytes].zero_()  # type: ignore[index]
        if self.compiled:
            pointers: list[Any] = [t.data_ptr() if t is not None else 0 for t in inputs]
            pointers += [t.data_ptr() for t in outs]
            if ws is not None:
                base = ws.data_ptr()
                pointers += [base + offset for _, offset in self.temps]
            stream = self.stream_of()  # type: ignore[misc]
        else:  # the interpreter reads tensors: temporaries are views of the workspace at their offsets
            pointers = [*inputs, *outs]
            for (shape, _, dtype, _), offset in self.temps:
                size = math.prod(shape) * dtype.itemsize
                pointers.append(ws[offset:offset + size].view(dtype).view(shape))  # type: ignore[index]
            stream = None
        for launch in self.launches:
            launch(pointers, stream)
        return outs


def _hook_guard(plan: Plan, ns: dict[str, Any], params: str) -> list[str]:
    """The generated run's first lines: with a Triton launch hook installed (a profiler), :meth:`Plan.run_generic`,
    which calls them (``_hooks()`` inlined: None or an empty HookChain, Triton 3.x's default, is no hook)."""
    ns.update(RT=knobs.runtime, HookChain=getattr(knobs, "HookChain", None), hooks=_hooks, generic=plan.run_generic)
    if ns["HookChain"] is not None:
        lines = ["    enter, leave = RT.launch_enter_hook, RT.launch_exit_hook",
                 "    if ((enter is not None and (type(enter) is not HookChain or enter.calls))",
                 "            or (leave is not None and (type(leave) is not HookChain or leave.calls))):"]
    else:
        lines = ["    enter, leave = hooks()",
                 "    if enter is not None or leave is not None:"]
    return [f"def run({params}):", *lines, f"        return generic({params})"]


def _native_call(plan: Plan, native: Any) -> Any:
    """:meth:`Plan.run` as one call of the native launcher (``native.py``), behind the launch-hook test."""
    ns: dict[str, Any] = {"native_run": extension().run, "PLAN": native}
    params = ", ".join(f"i{k}" for k in range(plan.n_inputs))
    lines = _hook_guard(plan, ns, params)
    lines.append(f"    return native_run(PLAN, {params})")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from the recorded plan only, no user strings
    return ns["run"]


def _straight_line(plan: Plan) -> Any:
    """:meth:`Plan.run` of a compiled plan as one generated straight-line function (the way Triton generates
    its own argument binder): the allocations and the launchers' C calls with every constant argument bound,
    no loops, no per-launch objects. About 3 us less per call than :meth:`Plan.run_generic`, whose result it
    gives (``test_replay.py`` compares the two launch by launch). Launch hooks (profilers) take the generic path.
    """
    ns: dict[str, Any] = {"empty_strided": torch.empty_strided, "empty": torch.empty, "uint8": torch.uint8,
                          "stream_of": plan.stream_of, "DEVICE": plan.device}
    n_in, n_out = plan.n_inputs, len(plan.outputs)
    params = ", ".join(f"i{k}" for k in range(n_in))
    lines = _hook_guard(plan, ns, params)
    for k, (shape, stride, dtype, _) in enumerate(plan.outputs):
        ns[f"S{k}"], ns[f"T{k}"], ns[f"D{k}"] = shape, stride, dtype
        lines.append(f"    o{k} = empty_strided(S{k}, T{k}, dtype=D{k}, device=DEVICE)")
    if plan.ws_bytes:
        ns["WS"] = plan.ws_bytes
        lines.append("    ws = empty(WS, dtype=uint8, device=DEVICE)")  # held until the launches are queued
        if plan.zero_bytes:
            ns["ZB"] = plan.zero_bytes
            lines.append("    ws[:ZB].zero_()")
        lines.append("    w = ws.data_ptr()")
    raw = _raw_stream()
    if raw is not None:
        ns["get_stream"], ns["get_device"] = raw
        lines.append("    stream = get_stream(get_device())")
    else:
        lines.append("    stream = stream_of()")
    used = sorted({slot for launch in plan.launches for _, slot in launch.slots})
    for slot in used:
        if slot < n_in:
            lines.append(f"    p{slot} = i{slot}.data_ptr()")
        elif slot < n_in + n_out:
            lines.append(f"    p{slot} = o{slot - n_in}.data_ptr()")
        else:
            lines.append(f"    p{slot} = w + {plan.temps[slot - n_in - n_out][1]}")
    for j, launch in enumerate(plan.launches):
        c, e = launch.compiled, launch.c_entry
        assert e is not None  # only plans whose launches all have a C entry point get straight-line code
        ns[f"L{j}"] = e.launch
        by_pos = dict(launch.slots)
        consts = {"F": c.function, "CO": e.launch_cooperative_grid, "PD": e.launch_pdl, "M": c.packed_metadata}
        consts.update((f"A{pos}", value) for pos, value in enumerate(launch.template) if pos not in by_pos)
        src: dict[str, str] = {}  # each constant as a literal (a constant load), else as a global of the function
        for name, value in consts.items():
            literal = _literal(value)
            if literal is None:
                ns[f"{name}{j}"] = value
                literal = f"{name}{j}"
            src[name] = literal
        args = [f"p{by_pos[pos]}" if pos in by_pos else src[f"A{pos}"] for pos in range(len(launch.template))]
        g0, g1, g2 = launch.grid
        lines.append(f"    L{j}({g0}, {g1}, {g2}, stream, {src['F']}, {src['CO']}, {src['PD']}, None, None, "
                     f"{src['M']}, None, None, None, {', '.join(args)})")
    lines.append(f"    return [{', '.join(f'o{k}' for k in range(n_out))}]")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from the recorded plan only, no user strings
    return ns["run"]


def _literal(value: Any) -> str | None:
    """Python source for a constant launch argument that reads back equal and of the same type (ints, bools,
    finite floats, None, strings, tuples of these), else None. A literal is a constant load in the generated
    function; a global is a dict lookup per argument per call (~20 constant arguments per launch)."""
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return repr(value)
    if t is float:
        return repr(value) if math.isfinite(value) else None
    if t is tuple:
        items = [_literal(v) for v in value]
        if any(i is None for i in items):
            return None
        return f"({', '.join(items)}{',' if len(items) == 1 else ''})"  # type: ignore[arg-type]
    return None


class Recorder:
    """Runs a call's allocations and launches and notes them; :meth:`save` keeps the plan under the call's key.

    ``inputs`` are the call's tensor arguments in the order :meth:`Plan.run` will get them (None for an absent
    optional tensor).
    """

    def __init__(self, *inputs: torch.Tensor | None) -> None:
        self.tensors: list[Any] = list(inputs)
        self.n_inputs = len(inputs)
        self.allocs: list[Alloc] = []
        self.launches: list[tuple[Any, Any, tuple[int, ...], tuple[Any, ...], dict[str, Any],
                                  tuple[tuple[int, int], ...]]] = []
        self.replayable = True
        self.zeroed: set[int] = set()  # allocations that start at zero (indices into allocs)

    def _slot(self, t: torch.Tensor) -> int | None:
        for i, known in enumerate(self.tensors):
            if known is t:
                return i
        return None

    def empty(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return self.adopt(torch.empty(tuple(shape), dtype=dtype, device=device))

    def zeros(self, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A temporary that starts at zero (barrier counters); a replay zeroes its bytes of the workspace."""
        t = self.adopt(torch.zeros(tuple(shape), dtype=dtype, device=device))
        self.zeroed.add(len(self.allocs) - 1)
        return t

    def adopt(self, t: torch.Tensor) -> torch.Tensor:
        """Record a freshly allocated tensor (its contents are never read before a kernel writes them)."""
        self.tensors.append(t)
        self.allocs.append((tuple(t.shape), tuple(t.stride()), t.dtype, t.device))
        return t

    def launch(self, kernel: Any, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
        """``kernel[grid](*args, **kwargs)``, noted with every tensor argument as a slot of the call (recorded in the
        trace instead of run, under :func:`~.trace.tracing`)."""
        trace = active()
        if trace is not None:
            trace.launches.append(Launch.of(kernel, grid, args, kwargs))
            self.replayable = False
            return
        compiled = kernel[grid](*args, **kwargs)
        if compiled is not None and not hasattr(compiled, "packed_metadata"):
            compiled = None  # not a CompiledKernel (another Triton front end): replay through the JIT function
        slots = []
        for pos, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                slot = self._slot(a)
                if slot is None:  # a copy or view made on this call only: the plan cannot name it
                    self.replayable = False
                    return
                slots.append((pos, slot))
        if any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            self.replayable = False
            return
        self.launches.append((kernel, compiled, grid, args, kwargs, tuple(slots)))

    def save(self, key: Hashable, *outputs: torch.Tensor) -> None:
        """Keep the plan under ``key`` (None: the call has no key) when every launch was replayable."""
        if key is None or not self.replayable or not self.launches:
            return
        out_slots = [self._slot(t) for t in outputs]
        if any(s is None or s < self.n_inputs for s in out_slots):
            return
        inputs = [t for t in self.tensors[: self.n_inputs] if t is not None]
        if len({id(t) for t in inputs}) != len(inputs):
            return  # aliased arguments: a replay with distinct tensors must not reuse one slot for both
        # Pointer slots of the plan: inputs, outputs, temporaries (every other allocation, in the workspace).
        where = {i: i for i in range(self.n_inputs)}
        for k, s in enumerate(out_slots):
            where[s] = self.n_inputs + k  # type: ignore[index]
        temps: list[tuple[Alloc, int]] = []
        ws_bytes = zero_bytes = 0
        # (the temporaries that start at zero first: one zero fill of the workspace's head covers them)
        order = sorted(range(len(self.allocs)), key=lambda a: a not in self.zeroed)
        for a in order:
            alloc, s = self.allocs[a], self.n_inputs + a
            if s in where:
                if a in self.zeroed:
                    return  # (an output that must start at zero: not a case the plans handle)
                continue
            shape, stride, dtype, _ = alloc
            if stride != contiguous_strides(shape):
                return  # temporaries are contiguous by construction; anything else runs in full
            where[s] = self.n_inputs + len(out_slots) + len(temps)
            temps.append((alloc, ws_bytes))
            ws_bytes += -(-max(1, math.prod(shape)) * dtype.itemsize // _ALIGN) * _ALIGN
            if a in self.zeroed:
                zero_bytes = ws_bytes
        launches = [_Launch(kernel, compiled, grid, args, kwargs, tuple((pos, where[s]) for pos, s in slots))
                    for kernel, compiled, grid, args, kwargs, slots in self.launches]
        outputs_allocs = [self.allocs[s - self.n_inputs] for s in out_slots]  # type: ignore[operator]
        plan = Plan(self.n_inputs, outputs_allocs, temps, ws_bytes, launches, zero_bytes)
        state = caches()
        state.plans.put(key, plan)
        if plan.native is not None and state.native_replay is None:  # (the extension is loaded from now on)
            state.load_native()

