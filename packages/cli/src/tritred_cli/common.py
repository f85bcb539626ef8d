"""What every command shares: usage errors (one line, exit status 2), the console, the backend set-up, the registry,
and the parsers of shapes, dims and comma-separated lists."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from tritred_core import Registry, RegistryError, get_registry

log = logging.getLogger("tritred.cli")

F = TypeVar("F", bound=Callable[..., Any])


class UsageError(Exception):
    """A user mistake: printed as one line, exit status 2."""


#: Width of tables written to a file or a pipe (rich's default there, 80 columns, clips the bench and tune
#: tables); a positive ``COLUMNS`` still sets it.
_PIPE_WIDTH = 200


def make_console(stderr: bool = False) -> Console:
    """A console for a table or a message: stdout (or stderr), :data:`_PIPE_WIDTH` columns in a pipe."""
    console = Console(stderr=stderr, highlight=False)
    columns = os.environ.get("COLUMNS", "")
    if not (columns.isdigit() and int(columns) > 0):  # unset or unusable (rich takes 0 and prints nothing)
        if not console.is_terminal:
            console.width = _PIPE_WIDTH
        elif console.width <= 0:
            console.width = 80
    return console


def clean_errors(fn: F) -> F:
    """Turn usage errors (unknown op, bad option values, missing files) into one line and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except (UsageError, RegistryError, ValueError, FileNotFoundError) as e:
            make_console(stderr=True).print(f"[bold red]error:[/] {escape(str(e))}", markup=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def prepare_backend() -> None:
    """Set ``TRITON_INTERPRET=1`` when there is no CUDA device, before anything imports ``tritred_ops``.

    Left alone when the variable is already set (either way). Imports torch (which tritred_ops needs anyway).
    """
    if "TRITON_INTERPRET" in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        if "tritred_ops" in sys.modules:
            log.warning("tritred_ops was imported before TRITON_INTERPRET=1 could be set: CPU runs will fail")
        os.environ["TRITON_INTERPRET"] = "1"


def interpreting() -> bool:
    """Whether kernels run under the Triton interpreter (``TRITON_INTERPRET`` set and not 0)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def load_registry() -> Registry:
    """The process-wide registry, after :func:`prepare_backend` (its plugins load ``tritred_ops``)."""
    prepare_backend()
    return get_registry()


def split_values(values: list[str] | None) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``."""
    out: list[str] = []
    for v in values or ():
        out.extend(s.strip() for s in v.split(",") if s.strip())
    return out


def dtype_name(text: str) -> str:
    """A dtype as the specs name it: ``torch.`` dropped and torch's aliases resolved (``half`` -> ``float16``,
    ``float`` -> ``float32``, ``double`` -> ``float64``, ``long`` -> ``int64``); other text unchanged."""
    import torch

    name = text.strip().removeprefix("torch.")
    dt = getattr(torch, name, None)
    return str(dt).removeprefix("torch.") if isinstance(dt, torch.dtype) else name


def meta_call(rec: Any, op: str, shape: str, dim: str | None, dims: tuple[int, ...], dtype: Any,
              d: Any, view: str | None = None) -> tuple[Any, dict[str, Any], Any]:
    """``(args, kwargs, problem)`` of a call of ``rec`` on meta tensors (nothing allocated or launched), its input
    in the layout ``view`` (the bench suites' views: ``tritred_bench.inputs.with_view``); the op's refusal of the
    shape, dim or view (``shape``, ``dim``: the options as given) as a one-line UsageError."""
    try:
        args, kwargs = rec.make_inputs(dims, dtype, device="meta", dim=d)
        if view is not None:
            from tritred_bench.inputs import with_view

            args = (with_view(args[0], view), *args[1:])
        return args, kwargs, rec.problem(*args, **kwargs)
    except (IndexError, RuntimeError, TypeError, ValueError) as e:
        where = f" view={view}" if view is not None else ""
        raise UsageError(f"{op} rejects shape {shape} dim={dim}{where}: {e}") from None


def parse_shape(text: str) -> tuple[int, ...]:
    """``4096x32768`` (or ``4096,32768``; ``scalar`` or ``""`` for 0-d) -> ``(4096, 32768)``."""
    t = text.strip().lower()
    if t in ("", "scalar", "()"):
        return ()
    parts = t.replace(",", "x").replace("*", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise UsageError(f"bad --shape {text!r}: expected sizes like 4096x32768") from None
    if any(s < 0 for s in shape):
        raise UsageError(f"bad --shape {text!r}: sizes must be >= 0")
    return shape


def parse_dim(text: str) -> int | tuple[int, ...] | None:
    """``-1`` -> -1, ``0,1`` -> (0, 1), ``none``/``all`` -> None (every dim)."""
    t = text.strip().lower()
    if t in ("none", "all", ""):
        return None
    try:
        if "," in t:
            return tuple(int(p) for p in t.split(",") if p.strip())
        return int(t)
    except ValueError:
        raise UsageError(f"bad --dim {text!r}: expected an int, a comma-separated list or 'none'") from None
