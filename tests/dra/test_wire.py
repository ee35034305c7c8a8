"""The hand-written wire format against protobuf's generated classes, and malformed bytes refused."""

from __future__ import annotations

import pytest

from intel_device_plugins.deviceplugin.api import pluginregistration_v1_pb2 as reg_pb
from intel_device_plugins.dra import wire
from intel_device_plugins.dra.api import dra_health_v1_pb2 as health_v1
from intel_device_plugins.dra.api import dra_health_v1alpha1_pb2 as health_v1alpha1
from intel_device_plugins.dra.api import dra_v1_pb2 as pb
from intel_device_plugins.dra.model import ClaimRef, HealthState
from intel_device_plugins.dra.wire import DeviceAnswer, WireError


def test_claims_decode_as_protobuf_encodes_them_and_unknown_fields_are_skipped() -> None:
    request = pb.NodePrepareResourcesRequest(
        claims=[pb.Claim(namespace="ns", uid="u-1", name="c1"), pb.Claim(namespace="", uid="u-2", name="ü")]
    )
    data = request.SerializeToString() + b"\x10\x07"  # an unknown varint field 2 at the end
    assert wire.claims_request(data) == [
        ClaimRef(namespace="ns", name="c1", uid="u-1"),
        ClaimRef(namespace="", name="ü", uid="u-2"),
    ]
    assert wire.claims_request(pb.NodeUnprepareResourcesRequest().SerializeToString()) == []


def test_a_prepare_answer_reads_back_through_protobuf() -> None:
    data = wire.prepare_response(
        {
            "u-1": [
                DeviceAnswer(("gpu",), "node", "card0", ("k8s.gpu.intel.com/claim=u-1-card0",), share_id="s"),
                DeviceAnswer((), "node", "card1", ()),
            ],
            "u-2": "ResourceClaim ns/c2: not allocated",
            "u-3": [],
        }
    )
    answer = pb.NodePrepareResourcesResponse.FromString(data)
    first = answer.claims["u-1"].devices
    assert [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in first] == [
        (["gpu"], "node", "card0", ["k8s.gpu.intel.com/claim=u-1-card0"]),
        ([], "node", "card1", []),
    ]
    assert first[0].HasField("share_id") and first[0].share_id == "s" and not first[1].HasField("share_id")
    assert answer.claims["u-2"].error == "ResourceClaim ns/c2: not allocated"
    assert "u-3" in answer.claims and not answer.claims["u-3"].devices


def test_an_empty_share_id_keeps_its_presence() -> None:
    data = wire.prepare_response({"u": [DeviceAnswer((), "p", "d", (), share_id="")]})
    device = pb.NodePrepareResourcesResponse.FromString(data).claims["u"].devices[0]
    assert device.HasField("share_id") and device.share_id == ""


def test_an_unprepare_answer_reads_back_through_protobuf() -> None:
    answer = pb.NodeUnprepareResourcesResponse.FromString(wire.unprepare_response({"a": "", "b": "cannot"}))
    assert dict(answer.claims) == {
        "a": pb.NodeUnprepareResourceResponse(error=""),
        "b": pb.NodeUnprepareResourceResponse(error="cannot"),
    }


@pytest.mark.parametrize("module", [health_v1, health_v1alpha1], ids=["v1", "v1alpha1"])
def test_health_reads_back_in_both_packages(module: object) -> None:
    devices = [("card0", HealthState.HEALTHY, ""), ("card1", HealthState.UNHEALTHY, "gt hung")]
    answer = module.NodeWatchResourcesResponse.FromString(  # type: ignore[attr-defined]
        wire.health_response("node", devices, 1_700_000_000, 300)
    )
    assert [
        (
            d.device.pool_name,
            d.device.device_name,
            d.health,
            d.last_updated_time,
            d.health_check_timeout_seconds,
            d.message,
        )
        for d in answer.devices
    ] == [
        ("node", "card0", module.HEALTHY, 1_700_000_000, 300, ""),  # type: ignore[attr-defined]
        ("node", "card1", module.UNHEALTHY, 1_700_000_000, 300, "gt hung"),  # type: ignore[attr-defined]
    ]


def test_registration_messages_match_protobuf() -> None:
    info = reg_pb.PluginInfo.FromString(
        wire.plugin_info(
            "DRAPlugin", "gpu.intel.com", "/p/dra.sock", ["v1.DRAPlugin", "v1.DRAResourceHealth"]
        )
    )
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "DRAPlugin",
        "gpu.intel.com",
        "/p/dra.sock",
        ["v1.DRAPlugin", "v1.DRAResourceHealth"],
    )
    refused = reg_pb.RegistrationStatus(plugin_registered=False, error="version").SerializeToString()
    assert wire.registration_status(refused) == (False, "version")
    taken = reg_pb.RegistrationStatus(plugin_registered=True).SerializeToString()
    assert wire.registration_status(taken) == (True, "")
    wire.empty(reg_pb.InfoRequest().SerializeToString())


def test_negative_integers_take_ten_bytes_as_protobuf_writes_them() -> None:
    data = wire.health_response("p", [("d", HealthState.UNKNOWN, "")], -1)
    assert health_v1.NodeWatchResourcesResponse.FromString(data).devices[0].last_updated_time == -1


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x0a\x05abc", "runs past the end"),  # a claim of 5 bytes, 3 there
        (b"\x0a", "truncated varint"),
        (b"\x08" + b"\xff" * 11, "longer than ten bytes"),
        (b"\x0b", "wire type 3"),  # a group: not protobuf 3
        (b"\x00\x01", "field number 0"),
        (b"\x0a\x02\x0a\x00\x08", "truncated"),
        (b"\x08\x01", "not a message"),  # claims as a varint
        (b"\x0a\x03\x0a\x01\xff", "not UTF-8"),
        (b"\x0a\x02\x08\x01", "not a string"),  # namespace as a varint
        (b"\x09\x01\x02", "runs past the end"),  # fixed64 cut short
    ],
)
def test_malformed_claims_are_refused_naming_the_problem(data: bytes, words: str) -> None:
    with pytest.raises(WireError, match=words):
        wire.claims_request(data)


def test_fixed_width_fields_are_skipped_like_any_unknown_field() -> None:
    data = b"\x09" + bytes(8) + b"\x15" + bytes(4) + pb.Claim(uid="u").SerializeToString()
    # field 1 fixed64 is not a claim message: refused; fields 2 fixed32 and later are skipped
    with pytest.raises(WireError):
        wire.claims_request(data)
    assert wire.claims_request(b"\x15" + bytes(4)) == []
