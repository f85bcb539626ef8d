"""tritred-core must import (and work) without torch or triton: check it in a clean interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import tritred_core


def test_core_never_imports_torch_or_triton() -> None:
    code = textwrap.dedent("""
        import sys
        import tritred_core
        import tritred_core.testing
        from tritred_core import Registry
        from tritred_core.testing import FAKE_H200, problem_grid

        reg = Registry(autoload=False)
        assert reg.reductions() == {}
        assert [p.name for p in reg.plugins()] == ["tritred_core"]
        assert len(list(problem_grid("sum"))) > 0
        leaked = sorted(m for m in ("torch", "triton", "numpy") if m in sys.modules)
        assert not leaked, f"tritred_core imported {leaked}"
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"TRITRED_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": "",
                               # where the packages were installed with --target (the GPU machine)
                               **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {})})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_public_api() -> None:
    expected = {"hookimpl", "hookspec", "Registry", "ReductionSpec", "Reduction", "Problem", "DeviceInfo",
                "LaunchConfig", "DuplicateReductionError", "InvalidLaunchConfigError", "UnknownReductionError",
                "RegistryError", "PluginInfo", "get_registry", "set_registry", "FLOAT_DTYPES", "INTEGER_DTYPES"}
    assert expected <= set(tritred_core.__all__)
    for name in tritred_core.__all__:
        assert hasattr(tritred_core, name), name
    assert tritred_core.__version__ == "0.1.0"
    assert tritred_core.hookimpl.project_name == "tritred"
