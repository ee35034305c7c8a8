"""The pure half of the xpumd client: messages to findings, latched events, the view while xpumd is down."""

from __future__ import annotations

import pytest

from intel_device_plugins.deviceplugin.health import deviceinfo as pb
from intel_device_plugins.deviceplugin.health.model import Finding, Severity
from intel_device_plugins.deviceplugin.health.xpumd import (
    EventLatch,
    StreamState,
    XpumdSettings,
    XpumdView,
    event_finding,
    health_findings,
)

PCI = pb.PciInfo("0000:03:00.0", "56c0", "8086")
GPU = pb.DeviceInformation("u", "Intel Arc A770", PCI)


def event(reason: str, severity: int, pci: pb.PciInfo | None = PCI) -> pb.DeviceEventResponse:
    return pb.DeviceEventResponse(pb.DeviceIdentification("u", "m", pci), reason, reason.upper(), severity)


def test_each_domain_is_a_finding_keyed_by_the_lowercased_pci_address() -> None:
    devices = [
        pb.DeviceHealth(
            pb.DeviceInformation(pci=pb.PciInfo("0000:0A:00.0")),
            (
                pb.HealthStatus(
                    "memory", pb.SeverityLevel.SEVERITY_LEVEL_CRITICAL, "critical", "replace soon"
                ),
                pb.HealthStatus("frequency", pb.SeverityLevel.SEVERITY_LEVEL_OK, "ok"),
                pb.HealthStatus("pci_link", 7, "odd"),
            ),
        ),
        pb.DeviceHealth(GPU, ()),
        pb.DeviceHealth(pb.DeviceInformation(uuid="no-pci"), (pb.HealthStatus("memory", 3),)),
        pb.DeviceHealth(None, (pb.HealthStatus("memory", 3),)),
    ]
    assert health_findings(devices) == (
        Finding("0000:0a:00.0", "xpumd", "memory", Severity.CRITICAL, "critical replace soon"),
        Finding("0000:0a:00.0", "xpumd", "frequency", Severity.OK, "ok"),
        Finding("0000:0a:00.0", "xpumd", "pci_link", Severity.UNKNOWN, "unknown severity 7: odd"),
        Finding("0000:03:00.0", "xpumd", "xpumd", Severity.UNKNOWN, "no health domains yet"),
    )


@pytest.mark.parametrize(
    ("severity", "expected"),
    [
        (pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_INFO, None),
        (pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_UNSPECIFIED, None),
        (
            pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_WARN,
            None,
        ),  # the snapshot carries (and clears) what WARN events announce
        (pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR, Severity.CRITICAL),
        (pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_FATAL, Severity.FAILED),
    ],
)
def test_event_severities_map_to_finding_severities(severity: int, expected: Severity | None) -> None:
    found = event_finding(event("device_detach", severity))
    assert (found.severity if found else None) is expected
    if found:
        assert (found.device, found.source, found.category) == (
            "0000:03:00.0",
            "xpumd-event",
            "device_detach",
        )


def test_an_event_without_a_pci_address_latches_nothing() -> None:
    assert (
        event_finding(event("device_detach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR, pci=None))
        is None
    )
    assert (
        EventLatch()
        .after(event("device_detach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR, pci=None))
        .findings()
        == ()
    )


def test_events_latch_per_device_and_reason_until_the_device_is_attached() -> None:
    other = pb.PciInfo("0000:04:00.0")
    latch = (
        EventLatch()
        .after(event("ras_correctable_errors", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_WARN))
        .after(event("device_detach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR))
        .after(event("device_detach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR, other))
        .after(event("device_detach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_FATAL))
    )
    assert [(f.device, f.category, f.severity) for f in latch.findings()] == [
        ("0000:03:00.0", "device_detach", Severity.FAILED),
        ("0000:04:00.0", "device_detach", Severity.CRITICAL),
    ]
    attached = latch.after(event("device_attach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_INFO))
    assert [f.device for f in attached.findings()] == ["0000:04:00.0"]


def test_while_down_every_device_xpumd_spoke_of_is_unknown() -> None:
    snapshot = health_findings(
        [pb.DeviceHealth(GPU, (pb.HealthStatus("memory", pb.SeverityLevel.SEVERITY_LEVEL_FAILED),))]
    )
    latch = EventLatch().after(
        event("device_detach", pb.EventSeverityLevel.EVENT_SEVERITY_LEVEL_ERROR, pb.PciInfo("0000:04:00.0"))
    )
    up = XpumdView(snapshot, latch, StreamState.CONNECTED)
    assert up.findings() == snapshot + latch.findings()
    down = XpumdView(snapshot, latch, StreamState.DOWN, "ConnectionRefusedError: refused")
    assert down.findings() == (
        Finding(
            "0000:03:00.0", "xpumd", "xpumd", Severity.UNKNOWN, "xpumd down: ConnectionRefusedError: refused"
        ),
        Finding(
            "0000:04:00.0", "xpumd", "xpumd", Severity.UNKNOWN, "xpumd down: ConnectionRefusedError: refused"
        ),
    )
    assert XpumdView().findings() == ()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="max_message_bytes"):
        XpumdSettings(max_message_bytes=0)
    with pytest.raises(ValueError, match="at most the cap"):
        XpumdSettings(first_retry_seconds=60, max_retry_seconds=30)
    with pytest.raises(ValueError, match="stale_after_seconds"):
        XpumdSettings(stale_after_seconds=0)
