"""``tritred list`` (the registered reductions) and ``tritred plugins`` (the plugins, their hooks and errors)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from tritred_core import Registry

from ..common import clean_errors, load_registry, make_console

#: Short dtype names for tables.
_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64", "bool": "bool", "uint8": "u8",
          "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64"}


def _dtype_list(dtypes: tuple[str, ...]) -> str:
    return ",".join(_SHORT.get(d, d) for d in dtypes)


@clean_errors
def list_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
             ) -> None:
    """Every registered reduction: name, family, mirrored torch op, dtypes, the strategies its kernels implement
    and the plugin providing it."""
    reg = load_registry()
    reds = reg.reductions(strict=False)
    if as_json:
        typer.echo(json.dumps([r.spec.model_dump() for r in reds.values()], indent=1))
        return
    table = Table(title=f"{len(reds)} reductions")
    for col in ("name", "family", "mirrors", "dtypes", "strategies", "plugin", "version"):
        table.add_column(col, no_wrap=col in ("name", "plugin"), overflow="fold")
    for name, rec in reds.items():
        s = rec.spec
        table.add_row(name, s.family, s.mirrors, _dtype_list(s.dtypes), ", ".join(s.strategies), s.plugin or "?",
                      s.version or "?")
    con = make_console()
    con.print(table)
    _print_load_errors(reg, con)


def _print_load_errors(reg: Registry, con: Console) -> None:
    for p in reg.plugins():
        if p.error:
            con.print(f"[yellow]plugin {p.name} failed:[/] {escape(p.error)}", markup=True)


@clean_errors
def plugins_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
                ) -> None:
    """Every plugin the registry knows: version, implemented hooks, and the error of those that failed."""
    reg = load_registry()
    infos = reg.plugins()
    if as_json:
        typer.echo(json.dumps([p.model_dump() for p in infos], indent=1))
        return
    table = Table(title=f"{len(infos)} plugins")
    table.add_column("name", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("hooks")
    table.add_column("status")
    for p in infos:
        status = f"[red]error: {escape(p.error)}[/]" if p.error else "[green]ok[/]"
        table.add_row(p.name, p.version or "-", ", ".join(p.hooks) or "-", status)
    make_console().print(table)
