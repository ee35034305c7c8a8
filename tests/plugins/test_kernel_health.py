"""Every PCI kind's plugin with ``-kernel-health``: a fault the kernel shows turns the device Unhealthy in
ListAndWatch, and its recovery turns it back. Each case's fault is one only its source reads (a rising
AER count, an unbound driver, a QAT PF down, a DSA halted, an IAA error bit), so the case fails when
that source is ignored; each plugin is built by its own command line."""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.deviceplugin.cli import GoFlagParser
from intel_device_plugins.deviceplugin.health.kernelhealth import KernelHealthSettings
from intel_device_plugins.deviceplugin.plugin import Scanner
from intel_device_plugins.deviceplugin.uevents import Uevent
from intel_device_plugins.plugins.dlb import cli as dlb_cli
from intel_device_plugins.plugins.dsa import cli as dsa_cli
from intel_device_plugins.plugins.fpga import cli as fpga_cli
from intel_device_plugins.plugins.iaa import cli as iaa_cli
from intel_device_plugins.plugins.npu import cli as npu_cli
from intel_device_plugins.plugins.qat import cli as qat_cli
from intel_device_plugins.sim import faults
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.kubelet import KubeletStandIn
from intel_device_plugins.sim.node import build_node, parse_node_spec

pytestmark = pytest.mark.integration

POLL = 0.1
"""The safety rescan here (5 s on a node): polled signals show within it."""

Step = Callable[[FakeTree, tuple[str, ...]], None]
"""A change on the node, given the faulty device's keys (its PCI address, idxd names, QAT PF)."""


def aer_fatal(tree: FakeTree, keys: tuple[str, ...]) -> None:
    faults.raise_aer(tree, keys[-1], "fatal", "Completion Timeout")


def rebind(tree: FakeTree, keys: tuple[str, ...]) -> None:
    """The admin's recovery after a fatal error: unbind and bind the driver (both with their uevents)."""
    faults.bind(tree, keys[-1], faults.unbind(tree, keys[-1]))


@dataclass(frozen=True)
class Case:
    kind: str
    profile: str
    parser: Callable[[], GoFlagParser]
    build: Callable[[argparse.Namespace], Sequence[Scanner]]
    device: str
    """The device ID the fault is about (empty: the first one); every other stays Healthy."""
    fault: Step
    recover: Step
    flags: tuple[str, ...] = ()


UNBOUND: dict[str, str] = {}


def unbind(tree: FakeTree, keys: tuple[str, ...]) -> None:
    UNBOUND[keys[-1]] = faults.unbind(tree, keys[-1])


def bind_again(tree: FakeTree, keys: tuple[str, ...]) -> None:
    faults.bind(tree, keys[-1], UNBOUND.pop(keys[-1]))


CASES = [
    Case(
        "npu",
        "[[npu]]\ncount = 2\n",
        npu_cli.build_parser,
        npu_cli.build_plugins,
        "accel0-0",
        unbind,
        bind_again,
    ),
    Case(
        "dlb",
        "[[dlb]]\ngeneration = 'dlb2'\ncount = 2\n",
        dlb_cli.build_parser,
        dlb_cli.build_plugins,
        "/dev/dlb0",
        aer_fatal,
        rebind,
    ),
    Case(
        "fpga",
        "[[fpga]]\ncount = 2\n",
        fpga_cli.build_parser,
        fpga_cli.build_plugins,
        "dfl-port.0",
        aer_fatal,
        rebind,
    ),
    Case(
        "qat",
        "[[qat]]\ngeneration = '4xxx'\ncount = 2\nvfs = 2\nservices = 'sym;asym'\n",
        qat_cli.build_parser,
        qat_cli.build_plugins,
        "",
        lambda tree, keys: faults.qat_state(tree, keys[1], "down"),
        lambda tree, keys: faults.qat_state(tree, keys[1], "up"),
    ),
    Case(
        "dsa",
        "[[dsa]]\ncount = 2\nwqs = 1\n",
        dsa_cli.build_parser,
        dsa_cli.build_plugins,
        "wq-user-dedicated-wq0.0-0",
        lambda tree, keys: faults.idxd_state(tree, keys[1], "halted"),
        lambda tree, keys: faults.idxd_state(tree, keys[1], "enabled"),
    ),
    Case(
        "dsa-vfio",
        "[[dsa]]\ncount = 2\ndriver = 'vfio-pci'\n",
        dsa_cli.build_parser,
        dsa_cli.build_plugins,
        "",
        aer_fatal,
        rebind,
        ("-driver", "vfio-pci"),
    ),
    Case(
        "iaa",
        "[[iaa]]\ncount = 2\nwqs = 1\n",
        iaa_cli.build_parser,
        iaa_cli.build_plugins,
        "wq-user-dedicated-wq0.0-0",
        lambda tree, keys: faults.idxd_errors(tree, keys[1], (1 << 3, 0, 0, 0)),
        lambda tree, keys: faults.idxd_errors(tree, keys[1]),
    ),
]


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    """A short directory: FPGA resource names are long, and a socket path has at most 107 bytes."""
    directory = Path(tempfile.mkdtemp(prefix="kh-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def health(kubelet: KubeletStandIn, namespace: str) -> dict[str, str]:
    return {
        device_id: device.health
        for resource, devices in kubelet.resources().items()
        if resource.startswith(namespace + "/")
        for device_id, device in devices.items()
    }


@pytest.mark.parametrize("case", CASES, ids=[case.kind for case in CASES])
async def test_a_kernel_fault_and_its_recovery_reach_list_and_watch(
    case: Case, tmp_path: Path, kubelet: KubeletStandIn, only_uevents: Any
) -> None:
    tree = build_node(parse_node_spec(case.profile), tmp_path / "node")
    (plugin,) = case.build(
        case.parser().parse_args(["-prefix", str(tree.root), "-kernel-health", *case.flags])
    )
    assert plugin.health is not None  # type: ignore[attr-defined]
    plugin.health.settings = KernelHealthSettings(poll_seconds=POLL)  # type: ignore[attr-defined]
    device = case.device or min(device for devices in plugin.scan().values() for device in devices)
    keys = plugin.health.keys_of(tree.root, device)  # type: ignore[attr-defined]
    if case.fault is aer_fatal:
        faults.enable_aer(tree, keys[-1])
    async with only_uevents(plugin, tree, rescan_interval=POLL):
        namespace = plugin.namespace
        await kubelet.wait_for(lambda: device in health(kubelet, namespace))
        before = health(kubelet, namespace)
        assert set(before.values()) == {"Healthy"} and len(before) > 1, before
        case.fault(tree, keys)
        # A QAT PF down takes all its VFs with it; every other fault is about one device.
        affected = {d for d in before if plugin.health.keys_of(tree.root, d)[-1] == keys[-1]}  # type: ignore[attr-defined]
        assert device in affected and affected != set(before)
        unhealthy = {d: "Unhealthy" if d in affected else "Healthy" for d in before}
        await kubelet.wait_for(lambda: health(kubelet, namespace) == unhealthy, timeout=5)
        case.recover(tree, keys)
        await kubelet.wait_for(lambda: health(kubelet, namespace) == before, timeout=5)


@pytest.mark.parametrize("case", CASES, ids=[case.kind for case in CASES])
def test_kernel_health_is_off_by_default_and_then_costs_no_polling(case: Case) -> None:
    (plugin,) = case.build(case.parser().parse_args(["-prefix", "/nonexistent", *case.flags]))
    assert plugin.health is None  # type: ignore[attr-defined]
    interval = plugin.safety_rescan_interval()  # type: ignore[attr-defined]
    assert interval > 5.0 or case.kind in ("qat", "fpga")  # their own polled state: heartbeat, AFU IDs
    (on,) = case.build(case.parser().parse_args(["-prefix", "/nonexistent", "-kernel-health", *case.flags]))
    assert on.safety_rescan_interval() == 5.0  # type: ignore[attr-defined]


def test_qat_kernel_mode_says_kernel_health_is_not_available(caplog: pytest.LogCaptureFixture) -> None:
    args = qat_cli.build_parser().parse_args(["-prefix", "/nonexistent", "-mode", "kernel", "-kernel-health"])
    (plugin,) = qat_cli.build_plugins(args)
    assert not hasattr(plugin, "health")
    assert any("-kernel-health" in record.getMessage() for record in caplog.records)


def test_an_npu_reset_after_a_hang_is_logged_once_and_leaves_the_npu_healthy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tree = build_node(parse_node_spec("[[npu]]\ncount = 1\n"), tmp_path / "node")
    (plugin,) = npu_cli.build_plugins(
        npu_cli.build_parser().parse_args(["-prefix", str(tree.root), "-kernel-health"])
    )
    (address,) = plugin.health.keys_of(tree.root, "accel0-0")  # type: ignore[attr-defined]
    devpath = tree.sysfs_of(address).removeprefix("/sys")
    plugin.observe_uevent(Uevent("change", devpath, "pci", {"IVPU_PM_EVENT": "IVPU_RECOVER"}))  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING):
        assert {i: d.health.value for i, d in plugin.scan()["accel"].items()} == {"accel0-0": "Healthy"}
        plugin.scan()
    assert [r.getMessage() for r in caplog.records] == [
        f"NPU {address}: still Healthy, warning: npu-uevent npu-recovery warning: NPU reset after a hang"
    ]
