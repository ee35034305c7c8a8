"""Kernel health signals read from a simulated node, with the simulator's faults applied."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.health import kernel
from intel_device_plugins.deviceplugin.health.kernel import AerCounts, UeventLatch
from intel_device_plugins.deviceplugin.health.model import (
    Finding,
    HealthSettings,
    HealthState,
    Severity,
    assess,
)
from intel_device_plugins.deviceplugin.uevents import Uevent, parse_uevent
from intel_device_plugins.sim import faults
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.uevents import UeventBroadcaster

PROFILE = """
[[gpu]]
driver = "i915"
count = 1

[[gpu]]
driver = "xe"
count = 1
device_id = "0xe20b"

[[qat]]
count = 1
vfs = 2

[[dsa]]
count = 1
wqs = 2
"""


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[FakeTree]:
    built = build_node(parse_node_spec(PROFILE), tmp_path / "root")
    built.uevents = UeventBroadcaster(tmp_path / "uevents")
    yield built
    built.uevents.close()


@pytest.fixture
def listener(tree: FakeTree) -> Iterator[socket.socket]:
    """A uevent listener as a plugin started with ``-uevent-dir`` binds one."""
    assert tree.uevents is not None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tree.uevents.directory / "test.sock"))
    sock.settimeout(2)
    yield sock
    sock.close()


def received(sock: socket.socket) -> Uevent:
    event = parse_uevent(sock.recv(65536))
    assert event is not None
    return event


def gpu(tree: FakeTree, card: int) -> str:
    address = kernel.card_address(tree.root, f"card{card}")
    assert address is not None
    return address


def qat_pf(tree: FakeTree) -> str:
    return next(p.name for p in tree.path("/sys/bus/pci/drivers/4xxx").iterdir() if p.name.startswith("0000"))


def severities(findings: tuple[Finding, ...]) -> dict[str, Severity]:
    return {finding.category: finding.severity for finding in findings}


def test_aer_counters_parse_with_names_that_hold_spaces() -> None:
    text = "Undefined 0\nData Link Protocol 0\nSurprise Down Error 3\nTOTAL_ERR_FATAL 3\nnot a count x\n"
    assert dict(kernel.parse_aer(text)) == {
        "Undefined": 0,
        "Data Link Protocol": 0,
        "Surprise Down Error": 3,
        "TOTAL_ERR_FATAL": 3,
    }


def test_aer_rises_over_the_baseline_are_findings_by_kind(tree: FakeTree) -> None:
    address = gpu(tree, 0)
    assert kernel.read_aer(tree.root, address) is None  # no AER capability: no findings
    faults.enable_aer(tree, address)
    faults.raise_aer(tree, address, "fatal", "Surprise Down Error", by=2)  # before the plugin started
    baseline = kernel.pci_baseline(tree.root, address)
    assert severities(kernel.pci_findings(tree.root, address, baseline)) == {
        "pci-driver": Severity.OK,
        "aer-fatal": Severity.OK,
        "aer-nonfatal": Severity.OK,
        "aer-correctable": Severity.OK,
    }
    faults.raise_aer(tree, address, "correctable", by=5)
    faults.raise_aer(tree, address, "nonfatal", "Completion Timeout")
    found = severities(kernel.pci_findings(tree.root, address, baseline))
    assert (found["aer-nonfatal"], found["aer-correctable"], found["aer-fatal"]) == (
        Severity.WARNING,
        Severity.OK,
        Severity.OK,
    )
    faults.raise_aer(tree, address, "fatal", "Surprise Down Error")
    findings = kernel.pci_findings(tree.root, address, baseline)
    fatal = next(f for f in findings if f.category == "aer-fatal")
    assert fatal.severity is Severity.CRITICAL
    assert fatal.message == "1 new fatal PCIe error(s): Surprise Down Error +1"
    assert assess(findings, HealthSettings())[address].state is HealthState.UNHEALTHY


def test_a_counter_without_a_total_line_is_summed() -> None:
    counts = AerCounts({"fatal": kernel.parse_aer("Poisoned TLP 1\nECRC 2\n")})
    assert counts.total("fatal") == 3 and counts.total("nonfatal") is None


def test_unbound_changed_and_removed_drivers(tree: FakeTree, listener: socket.socket) -> None:
    address = gpu(tree, 1)
    baseline = kernel.pci_baseline(tree.root, address)
    assert baseline.driver == "xe"
    assert faults.unbind(tree, address) == "xe"
    assert received(listener).action == "unbind"
    finding = kernel.binding_finding(tree.root, address, baseline.driver)
    assert (finding.severity, finding.message) == (Severity.CRITICAL, "driver xe unbound")
    faults.bind(tree, address, "vfio-pci")
    assert received(listener).properties["DRIVER"] == "vfio-pci"
    finding = kernel.binding_finding(tree.root, address, baseline.driver)
    assert (finding.severity, finding.message) == (Severity.CRITICAL, "driver changed from xe to vfio-pci")
    tree.remove_pci_function(address)
    assert kernel.pci_findings(tree.root, address, baseline) == (
        Finding(address, "pci", "pci-presence", Severity.FAILED, "device removed from the PCI bus"),
    )


def test_a_wedged_gpu_is_failed_until_rebound(tree: FakeTree, listener: socket.socket) -> None:
    address = gpu(tree, 1)
    faults.wedge(tree, 1, "rebind,bus-reset", task="simulated")
    event = received(listener)
    assert (event.subsystem, event.properties["WEDGED"]) == ("drm", "rebind,bus-reset")
    latch = UeventLatch().after(event)
    assert latch.findings() == (
        Finding(
            address,
            "wedged",
            "drm-wedged",
            Severity.FAILED,
            "wedged, recovery: rebind,bus-reset (task simulated)",
        ),
    )
    assert (
        assess(latch.findings(), HealthSettings.from_flag("failed"))[address].state is HealthState.UNHEALTHY
    )
    faults.unbind(tree, address)
    faults.bind(tree, address, "xe")
    latch = latch.after(received(listener)).after(received(listener))
    assert latch.findings() == ()


def test_a_wedge_recovered_in_the_driver_is_telemetry_only(tree: FakeTree, listener: socket.socket) -> None:
    faults.wedge(tree, 1, "none")
    finding = kernel.uevent_finding(received(listener))
    assert finding is not None and finding.severity is Severity.OK


@pytest.mark.parametrize(
    ("result", "severity"),
    [
        ("BEGIN_RECOVERY", Severity.WARNING),
        ("SUCCESSFUL_RECOVERY", Severity.OK),
        ("FAILED_RECOVERY", Severity.FAILED),
    ],
)
def test_pci_error_recovery_uevents(
    tree: FakeTree, listener: socket.socket, result: str, severity: Severity
) -> None:
    address = gpu(tree, 0)
    faults.pci_error_recovery(tree, address, result)
    finding = kernel.uevent_finding(received(listener))
    assert finding is not None and (finding.device, finding.severity) == (address, severity)


def test_other_uevents_say_nothing() -> None:
    assert kernel.uevent_finding(Uevent("add", "/devices/pci0000:00/0000:00:02.0", "pci")) is None
    assert (
        kernel.uevent_finding(Uevent("change", "/devices/virtual/misc/x", "misc", {"WEDGED": "rebind"}))
        is None
    )
    npu = Uevent("change", "/devices/pci0000:00/0000:00:0b.0", "pci", {"IVPU_PM_EVENT": "IVPU_RECOVER"})
    finding = kernel.uevent_finding(npu)
    assert finding is not None and (finding.device, finding.severity) == ("0000:00:0b.0", Severity.WARNING)


def test_i915_error_state(tree: FakeTree, listener: socket.socket) -> None:
    address = gpu(tree, 0)
    assert kernel.i915_error_finding(tree.root, "card0") is None  # no error file: nothing to say
    faults.i915_error_state(tree, 0, captured=False)
    assert kernel.i915_error_finding(tree.root, "card0") == Finding(
        address, "i915-error", "gpu-error-state", Severity.OK
    )
    faults.i915_error_state(tree, 0)
    found = kernel.i915_error_finding(tree.root, "card0")
    assert found is not None and found.severity is Severity.WARNING
    hang = kernel.uevent_finding(received(listener))
    assert hang is not None and (hang.category, hang.severity) == ("gpu-reset", Severity.WARNING)


def test_xe_hwmon_temperatures_are_rated_by_the_limits(tree: FakeTree) -> None:
    address = gpu(tree, 1)
    tree.write(f"/sys/bus/pci/devices/{address}/hwmon/hwmon3/temp2_input", "101000\n")
    tree.write(f"/sys/bus/pci/devices/{address}/hwmon/hwmon3/temp3_input", "70000\n")
    findings = kernel.hwmon_findings(tree.root, address)
    assert [(f.category, f.celsius) for f in findings] == [
        ("temperature.gpu", 101.0),
        ("temperature.memory", 70.0),
    ]
    assert assess(findings, HealthSettings())[address].state is HealthState.UNHEALTHY


def test_qat_state_heartbeat_and_ras(tree: FakeTree) -> None:
    pf = qat_pf(tree)
    assert severities(kernel.qat_findings(tree.root, pf)) == {
        "qat-state": Severity.OK,
        "qat-heartbeat": Severity.OK,
    }
    faults.qat_heartbeat(tree, pf, "-1")
    faults.qat_state(tree, pf, "down")
    tree.write(f"/sys/bus/pci/devices/{pf}/qat_ras/errors_fatal", "2\n")
    assert severities(kernel.qat_findings(tree.root, pf)) == {
        "qat-state": Severity.CRITICAL,
        "qat-heartbeat": Severity.CRITICAL,
        "qat-ras-fatal": Severity.CRITICAL,
    }
    faults.qat_heartbeat(tree, pf, "garbage")
    assert severities(kernel.qat_findings(tree.root, pf))["qat-heartbeat"] is Severity.UNKNOWN


def test_idxd_device_and_queue_states_and_errors(tree: FakeTree) -> None:
    assert severities(kernel.idxd_findings(tree.root)) == {
        "idxd-state": Severity.OK,
        "idxd-wq-state": Severity.OK,
    }
    faults.idxd_state(tree, "dsa0", "halted")
    faults.idxd_state(tree, "wq0.1", "disabled")
    faults.idxd_errors(tree, "dsa0", (0, 0, 0, 1 << 40))
    by_device = {(f.device, f.category): f.severity for f in kernel.idxd_findings(tree.root)}
    assert by_device == {
        ("dsa0", "idxd-state"): Severity.FAILED,
        ("dsa0", "idxd-errors"): Severity.CRITICAL,
        ("wq0.0", "idxd-wq-state"): Severity.OK,
        ("wq0.1", "idxd-wq-state"): Severity.WARNING,
    }


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("0x0000000000000000 0x0000000000000000 0x0000000000000000 0x0000000000000000\n", False),
        ("0x0000000000000000 0x0000000000000001 0x0000000000000000 0x0000000000000000\n", True),
        ("00000000,00000000,00000000,00000000,00000000,00000000,00000000,00000000\n", False),
        ("00000000,00000000,00000000,00000000,00000000,00000000,00000100,00000000\n", True),
        ("garbage", None),
        ("", None),
    ],
)
def test_idxd_error_register_formats(text: str, flagged: bool | None) -> None:
    assert kernel.parse_idxd_errors(text) is flagged


def test_an_address_that_is_no_pci_address_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'\.\./etc' is not a PCI address"):
        kernel.read_aer(tmp_path, "../etc")
