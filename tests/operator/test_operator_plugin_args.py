"""Every kind's DaemonSet command line, as the operator generates it, parsed by that plugin's own parser."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.images import plugin_command
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec

# A spec per kind that sets every field the operator turns into a flag, and what the plugin must then hold.
SPECS: dict[DeviceKind, tuple[dict[str, Any], dict[str, Any]]] = {
    DeviceKind.DLB: ({}, {}),
    DeviceKind.DSA: ({"sharedDevNum": 4, "driver": "vfio-pci"}, {"shared_dev_num": 4, "driver": "vfio-pci"}),
    DeviceKind.FPGA: ({"mode": "region"}, {}),
    DeviceKind.GPU: (
        {
            "sharedDevNum": 3,
            "enableMonitoring": True,
            "monitoringMode": "split",
            "preferredAllocationPolicy": "balanced",
            "allowIDs": "0x56c0",
            "bypathMode": "single",
        },
        {"shared_dev_num": 3, "enable_monitoring": True, "allow_ids": frozenset({"0x56c0"})},
    ),
    DeviceKind.IAA: ({"sharedDevNum": 2}, {"shared_dev_num": 2}),
    DeviceKind.NPU: ({"sharedDevNum": 2}, {"shared_dev_num": 2}),
    DeviceKind.QAT: (
        {"dpdkDriver": "vfio-pci", "kernelVfDrivers": ["4xxxvf"], "maxNumDevices": 8},
        {"dpdk_driver": "vfio-pci", "max_num_devices": 8},
    ),
    DeviceKind.SGX: (
        {"enclaveLimit": 20, "provisionLimit": 30, "dcapInfraResources": True},
        {"enclave_limit": 20, "provision_limit": 30},
    ),
}


def test_every_kind_is_covered() -> None:
    assert set(SPECS) == set(DeviceKind)


@pytest.mark.parametrize("kind", list(DeviceKind), ids=lambda k: k.value)
def test_plugin_parses_the_operators_arguments(kind: DeviceKind, monkeypatch: pytest.MonkeyPatch) -> None:
    fields, expected = SPECS[kind]
    spec = parse_spec(kind, {"image": f"intel/intel-{kind.value}-plugin:0.36.0", "logLevel": 4, **fields})
    ds = desired_daemonset(spec, Owner(kind, "sample", "uid-1"), "inteldeviceplugins-system")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [plugin_command(kind)]
    monkeypatch.setenv("NODE_NAME", "worker-1")
    cli = importlib.import_module(f"intel_device_plugins.plugins.{kind.value}.cli")
    args = cli.build_parser().parse_args(container["args"])  # a flag it does not know exits here
    assert args.verbosity == 4
    assert {name: getattr(args, name) for name in expected} == expected
