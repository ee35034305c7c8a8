"""The DRA services' messages, built with the generated codecs, read back by protobuf's own classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from intel_device_plugins.dra.kubeletservice import health_response
from intel_device_plugins.dra.model import HealthState
from intel_device_plugins.dra.registration import RegistrationService
from intel_device_plugins.kubeletapi import dra_health_v1alpha1
from intel_device_plugins.kubeletapi import pluginregistration_v1 as reg
from k8stest.kubeletapi import dra_health_v1_pb2 as health_v1
from k8stest.kubeletapi import dra_health_v1alpha1_pb2 as health_v1alpha1
from k8stest.kubeletapi import pluginregistration_v1_pb2 as reg_pb


@pytest.mark.parametrize("module", [health_v1, health_v1alpha1], ids=["v1", "v1alpha1"])
def test_health_reads_back_in_both_packages(module: Any) -> None:
    devices = [("card0", HealthState.HEALTHY, ""), ("card1", HealthState.UNHEALTHY, "gt hung")]
    message = health_response("node", devices, 1_700_000_000, 300)
    data = (
        message.encode()
        if module is health_v1
        else dra_health_v1alpha1.NodeWatchResourcesResponse.decode(message.encode()).encode()
    )
    answer = module.NodeWatchResourcesResponse.FromString(data)
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
        ("node", "card0", module.HEALTHY, 1_700_000_000, 300, ""),
        ("node", "card1", module.UNHEALTHY, 1_700_000_000, 300, "gt hung"),
    ]


def test_a_negative_time_takes_ten_bytes_as_protobuf_writes_it() -> None:
    data = health_response("p", [("d", HealthState.UNKNOWN, "")], -1).encode()
    assert health_v1.NodeWatchResourcesResponse.FromString(data).devices[0].last_updated_time == -1


async def test_registration_messages_match_protobuf() -> None:
    service = RegistrationService(
        "gpu.intel.com", Path("/p/dra.sock"), ("v1.DRAPlugin", "v1.DRAResourceHealth")
    )
    info = reg_pb.PluginInfo.FromString((await service.GetInfo(reg.InfoRequest())).encode())
    assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
        "DRAPlugin",
        "gpu.intel.com",
        "/p/dra.sock",
        ["v1.DRAPlugin", "v1.DRAResourceHealth"],
    )
    refused = reg_pb.RegistrationStatus(plugin_registered=False, error="version").SerializeToString()
    await service.NotifyRegistrationStatus(reg.RegistrationStatus.decode(refused))
    taken = reg_pb.RegistrationStatus(plugin_registered=True).SerializeToString()
    await service.NotifyRegistrationStatus(reg.RegistrationStatus.decode(taken))
    assert [(s.registered, s.error) for s in service.statuses] == [(False, "version"), (True, "")]
