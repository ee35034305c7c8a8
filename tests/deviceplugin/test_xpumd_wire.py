"""xpumd's device-info messages, hand-coded, against classes protoc generates from ``deviceinfo.proto``."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intel_device_plugins.deviceplugin.health import xpumdwire as wire
from intel_device_plugins.deviceplugin.health.xpumdwire import (
    DeviceEvent,
    DeviceHealth,
    DeviceIdentification,
    DeviceInformation,
    FirmwareInfo,
    HealthStatus,
    MemoryInfo,
    PciInfo,
    WireError,
)

ARC = DeviceHealth(
    DeviceInformation(
        uuid="12345678-0000-0000-0000-000000000000",
        model="Super 3000",
        pci=PciInfo("0000:05:00.0", "0bd5", "8086"),
        firmwares=(FirmwareInfo("gfx", "1.2.3.4"), FirmwareInfo("fantable", "0.0.0.0", "1")),
        memory=(MemoryInfo("hbm", "", 17179869184), MemoryInfo("gddr6", "0", 1 << 40)),
    ),
    (
        HealthStatus("frequency", wire.SEVERITY_WARNING, "throttled", "power limit"),
        HealthStatus("memory", wire.SEVERITY_CRITICAL, "critical"),
        HealthStatus("temperature.core.gpu", wire.SEVERITY_OK, "ok"),
        HealthStatus("pci_link", wire.SEVERITY_UNKNOWN),
    ),
)
BARE = DeviceHealth(DeviceInformation(pci=PciInfo()), ())
NO_INFO = DeviceHealth(None, (HealthStatus("gpu", wire.SEVERITY_FAILED, "reset_needed"),))


def _as_ours(device: Any) -> DeviceHealth:
    """A generated ``DeviceHealth`` as this codec's value, field by field."""
    info = None
    if device.HasField("info"):
        i = device.info
        info = DeviceInformation(
            i.uuid,
            i.model,
            PciInfo(i.pci.bdf, i.pci.device_id, i.pci.vendor_id) if i.HasField("pci") else None,
            tuple(FirmwareInfo(f.name, f.version, f.subdevice_id) for f in i.firmwares),
            tuple(MemoryInfo(m.type, m.subdevice_id, m.size) for m in i.memory),
        )
    return DeviceHealth(
        info, tuple(HealthStatus(h.name, h.severity, h.reason, h.message) for h in device.health)
    )


def test_a_health_snapshot_reads_back_through_protobuf(pb: ModuleType) -> None:
    answer = pb.DeviceHealthResponse.FromString(wire.health_response([ARC, BARE, NO_INFO]))
    assert [_as_ours(device) for device in answer.devices] == [ARC, BARE, NO_INFO]
    assert answer.devices[0].health[1].severity == pb.SEVERITY_LEVEL_CRITICAL


def test_protobuf_health_decodes_to_the_same_values(pb: ModuleType) -> None:
    message = pb.DeviceHealthResponse.FromString(wire.health_response([ARC, BARE, NO_INFO]))
    assert wire.decode_health_response(message.SerializeToString()) == (ARC, BARE, NO_INFO)
    assert wire.decode_health_response(pb.DeviceHealthResponse().SerializeToString()) == ()


def test_an_event_round_trips_both_ways(pb: ModuleType) -> None:
    event = DeviceEvent(
        DeviceIdentification(
            "12345678-0000-0000-0000-000000000000", "Super 3000", PciInfo("0000:05:00.0", "0bd5", "8086")
        ),
        "device_detach",
        "DEVICE_DETACH",
        wire.EVENT_ERROR,
    )
    theirs = pb.DeviceEventResponse.FromString(wire.event_response(event))
    assert (theirs.device.uuid, theirs.device.pci.bdf, theirs.reason, theirs.message, theirs.severity) == (
        event.device.uuid if event.device else "",
        "0000:05:00.0",
        "device_detach",
        "DEVICE_DETACH",
        pb.EVENT_SEVERITY_LEVEL_ERROR,
    )
    assert wire.decode_event_response(theirs.SerializeToString()) == event
    assert wire.decode_event_response(wire.event_response(DeviceEvent())) == DeviceEvent()


def test_the_requests_are_empty_messages(pb: ModuleType) -> None:
    wire.check_empty_request(pb.WatchDeviceHealthRequest().SerializeToString())
    wire.check_empty_request(pb.WatchDeviceEventsRequest().SerializeToString())


def test_enum_values_this_code_does_not_know_stay_numbers(pb: ModuleType) -> None:
    theirs = pb.DeviceHealthResponse(
        devices=[pb.DeviceHealth(health=[pb.HealthStatus(name="x", severity=9)])]
    )
    assert wire.decode_health_response(theirs.SerializeToString())[0].health[0].severity == 9
    negative = pb.DeviceEventResponse(severity=-2)
    assert wire.decode_event_response(negative.SerializeToString()).severity == -2
    assert pb.DeviceEventResponse.FromString(wire.event_response(DeviceEvent(severity=-2))).severity == -2


def test_unknown_fields_are_skipped(pb: ModuleType) -> None:
    data = wire.health_response([ARC])
    # Field 7 varint, field 8 fixed64, field 9 fixed32 after the devices: a newer server's additions.
    extra = b"\x38\x01" + b"\x41" + bytes(8) + b"\x4d" + bytes(4)
    assert wire.decode_health_response(data + extra) == (ARC,)
    assert pb.DeviceHealthResponse.FromString(data + extra).devices[0].info.model == "Super 3000"


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"\x0a\x05abc", "runs past the end"),
        (b"\x0a", "truncated varint"),
        (b"\x08\x01", "not a message"),
        (b"\x0a\x04\x0a\x02\x08\x01", "uuid: not a string"),
        (b"\x0a\x05\x0a\x03\x0a\x01\xff", "not UTF-8"),
        (b"\x0b", "wire type 3"),
        (b"\x00", "field number 0"),
        (b"\x08" + b"\xff" * 11, "longer than ten bytes"),
    ],
)
def test_malformed_health_is_refused_saying_where(data: bytes, error: str) -> None:
    with pytest.raises(WireError, match=error):
        wire.decode_health_response(data)


def test_empty_nested_messages_are_valid() -> None:
    assert wire.decode_health_response(b"\x0a\x02\x12\x00") == (DeviceHealth(None, (HealthStatus(),)),)


def test_malformed_events_are_refused() -> None:
    with pytest.raises(WireError, match="severity: not a varint"):
        wire.decode_event_response(b"\x22\x00")
    with pytest.raises(WireError, match="reason: not a string"):
        wire.decode_event_response(b"\x10\x01")
    with pytest.raises(WireError, match="watch request"):
        wire.check_empty_request(b"\x0a\x09")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_with_a_wire_error(data: bytes) -> None:
    for decode in (wire.decode_health_response, wire.decode_event_response):
        try:
            result = decode(data)
        except WireError as error:
            assert "Device" in str(error)  # names the message it was decoding
        else:
            assert isinstance(result, tuple | DeviceEvent)


_text = st.text(max_size=12)
_pci = st.one_of(st.none(), st.builds(PciInfo, _text, _text, _text))
_device = st.builds(
    DeviceHealth,
    st.one_of(
        st.none(),
        st.builds(
            DeviceInformation,
            _text,
            _text,
            _pci,
            st.lists(st.builds(FirmwareInfo, _text, _text, _text), max_size=2).map(tuple),
            st.lists(st.builds(MemoryInfo, _text, _text, st.integers(0, 2**64 - 1)), max_size=2).map(tuple),
        ),
    ),
    st.lists(st.builds(HealthStatus, _text, st.integers(-(2**31), 2**31 - 1), _text, _text), max_size=3).map(
        tuple
    ),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_device, max_size=3))
def test_any_snapshot_round_trips_through_protobuf(pb: ModuleType, devices: list[DeviceHealth]) -> None:
    theirs = pb.DeviceHealthResponse.FromString(wire.health_response(devices))
    assert [_as_ours(device) for device in theirs.devices] == devices
    assert wire.decode_health_response(theirs.SerializeToString()) == tuple(devices)
