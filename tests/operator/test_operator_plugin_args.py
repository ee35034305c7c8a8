"""Every kind's DaemonSet command line, as the operator generates it, parsed by that plugin's own parser."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.images import plugin_command
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from intel_device_plugins.plugins import flagnames

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


def test_the_operator_sets_only_flags_the_plugins_share_by_name() -> None:
    """Every flag in a generated command line is spelled by a constant of plugins/flagnames.py (or is the
    common ``-v``), the module the plugins' parsers take their names from too."""
    shared = {
        flagnames.flag(value)
        for name, value in vars(flagnames).items()
        if name.isupper() and isinstance(value, str)
    }
    emitted: set[str] = set()
    for kind, (fields, _) in SPECS.items():
        spec = parse_spec(kind, {"image": f"intel/intel-{kind.value}-plugin:0.36.0", **fields})
        args = desired_daemonset(spec, Owner(kind, "s", "u"), "ns")["spec"]["template"]["spec"]["containers"][
            0
        ]["args"]
        flags = {a.split("=")[0] for a in args if a.startswith("-")} - {"-v"}
        assert flags <= shared, (kind, flags - shared)
        emitted |= flags
    assert len(emitted) > 10


# The DRA driver binaries whose parsers exist; a kind's driver joins when its binary lands.
DRA_CLIS = {DeviceKind.GPU: "intel_device_plugins.plugins.gpu.dracli"}


@pytest.mark.parametrize("kind", [k for k in DeviceKind if k in DRA_CLIS], ids=lambda k: k.value)
def test_dra_driver_parses_the_operators_arguments(kind: DeviceKind, monkeypatch: pytest.MonkeyPatch) -> None:
    fields = {"logLevel": 4, "image": "intel-device-plugins/intel-device-plugins-node:0.1.0"}
    spec = parse_spec(kind, {**fields, "deployAs": "DRADriver"})
    ds = desired_daemonset(spec, Owner(kind, "sample", "uid-1"), "ns", dra_service_account="sa")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    monkeypatch.setenv("NODE_NAME", "worker-1")
    args = importlib.import_module(DRA_CLIS[kind]).build_parser().parse_args(container["args"])
    assert args.verbosity == 4
    assert (args.cdi_root, args.kubelet_plugins_directory_path) == (
        "/var/run/cdi",
        "/var/lib/kubelet/plugins",
    )


def test_dra_drivers_get_only_flags_shared_by_name() -> None:
    """The kinds' own DRA flags are the plugins' names (QAT's devices, FPGA's mode), from flagnames.py."""
    shared = {flagnames.flag(v) for n, v in vars(flagnames).items() if n.isupper() and isinstance(v, str)}
    emitted: set[str] = set()
    for kind, (fields, _) in SPECS.items():
        spec = parse_spec(kind, {**fields, "deployAs": "DRADriver"})
        pod = desired_daemonset(spec, Owner(kind, "s", "u"), "ns")["spec"]["template"]["spec"]
        flags = {a for a in pod["containers"][0]["args"] if a.startswith("-")} - {"-v"}
        assert flags <= shared, (kind, flags - shared)
        emitted |= flags
    assert {"-dpdk-driver", "-kernel-vf-drivers", "-max-num-devices", "-mode"} <= emitted
