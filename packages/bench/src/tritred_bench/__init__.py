"""tritred-bench: the public reduction suite, run against torch eager, torch.compile, Liger-Kernel and FlagGems.

::

    from tritred_bench import load_suite, run, print_report, write_json
    cases, _ = load_suite("h200")                    # or "quick", or a JSON file
    report = run(cases, providers=["eager", "compile", "liger", "flaggems"])
    print_report(report); write_json(report, "bench.json")

``measure_latency`` times tiny calls (host-bound) against torch eager; ``read_json``, ``merge_reports`` and
``markdown_table`` work on saved reports.

Nothing runs at import. On a machine without CUDA the runner uses the CPU with the Triton interpreter (it sets
``TRITON_INTERPRET=1`` before ``tritred_ops`` is loaded), which checks the machinery but measures nothing real.
"""

from .latency import LatencyReport, LatencyResult, measure_latency, print_latency, write_latency_json
from .providers import PEERS, PROVIDERS, Provider, get_provider, torch_op
from .report import print_report, write_csv, write_json, write_plot
from .runner import (
    BenchReport,
    CaseResult,
    Measurement,
    build_inputs,
    check_output,
    geomean,
    measure_copy_bandwidth,
    run,
    run_case,
    select_device,
    time_fn,
)
from .suites import Case, builtin_suites, filter_cases, load_suite
from .tables import (
    filter_report,
    format_config,
    markdown_table,
    merge_reports,
    read_json,
    summarize,
    summary_lines,
    write_points_plot,
)

__version__ = "0.1.0"

__all__ = [
    "PEERS",
    "PROVIDERS",
    "BenchReport",
    "Case",
    "CaseResult",
    "LatencyReport",
    "LatencyResult",
    "Measurement",
    "Provider",
    "build_inputs",
    "builtin_suites",
    "check_output",
    "filter_cases",
    "filter_report",
    "format_config",
    "geomean",
    "get_provider",
    "load_suite",
    "markdown_table",
    "measure_copy_bandwidth",
    "measure_latency",
    "merge_reports",
    "print_latency",
    "print_report",
    "read_json",
    "run",
    "run_case",
    "select_device",
    "summarize",
    "summary_lines",
    "time_fn",
    "torch_op",
    "write_csv",
    "write_json",
    "write_latency_json",
    "write_plot",
    "write_points_plot",
]
