"""Every kind's DaemonSet command line, as the operator generates it, parsed by that plugin's own parser."""

from __future__ import annotations

import importlib
import shlex
from typing import Any

import pytest

from intel_device_plugins.operator.combined import Member, combined_dra_daemonset
from intel_device_plugins.operator.daemonset import Owner, desired_daemonset
from intel_device_plugins.operator.images import dra_driver_command, plugin_command
from intel_device_plugins.operator.kinds import DeviceKind
from intel_device_plugins.operator.model import parse_spec
from intel_device_plugins.plugins import dracombined, flagnames
from intel_device_plugins.plugins.fpga.discovery import Mode

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


# A DRA driver spec per kind that sets every field the operator turns into a driver flag, and what the
# driver's own parser must then hold.
DRA_SPECS: dict[DeviceKind, tuple[dict[str, Any], dict[str, Any]]] = {
    DeviceKind.DLB: ({}, {}),
    DeviceKind.DSA: ({}, {}),
    DeviceKind.FPGA: ({"mode": "region"}, {"mode": Mode.REGION}),
    DeviceKind.GPU: ({}, {}),
    DeviceKind.IAA: ({}, {}),
    DeviceKind.NPU: ({}, {}),
    DeviceKind.QAT: (
        {"dpdkDriver": "igb_uio", "kernelVfDrivers": ["4xxxvf", "420xxvf"], "maxNumDevices": 8},
        {"dpdk_driver": "igb_uio", "max_num_devices": 8, "kernel_vf_drivers": ("4xxxvf", "420xxvf")},
    ),
    DeviceKind.SGX: ({}, {}),
}
NODE_IMAGE = "intel-device-plugins/intel-device-plugins-node:0.1.0"


def _dra_container(kind: DeviceKind, fields: dict[str, Any]) -> dict[str, Any]:
    spec = parse_spec(kind, {"image": NODE_IMAGE, "logLevel": 4, "deployAs": "DRADriver", **fields})
    ds = desired_daemonset(spec, Owner(kind, "sample", "uid-1"), "ns", dra_service_account="sa")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


@pytest.mark.parametrize("kind", list(DeviceKind), ids=lambda k: k.value)
def test_dra_driver_parses_the_operators_arguments(kind: DeviceKind, monkeypatch: pytest.MonkeyPatch) -> None:
    fields, expected = DRA_SPECS[kind]
    container = _dra_container(kind, fields)
    assert container["command"] == [dra_driver_command(kind)]
    monkeypatch.setenv("NODE_NAME", "worker-1")
    module = importlib.import_module(dracombined.KINDS[kind.value])
    args = module.build_parser().parse_args(container["args"])  # a flag it does not know exits here
    assert args.verbosity == 4
    assert (args.cdi_root, args.kubelet_plugins_directory_path) == (
        "/var/run/cdi",
        "/var/lib/kubelet/plugins",
    )
    assert {name: getattr(args, name) for name in expected} == expected


def test_the_combined_dra_process_parses_every_kinds_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """``intel_dra_drivers``' own parser takes the combined DaemonSet's arguments, and each ``--driver``
    value is what that kind's binary takes."""
    members = [
        Member(
            parse_spec(kind, {"image": NODE_IMAGE, "deployAs": "DRADriver", **DRA_SPECS[kind][0]}),
            Owner(kind, kind.value, f"uid-{kind.value}"),
        )
        for kind in DeviceKind
    ]
    (container,) = combined_dra_daemonset(members, "ns")["spec"]["template"]["spec"]["containers"]
    monkeypatch.setenv("NODE_NAME", "worker-1")
    parser = dracombined.build_parser()
    args = parser.parse_args(container["args"])
    assert [shlex.split(d)[0] for d in args.driver] == [k.value for k in DeviceKind]
    for spec in args.driver:
        dracombined.build_kind(spec, ["-node-name", "worker-1"], parser)  # exits on an unknown flag


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
