"""The installed plugin seen through the real ``tritred`` command, in subprocesses (as a user would run it).

When the package is already installed (``pip install examples/tritred-normalize``, as nox does) the CLI finds its
entry point as is; otherwise the package is installed here into a temporary ``--target`` directory
(``pip install --no-deps --no-build-isolation``, offline) that is prepended to ``PYTHONPATH`` of the CLI processes.
Skipped when the ``tritred`` executable (package tritred-cli) is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[1]


def _tritred_executable() -> str | None:
    """The ``tritred`` console script of this interpreter's environment, else the first one on PATH."""
    here = Path(sys.executable).parent / ("tritred.exe" if os.name == "nt" else "tritred")
    return str(here) if here.exists() else shutil.which("tritred")


def _interpreter_of(exe: str) -> str:
    """The Python a console script runs with (its shebang), else this one."""
    try:
        with open(exe, "rb") as f:
            first = f.readline().decode(errors="replace").strip()
    except OSError:
        return sys.executable
    return first[2:].split()[0] if first.startswith("#!") and first[2:].strip() else sys.executable


_SEES_ENTRY_POINT = ("import sys; from importlib.metadata import entry_points; "
                     "sys.exit(0 if any(e.name == 'tritred_normalize' for e in entry_points(group='tritred')) else 1)")


def _entry_point_visible(python: str, env: dict[str, str], cwd: Path) -> bool:
    """Whether ``python`` in ``env`` sees this plugin's entry point (asked in a subprocess: this process may have
    ``src/`` on ``sys.path``, where a stray ``*.egg-info`` from an in-place build would fool the check)."""
    return subprocess.run([python, "-c", _SEES_ENTRY_POINT], env=env, cwd=cwd, capture_output=True,
                          timeout=120).returncode == 0


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str], Path]:
    """The ``tritred`` executable and an environment in which it loads this plugin through its entry point."""
    exe = _tritred_executable()
    if exe is None:
        pytest.skip("the `tritred` command (package tritred-cli) is not installed")
    env = dict(os.environ)
    env.pop("TRITRED_DISABLE_PLUGIN_AUTOLOAD", None)
    env["COLUMNS"] = "200"  # no truncated table cells
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    tmp = tmp_path_factory.mktemp("tritred-normalize")
    if not _entry_point_visible(_interpreter_of(exe), env, tmp):
        src = tmp / "src"  # build from a copy: the checkout gets no build/ or egg-info
        shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".*"))
        target = tmp / "site"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
             "--disable-pip-version-check", "--target", str(target), str(src)],
            capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(target), env.get("PYTHONPATH", "")) if p)
        assert _entry_point_visible(_interpreter_of(exe), env, tmp)
    return exe, env, tmp


CLI = tuple[str, dict[str, str], Path]


def run(cli: CLI, *args: str) -> subprocess.CompletedProcess[str]:
    exe, env, cwd = cli
    proc = subprocess.run([exe, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    print(f"$ tritred {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_list_shows_normalize_from_the_plugin(cli: CLI) -> None:
    proc = run(cli, "list")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "normalize" in line.split()]
    assert lines, proc.stdout
    assert any("tritred_normalize" in line for line in lines), proc.stdout
    assert any("softmax" in line.split() for line in proc.stdout.splitlines()), proc.stdout  # built-ins still there


def test_plugins_lists_the_plugin(cli: CLI) -> None:
    proc = run(cli, "plugins")
    assert proc.returncode == 0, proc.stderr
    assert "tritred_normalize" in proc.stdout


def test_explain_shows_the_plugin_decided(cli: CLI) -> None:
    proc = run(cli, "explain", "normalize", "--shape", "8x1000", "--dtype", "float32")
    assert proc.returncode == 0, proc.stderr
    assert "decided by plugin tritred_normalize" in proc.stdout
    assert "single_pass" in proc.stdout  # N=1000 stays in registers on every backend (normalize_config)


def test_explain_float64_softmax_rows_show_the_override(cli: CLI) -> None:
    proc = run(cli, "explain", "softmax", "--shape", "64x20000", "--dtype", "float64", "--device", "h200")
    assert proc.returncode == 0, proc.stderr
    assert "decided by plugin tritred_normalize" in proc.stdout and "multi_pass" in proc.stdout


def test_explain_other_softmax_is_still_decided_by_the_builtins(cli: CLI) -> None:
    proc = run(cli, "explain", "softmax", "--shape", "8x1000", "--dtype", "float64", "--device", "h200")
    assert proc.returncode == 0, proc.stderr
    assert "decided by plugin tritred_ops" in proc.stdout  # (float64 rows of 1000: not the override's)


def test_check_normalize_passes(cli: CLI) -> None:
    proc = run(cli, "check", "normalize")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "normalize" in proc.stdout
