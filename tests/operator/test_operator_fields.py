"""Every spec field of every kind is wired: setting it changes the DaemonSet (or is documented as ignored)."""

from __future__ import annotations

from typing import Any

import pytest

from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.kinds import ALL_KINDS, DeviceKind
from intel_device_plugins.operator.model import SPEC_CLASSES, parse_spec, spec_fields

#: Fields that deliberately do not reach the DaemonSet.
IGNORED = {(DeviceKind.GPU, "resourceManager")}

#: A valid non-default value per field; the base spec below already sets the images.
VALUES: dict[str, Any] = {
    "nodeSelector": {"pool": "a"},
    "image": "mirror/intel-x-plugin:0.40.0",
    "initImage": "mirror/intel-x-init:0.40.0",
    "tolerations": [{"operator": "Exists"}],
    "logLevel": 3,
    "provisioningConfig": "cfg",
    "driver": "vfio-pci",
    "sharedDevNum": 4,
    "mode": "region",
    "allowIDs": "0x56a0",
    "denyIDs": "0x56a1",
    "preferredAllocationPolicy": "packed",
    "bypathMode": "all",
    "monitoringMode": "split",
    "enableMonitoring": True,
    "dpdkDriver": "igb_uio",
    "kernelVfDrivers": ["4xxxvf"],
    "maxNumDevices": 4,
    "enclaveLimit": 4,
    "provisionLimit": 4,
    "dcapInfraResources": True,
    "resourceManager": True,
    "deployAs": "DRADriver",
}


def cases() -> list[tuple[DeviceKind, str]]:
    return [(k, str(f.metadata["json"])) for k in ALL_KINDS for f in spec_fields(SPEC_CLASSES[k])]


def build(kind: DeviceKind, spec: dict[str, Any]) -> dict[str, Any]:
    return desired_daemonset(parse_spec(kind, spec), Owner(kind, "c", "u"), "ns")


@pytest.mark.parametrize(
    ("kind", "field"), cases(), ids=lambda v: v.value if isinstance(v, DeviceKind) else v
)
def test_field_changes_daemonset(kind: DeviceKind, field: str) -> None:
    base: dict[str, Any] = {"image": f"intel/intel-{kind.value}-plugin:0.36.0"}
    if SPEC_CLASSES[kind].HAS_INIT_IMAGE and field != "initImage":
        base["initImage"] = "intel/intel-init:0.36.0"
    if field == "monitoringMode":
        base["enableMonitoring"] = True
    changed = build(kind, {**base, field: VALUES[field]})
    if (kind, field) in IGNORED:
        assert changed == build(kind, base)
    else:
        assert changed != build(kind, base), f"{kind.kind}.spec.{field} does not reach the DaemonSet"


def test_values_cover_every_field() -> None:
    assert {f for _, f in cases()} <= set(VALUES)
