"""tritred-bench: the public reduction suite, run against torch eager, torch.compile, Liger-Kernel, FlagGems and quack.

::

    from tritred_bench import load_suite, run, print_report, write_json
    cases, _ = load_suite("h200")                    # or "quick", "training", a JSON file
    report = run(cases, providers=["eager", "compile", "liger", "flaggems", "quack"])
    print_report(report); write_json(report, "bench.json")

    cases, _ = load_suite("training")                # a training step: forward + backward
    report = run(cases, providers=["eager", "compile", "liger", "quack"], pass_="both", memory=True)
    cases, about = load_suite("random", seed=1, count=100)   # realistic random cases drawn from a seed

``measure_accuracy`` compares tritred's and eager's errors against float64; ``measure_latency`` times tiny calls
(host-bound) against torch eager; ``read_json``, ``merge_reports`` and ``markdown_table`` work on saved reports.

Nothing runs at import. On a machine without CUDA the runner uses the CPU with the Triton interpreter (it sets
``TRITON_INTERPRET=1`` before ``tritred_ops`` is loaded), which checks the machinery but measures nothing real.
"""

from .accuracy import AccuracyReport, AccuracyResult, measure_accuracy, print_accuracy, write_accuracy_json
from .checks import check_gradients, check_output
from .inputs import build_inputs, with_view
from .latency import LatencyReport, LatencyResult, measure_latency, print_latency, write_latency_json
from .providers import PEERS, PROVIDERS, Provider, Unsupported, get_provider, torch_op
from .random_suite import random_case, random_cases
from .report import print_report, write_csv, write_json, write_plot
from .results import PASSES, BenchReport, CaseResult, Measurement, geomean, pass_times, rates
from .runner import run, run_case
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
from .timing import measure_copy_bandwidth, peak_extra_bytes, select_device, time_fn
from .training import TRAINING, StepIO, TrainingSpec, step_bytes, step_io, training_spec

__version__ = "0.1.0"

__all__ = [
    "PASSES",
    "PEERS",
    "PROVIDERS",
    "TRAINING",
    "AccuracyReport",
    "AccuracyResult",
    "BenchReport",
    "Case",
    "CaseResult",
    "LatencyReport",
    "LatencyResult",
    "Measurement",
    "Provider",
    "StepIO",
    "TrainingSpec",
    "Unsupported",
    "build_inputs",
    "builtin_suites",
    "check_gradients",
    "check_output",
    "filter_cases",
    "filter_report",
    "format_config",
    "geomean",
    "get_provider",
    "load_suite",
    "markdown_table",
    "measure_accuracy",
    "measure_copy_bandwidth",
    "measure_latency",
    "merge_reports",
    "pass_times",
    "peak_extra_bytes",
    "print_accuracy",
    "print_latency",
    "print_report",
    "random_case",
    "random_cases",
    "rates",
    "read_json",
    "run",
    "run_case",
    "select_device",
    "step_bytes",
    "step_io",
    "summarize",
    "summary_lines",
    "time_fn",
    "torch_op",
    "training_spec",
    "with_view",
    "write_accuracy_json",
    "write_csv",
    "write_json",
    "write_latency_json",
    "write_plot",
    "write_points_plot",
]
