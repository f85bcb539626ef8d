"""The tritred command: list, plugins, explain (and a plugin overriding the launch config), check, bench."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_helpers import fake_reduction
from tritred_core import LaunchConfig, Registry, hookimpl

BUILTINS = ("sum", "mean", "prod", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean",
            "softmax", "log_softmax", "logsumexp", "layer_norm", "batch_norm", "rms_norm")


def test_help(cli: Callable[..., Any]) -> None:
    r = cli("--help")
    assert r.exit_code == 0
    for cmd in ("list", "plugins", "explain", "check", "bench", "tune"):
        assert cmd in r.output


def test_list_shows_every_builtin_and_its_plugin(cli: Callable[..., Any]) -> None:
    r = cli("list")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    for op in BUILTINS:
        row = [ln for ln in lines if f" {op} " in ln]
        assert row and "tritred_ops" in row[0], f"{op} missing from:\n{r.output}"
    specs = json.loads(cli("list", "--json").output)
    by_name = {s["name"]: s for s in specs}
    assert set(BUILTINS) <= set(by_name)
    assert all(by_name[op]["plugin"] == "tritred_ops" and by_name[op]["version"] for op in BUILTINS)
    assert by_name["layer_norm"]["mirrors"] == "torch.nn.functional.layer_norm"


def test_plugins(cli: Callable[..., Any]) -> None:
    r = cli("plugins")
    assert r.exit_code == 0, r.output
    assert "tritred_ops" in r.output and "tritred_core" in r.output
    infos = {p["name"]: p for p in json.loads(cli("plugins", "--json").output)}
    assert set(infos["tritred_ops"]["hooks"]) == {"tritred_launch_config", "tritred_register_reductions"}
    assert infos["tritred_ops"]["error"] is None and infos["tritred_core"]["version"]


def test_explain_prints_problem_and_config(cli: Callable[..., Any]) -> None:
    r = cli("explain", "softmax", "--shape", "4096x32768", "--dtype", "bfloat16", "--device", "h200")
    assert r.exit_code == 0, r.output
    for text in ("Problem", "32768", "DeviceInfo", "NVIDIA H200", "LaunchConfig", "strategy",
                 "decided by plugin tritred_ops", "not tuned"):
        assert text in r.output, text
    data = json.loads(cli("explain", "softmax", "--shape", "4096x32768", "--dtype", "bfloat16", "--device", "h200",
                          "--json").output)
    assert data["problem"]["M"] == 4096 and data["problem"]["N"] == 32768 and data["problem"]["K"] == 1
    assert data["config"]["decided_by"] == "tritred_ops" and data["device"]["sm_count"] == 132
    assert data["bytes"] == 2 * 4096 * 32768 * 2
    # the rules that decided it, outermost first, each with its docstring (the rule, its reason, its figures)
    names = [rule["name"] for rule in data["rules"]]
    assert names == data["config"]["rule"].split(" > ")
    assert names[0] == "tritred_ops.families.softmax.rules:config"
    assert names[-1] == "tritred_ops.families.softmax.rules:l2_loop"  # 4096 rows of 32768 bf16: the L2-sized loop
    assert all(rule["doc"] for rule in data["rules"]) and "L2" in data["rules"][-1]["doc"]
    assert "rule tritred_ops.families.softmax.rules:l2_loop: The loop of rows read twice" in r.output
    # the launches with what the rules reason about: 4096 programs (31 a SM), a 1 x 8192 tile on 16 warps
    launches = [line for line in r.output.splitlines() if line.startswith("│ _rows_kernel")]
    assert [cell.strip() for cell in launches[0].strip("│ ").split("│")] == [
        "_rows_kernel", "4096", "4096", "31", "16", "1 x 8192", "16"], r.output
    # the call's own decisions and launches (built-ins): the first decision is the Problem and config above
    assert data["decisions"][0] == {"op": "softmax", "problem": data["problem"], "config": data["config"]}
    assert [launch["kernel"] for launch in data["launches"]] == ["_rows_kernel"]
    assert data["launches"][0]["kwargs"]["BLOCK_N"] == data["config"]["BLOCK_N"]
    # dim=0 of a matrix: an outer reduction (K > 1); 'none' reduces everything; the interpreter device.
    outer = json.loads(cli("explain", "sum", "--shape", "64x4096x256", "--dim", "1", "--json").output)
    assert (outer["problem"]["M"], outer["problem"]["N"], outer["problem"]["K"]) == (64, 4096, 256)
    staged = json.loads(cli("explain", "sum", "--shape", "4x6x5x7", "--dim", "0,2,3", "--json").output)
    assert [d["problem"]["N"] for d in staged["decisions"]] == [35, 4]  # (H*W of each image, then the batch)
    assert len(staged["launches"]) == 2
    full = json.loads(cli("explain", "sum", "--shape", "1000x10", "--dim", "none", "--device", "cpu",
                          "--json").output)
    assert full["problem"]["N"] == 10000 and full["device"]["backend"] == "interpreter"
    # max/min over everything: torch.max(x) (no dim argument), so the byte count is known as for sum
    for op in ("max", "min"):
        every = json.loads(cli("explain", op, "--shape", "7x33", "--dim", "none", "--json").output)
        assert every["problem"]["N"] == 7 * 33 and every["bytes"] == 7 * 33 * 4 + 4, every


class OverrideSoftmax:
    """A third-party plugin that decides softmax's launch config (and leaves every other op alone)."""

    @hookimpl
    def tritred_launch_config(self, spec: Any, problem: Any, device: Any) -> LaunchConfig | None:
        if spec.name != "softmax":
            return None
        return LaunchConfig(strategy="multi_pass", BLOCK_N=2048, num_warps=8, tuned=True)


def test_plugin_hook_changes_explain(cli: Callable[..., Any], use_registry: Callable[[Registry], Registry]) -> None:
    reg = use_registry(Registry())  # a fresh registry that loads the entry points (tritred_ops)
    args = ("explain", "softmax", "--shape", "4096x4096", "--dtype", "bfloat16", "--device", "h200")
    before = json.loads(cli(*args, "--json").output)["config"]
    assert before["decided_by"] == "tritred_ops" and before["strategy"] == "single_pass"

    reg.register(OverrideSoftmax(), name="test-override", version="9.9")
    after = json.loads(cli(*args, "--json").output)["config"]
    assert after["decided_by"] == "test-override"
    assert (after["strategy"], after["BLOCK_N"], after["num_warps"], after["tuned"]) == ("multi_pass", 2048, 8, True)
    text = cli(*args).output
    assert "decided by plugin test-override" in text and "tuned (from a tuning cache)" in text
    # other ops still get the built-in heuristic
    other = json.loads(cli("explain", "sum", "--shape", "4096x32768", "--device", "h200", "--json").output)
    assert other["config"]["decided_by"] == "tritred_ops"
    plugins = cli("plugins").output
    assert "test-override" in plugins and "9.9" in plugins


def test_plugin_from_an_installed_entry_point(tmp_path: Path) -> None:
    """A tiny package on sys.path with a `tritred` entry point: the real `python -m tritred_cli` picks it up."""
    site = tmp_path / "site"
    (site / "tritred_test_override-0.3.dist-info").mkdir(parents=True)
    (site / "tritred_test_override-0.3.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: tritred-test-override\nVersion: 0.3\n")
    (site / "tritred_test_override-0.3.dist-info" / "entry_points.txt").write_text(
        "[tritred]\noverride = tritred_test_override\n")
    (site / "tritred_test_override.py").write_text(textwrap.dedent("""
        from tritred_core import LaunchConfig, hookimpl

        @hookimpl
        def tritred_launch_config(spec, problem, device):
            if spec.name == "softmax" and problem.N > 1024:
                return LaunchConfig(strategy="multi_pass", BLOCK_N=1024, num_warps=4)
            return None
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               COLUMNS="200", TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"))
    cmd = [sys.executable, "-m", "tritred_cli"]
    out = subprocess.run([*cmd, "explain", "softmax", "--shape", "8x4096", "--device", "h200", "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)["config"]
    assert config["decided_by"] == "override" and config["BLOCK_N"] == 1024


def test_cli_module_imports_no_torch() -> None:
    code = ("import sys, tritred_cli.main; "
            "assert 'tritred_ops' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_usage_errors_exit_2_without_traceback(cli: Callable[..., Any]) -> None:
    for args in (("explain", "nope"), ("check", "nope"), ("explain", "softmax", "--shape", "4xq"),
                 ("explain", "softmax", "--dtype", "float8"), ("explain", "softmax", "--dim", "x"),
                 ("explain", "softmax", "--device", "tpu"), ("explain", "softmax", "--shape", "4x5", "--dim", "3"),
                 ("bench", "--suite", "nope"), ("bench", "--quick", "--peers", "nope"),
                 ("check", "sum", "--case", "x")):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output and "error" in r.output.lower(), (args, r.output)
    assert "unknown reduction 'nope'" in cli("explain", "nope").output


def test_check_passes_for_builtin_ops(cli: Callable[..., Any]) -> None:
    r = cli("check", "softmax", "sum", "--dtype", "float32", "--seed", "0")
    assert r.exit_code == 0, r.output
    assert "softmax" in r.output and "sum" in r.output and "checks passed" in r.output and "FAIL" not in r.output


def test_check_rejects_a_dtype_no_selected_op_takes(cli: Callable[..., Any]) -> None:
    for args in (("mean", "-t", "int32"), ("sum", "-t", "float8")):  # (it used to report 0/0 checks, exit 0)
        r = cli("check", *args)
        assert r.exit_code == 2 and "supports --dtype" in r.output, r.output


def test_explain_rejects_dim_for_normalize_ops(cli: Callable[..., Any]) -> None:
    for dim in ("1,2", "-1"):  # (-1, the reductions' default, used to pass silently)
        r = cli("explain", "layer_norm", "--shape", "8x16x32", "--dim", dim)
        assert r.exit_code == 2 and "--dim does not apply to layer_norm" in r.output, r.output
    assert cli("explain", "layer_norm", "--shape", "8x16x32").exit_code == 0
    r = cli("explain", "batch_norm", "--shape", "8x16x4x4", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["dim"] is None


def test_explain_names_batch_norms_axes(cli: Callable[..., Any]) -> None:
    r = cli("explain", "batch_norm", "--shape", "256x64x56x56", "--device", "h200")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # (rich wraps the table title)
    assert "K = channels" in text and "channels (K)" in text and "outputs (M*K)" not in text, r.output
    assert "outputs (M*K)" in cli("explain", "layer_norm", "--shape", "8x16x32").output


def test_explain_takes_the_bench_suites_views(cli: Callable[..., Any]) -> None:
    """--view lays the input out as the bench suites' cases do: the Problem, config and launches are the view's."""
    plain = json.loads(cli("explain", "batch_norm", "--shape", "2x768x56x56", "--device", "h200", "--json").output)
    last = json.loads(cli("explain", "batch_norm", "--shape", "2x768x56x56", "--device", "h200", "--view",
                          "channels_last", "--json").output)
    assert last["view"] == "channels_last" and plain["view"] is None
    assert (last["problem"]["stride_k"], plain["problem"]["stride_k"]) == (1, 56 * 56)  # channels contiguous
    assert last["config"]["BLOCK_K"] > 1 == plain["config"]["BLOCK_K"]  # channels-fast tiles
    assert last["launches"][0]["args"][0][2] == [2408448, 1, 43008, 768]
    r = cli("explain", "softmax", "--shape", "64x1000", "--view", "sliced", "--device", "h200")
    assert r.exit_code == 0 and "view sliced (strides (1024, 1))" in r.output, r.output
    r = cli("explain", "softmax", "--shape", "64x1000", "--view", "channels_last")
    assert r.exit_code == 2 and "view 'channels_last' needs a 4-D input" in r.output, r.output


def test_explain_says_when_a_reduction_goes_in_stages(cli: Callable[..., Any]) -> None:
    r = cli("explain", "sum", "--shape", "8x64x14x14", "--dim", "0,2,3")
    assert r.exit_code == 0 and "the call's 64 outputs come in stages" in r.output, r.output
    for dim in ("1", "2,3", "none"):
        assert "in stages" not in cli("explain", "sum", "--shape", "8x64x14x14", "--dim", dim).output
    r = cli("explain", "var", "--shape", "8x64x14x14", "--dim", "0,2,3")
    assert r.exit_code == 0 and "the call's 64 outputs each merge 8 partials" in r.output, r.output
    for dim in ("1", "2,3", "none"):
        assert "partials" not in cli("explain", "var", "--shape", "8x64x14x14", "--dim", dim).output


def test_check_fails_on_a_broken_reduction(cli: Callable[..., Any], fake_registry: Callable[..., Registry]) -> None:
    good = fake_reduction("good_sum", lambda x, dim=None: torch.sum(x, dim))
    broken = fake_reduction("broken_sum", lambda x, dim=None: torch.sum(x, dim) * 1.01)
    fake_registry(good, broken)
    r = cli("check", "good_sum", "--seed", "1")
    assert r.exit_code == 0, r.output
    r = cli("check", "broken_sum", "--seed", "1")
    assert r.exit_code == 1, r.output
    assert "FAIL" in r.output and "broken_sum" in r.output and "outside atol" in r.output
    assert "rerun the failing checks with: tritred check broken_sum --seed 1" in r.output
    worst = [float(line.split("│")[5]) for line in r.output.splitlines() if "broken_sum" in line and "│" in line]
    assert worst and worst[0] > 1e-3, r.output  # the failing checks' error (1 % of a sum), not only the passing ones'
    r = cli("check", "broken_sum", "--case", "random")  # a fresh base seed: printed, and it reproduces the failure
    seed = r.output.split("--seed ")[1].split()[0]
    again = cli("check", "broken_sum", "--case", "random", "--seed", seed)
    assert again.exit_code == 1 and f"--seed {seed} --case random" in again.output, again.output
    r = cli("check", "--seed", "1")  # all registered ops
    assert r.exit_code == 1 and "good_sum" in r.output and "broken_sum" in r.output


def test_bench_quick_writes_reports(cli: Callable[..., Any], tmp_path: Path) -> None:
    j, c, p = tmp_path / "b.json", tmp_path / "b.csv", tmp_path / "b.png"
    r = cli("bench", "--quick", "sum", "softmax", "--json", str(j), "--csv", str(c), "--plot", str(p))
    assert r.exit_code == 0, r.output
    data = json.loads(j.read_text())
    assert data["cases"] and {case["case"]["op"] for case in data["cases"]} == {"sum", "softmax"}
    for case in data["cases"]:
        assert case["providers"]["tritred"]["status"] == "ok" and case["providers"]["eager"]["status"] == "ok"
    assert c.read_text().startswith("label,op,shape") and p.read_bytes()[:4] == b"\x89PNG"
    assert "tritred vs eager" in r.output


@pytest.mark.parametrize("columns", [None, "", "abc", "0", "-5"])
def test_tables_in_a_pipe_are_not_clipped_to_80_columns(columns: str | None) -> None:
    """Written to a pipe or file without a usable COLUMNS, rich would clip the tables to 80 columns ("…"), or
    print nothing for COLUMNS=0; a usable COLUMNS still sets the width."""
    from tritred_cli.main import app
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, ["list"], env={"COLUMNS": columns, "TERM": "dumb"}, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "…" not in r.output and max(map(len, r.output.splitlines())) > 80
    assert "f16,bf16,f32,f64,bool,u8,i8,i16,i32,i64" in r.output and "torch.nn.functional.batch_norm" in r.output
    narrow = CliRunner().invoke(app, ["list"], env={"COLUMNS": "60", "TERM": "dumb"}, catch_exceptions=False)
    assert max(map(len, narrow.output.splitlines())) <= 60


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is for the interpreter")
def test_bench_warns_of_gpu_sized_cases_under_the_interpreter(cli: Callable[..., Any], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import tritred_cli.commands.bench as bench

    monkeypatch.setattr(bench, "INTERPRETER_ELEMENTS", 100)  # (a GPU-sized case would take minutes here)
    suite = tmp_path / "big.json"
    suite.write_text(json.dumps([{"op": "sum", "shape": [8, 16], "dim": -1, "dtype": "float32"},
                                 {"op": "sum", "shape": [4, 8], "dim": -1, "dtype": "float32"}]))
    r = cli("bench", "--suite", str(suite), "--rep", "1")
    assert r.exit_code == 0 and "the largest case has 128 elements" in r.output, r.output
    monkeypatch.setattr(bench, "INTERPRETER_ELEMENTS", 128)
    assert "largest case" not in cli("bench", "--suite", str(suite), "--rep", "1").output


@pytest.mark.parametrize("shape,expected", [("4096x32768", (4096, 32768)), ("7,33", (7, 33)), ("scalar", ())])
def test_parse_shape(shape: str, expected: tuple[int, ...]) -> None:
    from tritred_cli.common import parse_dim, parse_shape

    assert parse_shape(shape) == expected
    assert parse_dim("-1") == -1 and parse_dim("0,1") == (0, 1) and parse_dim("none") is None


def test_bench_exits_1_when_tritred_is_wrong(cli: Callable[..., Any], fake_registry: Callable[..., Registry],
                                             tmp_path: Path) -> None:
    fake_registry(fake_reduction("sum", lambda x, dim=None: torch.sum(x, dim) + 1))
    j = tmp_path / "b.json"
    r = cli("bench", "--quick", "sum", "--json", str(j))
    assert r.exit_code == 1, r.output
    cases = json.loads(j.read_text())["cases"]
    assert cases and all(c["providers"]["tritred"]["status"] == "failed" for c in cases)
    assert all(c["providers"]["eager"]["status"] == "ok" and c["bytes"] > 0 for c in cases)
    assert "wrong result" in cases[0]["providers"]["tritred"]["message"]
    assert cli("bench", "--quick", "no_such_op").exit_code == 2


def test_tune_stores_a_config_that_explain_reports(cli: Callable[..., Any], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "tuning.json"
    monkeypatch.setenv("TRITRED_TUNE_CACHE", str(cache))
    from tritred_ops.runtime.caches import caches

    caches().clear()
    args = ("--shape", "6x300", "--dtype", "float32")
    where = "cuda" if torch.cuda.is_available() else "cpu"  # the device tune times on
    before = json.loads(cli("explain", "softmax", *args, "--device", where, "--json").output)["config"]
    assert before["tuned"] is False
    r = cli("tune", "softmax", *args)
    assert r.exit_code == 0, r.output
    assert "best:" in r.output and str(cache) in r.output.replace("\n", "")
    assert r.output.count("current") == 1, r.output  # the row of the config a call used before tuning
    entries = json.loads(cache.read_text())["entries"]
    assert len(entries) == 1
    after = json.loads(cli("explain", "softmax", *args, "--device", where, "--json").output)["config"]
    assert after["tuned"] is True and after["decided_by"] == "tritred_ops"
    stored = next(iter(entries.values()))["config"]
    assert {k: after[k] for k in stored} == stored
    assert "tuned (from a tuning cache)" in cli("explain", "softmax", *args, "--device", where).output
    caches().clear()


def test_tune_dry_run_and_errors(cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "tuning.json"
    monkeypatch.setenv("TRITRED_TUNE_CACHE", str(cache))
    r = cli("tune", "sum", "--shape", "4x100", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "not stored" in r.output and not cache.exists()
    assert cli("tune", "nope", "--shape", "4x4").exit_code == 2
    if not torch.cuda.is_available():  # a GPU-sized shape under the interpreter: refused at once, with a hint
        r = cli("tune", "softmax", "--shape", "4096x32768", "--dtype", "bfloat16")
        assert r.exit_code == 2 and "8x512" in r.output, r.output
    assert cli("tune", "mean", "--shape", "4x4", "--dtype", "int64").exit_code == 2
    # arguments the op refuses: one line naming the op, exit 2 (checked on meta tensors before any candidate runs)
    for args, why in ((("sum", "--dim", "5"), "Dimension out of range"), (("sum", "--dim", "0,0"), "appears multiple"),
                      (("sum", "--shape", "0x8"), "launches no kernel"), (("softmax", "--dim", "none"), "'dim' must")):
        shape = () if "--shape" in args else ("--shape", "4x8")
        r = cli("tune", *args, *shape, "--dry-run")
        assert r.exit_code == 2 and why in r.output and "Traceback" not in r.output, r.output


def test_random_suite_arguments_are_usage_errors(cli: Callable[..., Any]) -> None:
    """--suite random's own arguments checked before anything is drawn: an unknown op, a dtype the suite or the op
    does not take, a count past the cap, a budget that is not a positive number: one line, exit 2 (exit 1 says
    tritred failed a case)."""
    for args, why in ((("nosuchop",), "unknown reduction 'nosuchop'"),
                      (("sum", "--dtype", "bogus"), "--dtype 'bogus'"),
                      (("softmax", "--dtype", "int8"), "softmax does not take it"),
                      (("sum", "--count", "1000000000"), "at most 100000 cases"),
                      (("sum", "--budget-mb", "-5"), "positive number"),
                      (("sum", "--budget-mb", "nan"), "positive number")):
        r = cli("bench", *args, "--suite", "random", *(() if "--count" in args else ("--count", "1")))
        assert r.exit_code == 2 and why in r.output and "Traceback" not in r.output, (args, r.output)


def test_torch_dtype_aliases(cli: Callable[..., Any]) -> None:
    """torch's aliases (half, float, double; with or without ``torch.``) name the same dtypes as the specs."""
    from tritred_cli.common import dtype_name

    assert [dtype_name(d) for d in ("half", "torch.float", "double", "bfloat16", "bogus")] == [
        "float16", "float32", "float64", "bfloat16", "bogus"]
    r = cli("explain", "sum", "--shape", "4x8", "--dtype", "half", "--device", "h200")
    assert r.exit_code == 0 and "float16" in r.output, r.output
    r = cli("check", "sum", "--dtype", "double", "--case", "random")
    assert r.exit_code == 0 and "float64" in r.output, r.output


def test_explain_reads_rules_only_from_modules_already_imported() -> None:
    """A plugin's ``LaunchConfig.rule`` names functions; explain prints their docstrings without importing
    anything (a module imported for its name could print or cost)."""
    import sys

    from tritred_cli.commands.explain import _rule_docs

    sys.modules.pop("antigravity", None)
    docs = dict(_rule_docs("json:dumps > antigravity:fly > json: > :x"))
    assert docs["json:dumps"].startswith("Serialize") and docs["antigravity:fly"] == "" == docs["json:"] == docs[":x"]
    assert "antigravity" not in sys.modules
