"""CRD generation: committed YAML is current, and schemas carry every field with enums and bounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from intel_device_plugins.cmd import crdgen
from intel_device_plugins.operator.crdgen import crd
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def test_committed_crds_are_current() -> None:
    expected = crdgen.expected_files()
    on_disk = {str(p.relative_to(CRD_DIR)): p.read_text() for p in CRD_DIR.rglob("*.yaml")}
    stale = sorted(n for n in expected if on_disk.get(n) != expected[n])
    extra = sorted(set(on_disk) - set(expected))
    assert not stale and not extra, (
        f"stale {stale}, unexpected {extra}: run python -m intel_device_plugins.cmd.crdgen deploy/crds"
    )


def _props(kind: DeviceKind) -> dict[str, Any]:
    version = crd(kind)["spec"]["versions"][0]
    props: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return props


EXPECTED_FIELDS = {
    DeviceKind.DLB: set(),
    DeviceKind.DSA: {"provisioningConfig", "driver", "sharedDevNum"},
    DeviceKind.FPGA: {"mode"},
    DeviceKind.GPU: {
        "allowIDs",
        "denyIDs",
        "preferredAllocationPolicy",
        "bypathMode",
        "monitoringMode",
        "sharedDevNum",
        "enableMonitoring",
        "resourceManager",
    },
    DeviceKind.IAA: {"provisioningConfig", "sharedDevNum"},
    DeviceKind.NPU: {"sharedDevNum"},
    DeviceKind.QAT: {
        "provisioningConfig",
        "preferredAllocationPolicy",
        "dpdkDriver",
        "kernelVfDrivers",
        "maxNumDevices",
    },
    DeviceKind.SGX: {"enclaveLimit", "provisionLimit", "dcapInfraResources"},
}


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_spec_fields(kind: DeviceKind) -> None:
    common = {"nodeSelector", "image", "tolerations", "logLevel", "deployAs"}  # every kind has a DRA driver
    if kind is not DeviceKind.NPU:
        common.add("initImage")
    assert set(_props(kind)) == common | EXPECTED_FIELDS[kind]


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_crd_shape(kind: DeviceKind) -> None:
    doc = crd(kind)
    spec = doc["spec"]
    assert doc["metadata"]["name"] == f"{kind.plural}.deviceplugin.intel.com"
    assert spec["scope"] == "Cluster"
    assert spec["names"] == {
        "kind": kind.kind,
        "listKind": f"{kind.kind}List",
        "plural": kind.plural,
        "singular": kind.singular,
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {"status": {}}
    cols = [(c["name"], c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert cols == [
        ("Desired", "integer", ".status.desiredNumberScheduled"),
        ("Ready", "integer", ".status.numberReady"),
        ("Node Selector", "string", ".spec.nodeSelector"),
        ("Age", "date", ".metadata.creationTimestamp"),
    ]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["required"] == ["desiredNumberScheduled", "numberReady"]
    assert status["properties"]["controlledDaemonSet"]["x-kubernetes-map-type"] == "atomic"


def _assert_structural(schema: dict[str, Any], path: str = "") -> None:
    """Every node of a structural schema has a type (metadata and int-or-string aside)."""
    assert "type" in schema, f"no type at {path}"
    for name, sub in schema.get("properties", {}).items():
        _assert_structural(sub, f"{path}.{name}")
    if "items" in schema:
        _assert_structural(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        _assert_structural(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.value)
def test_schema_is_structural(kind: DeviceKind) -> None:
    _assert_structural(crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def test_enums_bounds_and_defaults() -> None:
    dsa, gpu, qat = _props(DeviceKind.DSA), _props(DeviceKind.GPU), _props(DeviceKind.QAT)
    assert dsa["driver"]["enum"] == ["idxd", "vfio-pci"] and dsa["driver"]["default"] == "idxd"
    assert gpu["preferredAllocationPolicy"]["enum"] == ["balanced", "packed", "none"]
    assert gpu["bypathMode"]["enum"] == ["none", "single", "all"]
    assert gpu["monitoringMode"]["enum"] == ["split", "single"]
    assert (
        gpu["deployAs"]["enum"] == ["DevicePlugin", "DRADriver"]
        and gpu["deployAs"]["default"] == "DevicePlugin"
    )
    assert qat["preferredAllocationPolicy"]["enum"] == ["balanced", "packed"]
    assert qat["dpdkDriver"]["enum"] == ["igb_uio", "vfio-pci"]
    assert "420xxvf" in qat["kernelVfDrivers"]["items"]["enum"]
    assert _props(DeviceKind.FPGA)["mode"]["enum"] == ["af", "region", "regiondevel"]
    for kind in ALL_KINDS:
        props = _props(kind)
        assert props["logLevel"]["minimum"] == 0
        for name in ("sharedDevNum", "maxNumDevices", "enclaveLimit", "provisionLimit"):
            if name in props:
                assert props[name]["minimum"] == 1, (kind, name)


def test_generator_writes_what_it_checks(tmp_path: Path) -> None:
    assert crdgen.main([str(tmp_path)]) == 0
    gpu = yaml.safe_load((tmp_path / "deviceplugin.intel.com_gpudeviceplugins.yaml").read_text())
    assert gpu["spec"]["names"]["kind"] == "GpuDevicePlugin"
    kust = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    assert len(kust["resources"]) == 8 + 1  # eight plugin kinds and the fpga.intel.com directory
