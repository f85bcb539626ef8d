"""The ``tritred`` command.

::

    tritred list                          # every registered reduction
    tritred plugins                       # plugins, their hooks, versions and load errors
    tritred explain softmax --shape 4096x32768 --dtype bfloat16 --device h200
    tritred check softmax sum             # each op against its torch reference (exit 1 on a mismatch)
    tritred bench --quick --json out.json # the benchmark suite (tritred-bench)
    tritred tune softmax --shape 4096x32768 --dtype bfloat16   # time configs here, store the fastest

Nothing heavy is imported at module level: the registry loads ``tritred_ops`` (and torch) through the
``tritred`` entry points when a command needs them, after :func:`prepare_backend` has set ``TRITON_INTERPRET=1``
on machines without CUDA. Usage errors (unknown op, bad shape...) print one line and exit with status 2.
"""


from __future__ import annotations

import logging
from typing import Annotated

import typer

from .commands import bench, check, explain, listing, tune
from .common import make_console

app = typer.Typer(
    name="tritred",
    help="Triton reduction kernels that mirror torch: list, explain, check and benchmark them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug messages (tritred.*).")] = False,
         ) -> None:
    """tritred: Triton reduction kernels that mirror torch."""
    level = logging.DEBUG if verbose else logging.WARNING
    from rich.logging import RichHandler

    handler = RichHandler(console=make_console(stderr=True), show_time=False, show_path=False)
    logger = logging.getLogger("tritred")
    logger.handlers = [handler]
    logger.setLevel(level)
    logger.propagate = False


app.command("list")(listing.list_cmd)
app.command("plugins")(listing.plugins_cmd)
app.command("explain")(explain.explain_cmd)
app.command("tune")(tune.tune_cmd)
app.command("check")(check.check_cmd)
app.command("bench")(bench.bench_cmd)


def run() -> None:
    """Entry point for ``python -m tritred_cli``."""
    app()


if __name__ == "__main__":
    run()
