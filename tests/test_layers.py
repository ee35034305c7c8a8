"""The import contract in ``.importlinter`` (run by ``make lint``) holds, and would catch a loop.

A copy of the source tree gets one forbidden import per contract; every contract must then break, and
name the import that broke it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# (file under src/, the import added to it, the contract it breaks)
FORBIDDEN = (
    ("intel_device_plugins/rmd/model.py", "intel_device_plugins.operator.model", "The Kubernetes toolkit"),
    ("intel_device_plugins/kube/watch.py", "intel_device_plugins.webhooks.store", "The Kubernetes toolkit"),
    ("intel_device_plugins/deviceplugin/model.py", "intel_device_plugins.plugins.gpu", "The frameworks"),
    ("intel_device_plugins/kubeletapi/rpc.py", "intel_device_plugins.deviceplugin.health", "The frameworks"),
    ("intel_device_plugins/plugins/gpu/plugin.py", "intel_device_plugins.plugins.qat", "The plugins are"),
    ("intel_device_plugins/sim/kubelets.py", "k8stest.binaries", "Nothing shipped"),
    ("intel_device_plugins/operator/kinds/qat.py", "intel_device_plugins.deviceplugin", "The operator knows"),
    ("intel_device_plugins/dra/driver.py", "intel_device_plugins.sim.xpumd", "The simulator lies"),
)


def lint_imports(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(ROOT / ".importlinter")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_contract_breaks_on_a_forbidden_import(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    for path, module, _ in FORBIDDEN:
        with (src / path).open("a") as f:
            f.write(f"\nimport {module}  # noqa\n")
    result = lint_imports(src, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    for _, module, contract in FORBIDDEN:
        assert any(line.startswith(contract) for line in broken), (contract, result.stdout)
        assert module in result.stdout, (module, result.stdout)
    assert "0 kept" in result.stdout
