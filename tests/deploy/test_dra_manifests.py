"""Every kind's DeviceClasses shipped in deploy/dra/<kind>/deviceclasses (and, equal, in the DRA chart) are
what the DRA framework's DeviceClass builder makes of that driver's class facts, and the generator that
writes them has nothing left to change."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from intel_device_plugins.dra.classes import (
    INTEL_EXTENDED_RESOURCES,
    DeviceClassSpec,
    device_class,
    with_intel_extended_resources,
)
from intel_device_plugins.operator import images
from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
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
    kustomize = DEPLOY / "dra" / GEN.kustomize_dir(kind) / "deviceclasses.yaml"
    chart = ROOT / "charts" / "intel-dra-driver" / "deviceclasses" / f"{kind}.yaml"
    if specs is None:  # the driver has no class table yet: nothing may be shipped in its name
        assert not kustomize.exists() and not chart.exists()
        return
    want = [device_class(s) for s in specs]
    assert want, kind
    assert _shipped(kustomize) == want
    assert _shipped(chart) == want
    names = [c["metadata"]["name"] for c in want]
    driver = kind.split("-", 1)[0]  # qat-kernel: the QAT driver's kernel-mode classes
    assert len(set(names)) == len(names) and all(n.endswith(f"{driver}.intel.com") for n in names)


def test_generated_files_are_current(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(TOOL), str(tmp_path)], check=True, capture_output=True)
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert written
    for rel in written:
        assert (ROOT / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel


@pytest.mark.parametrize("kind", list(DeviceKind), ids=lambda k: k.value)
def test_standalone_driver_pod_is_the_operators(kubectl: Path, kind: DeviceKind) -> None:
    """deploy/dra/<kind> runs the pod the operator runs for a CR of the kind that says only deployAs:
    DRADriver (and this project's node image), under the standalone install's own ServiceAccount."""
    out = subprocess.run(
        [str(kubectl), "kustomize", str(DEPLOY / "dra" / kind.value)],
        capture_output=True,
        text=True,
        check=True,
    )
    (standalone,) = (d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "DaemonSet")
    spec = parse_spec(kind, {"image": images.node_image(), "deployAs": "DRADriver"})
    operator = desired_daemonset(
        spec, Owner(kind, "sample", "uid-1"), "ns", dra_service_account=kind.dra_driver_base
    )
    pod = operator["spec"]["template"]["spec"]
    # The deprecated alias matters only to a DaemonSet that switches between plugin and driver.
    assert pod.pop("serviceAccount") == pod["serviceAccountName"]
    assert standalone["spec"]["template"]["spec"] == pod
    assert standalone["spec"]["updateStrategy"] == operator["spec"]["updateStrategy"]


# ----- Intel's opt-in extended resources ---------------------------------------------------------------


def test_the_extended_resources_component_patches_intels_classes() -> None:
    component = yaml.safe_load(
        (DEPLOY / "dra" / "intel-extended-resources" / "kustomization.yaml").read_text()
    )
    patched = {
        patch["target"]["name"]: json.loads(patch["patch"])
        for patch in component["patches"]
        if patch["target"]["kind"] == "DeviceClass"
    }
    assert patched == {
        name: [{"op": "add", "path": "/spec/extendedResourceName", "value": resource}]
        for name, resource in INTEL_EXTENDED_RESOURCES.items()
    }
    assert INTEL_EXTENDED_RESOURCES == {"gpu.intel.com": "intel.com/gpu", "qat.intel.com": "intel.com/qat"}


@pytest.mark.parametrize("kind", KINDS)
def test_intels_extended_resources_keep_every_kinds_names_unique(kind: str) -> None:
    specs = GEN.class_specs(kind)
    assert specs is not None
    opted = with_intel_extended_resources(specs)
    mapped = [spec.extended_resource_name for spec in opted if spec.extended_resource_name]
    assert len(mapped) == len(set(mapped)), mapped
    driver = kind.split("-", 1)[0]
    intel = INTEL_EXTENDED_RESOURCES.get(f"{driver}.intel.com")
    if intel is not None:
        (base,) = (spec for spec in opted if spec.name == f"{driver}.intel.com")
        assert base.extended_resource_name == intel


def test_an_intel_resource_another_class_maps_already_is_refused() -> None:
    both = r"gpu\.intel\.com and other\.gpu\.intel\.com both map intel\.com/gpu"
    with pytest.raises(ValueError, match=both):
        with_intel_extended_resources(
            (
                DeviceClassSpec("gpu.intel.com", "gpu.intel.com"),
                DeviceClassSpec(
                    "other.gpu.intel.com", "gpu.intel.com", extended_resource_name="intel.com/gpu"
                ),
            )
        )
    with pytest.raises(ValueError, match=r"gpu\.intel\.com already maps gpu\.intel\.com/i915"):
        with_intel_extended_resources(
            (DeviceClassSpec("gpu.intel.com", "gpu.intel.com", extended_resource_name="gpu.intel.com/i915"),)
        )
