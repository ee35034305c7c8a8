"""Every kind's DeviceClasses shipped in deploy/dra/<kind>/deviceclasses (and, equal, in the DRA chart) are
what the DRA framework's DeviceClass builder makes of that driver's class facts, and the generator that
writes them has nothing left to change."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.plugins.gpu.dra import GPU_DEVICE_CLASSES

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TOOL = ROOT / "tools" / "gendeviceclasses.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gendeviceclasses", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _tool()
KINDS = sorted(GEN.CLASS_TABLES)


def _shipped(path: Path) -> list[object]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_gpu_device_classes_are_the_shared_builders() -> None:
    path = DEPLOY / "dra" / "gpu" / "deviceclasses" / "deviceclasses.yaml"
    assert _shipped(path) == [device_class(spec) for spec in GPU_DEVICE_CLASSES]


@pytest.mark.parametrize("kind", KINDS)
def test_each_kinds_shipped_classes_are_its_drivers(kind: str) -> None:
    specs = GEN.class_specs(kind)
    kustomize = DEPLOY / "dra" / kind / "deviceclasses" / "deviceclasses.yaml"
    chart = ROOT / "charts" / "intel-dra-driver" / "deviceclasses" / f"{kind}.yaml"
    if specs is None:  # the driver has no class table yet: nothing may be shipped in its name
        assert not kustomize.exists() and not chart.exists()
        return
    want = [device_class(s) for s in specs]
    assert want, kind
    assert _shipped(kustomize) == want
    assert _shipped(chart) == want
    names = [c["metadata"]["name"] for c in want]
    assert len(set(names)) == len(names) and all(n.endswith(f"{kind}.intel.com") for n in names)


def test_generated_files_are_current(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(TOOL), str(tmp_path)], check=True, capture_output=True)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert written
    for rel in written:
        assert (ROOT / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel
