"""A device plugin against the kubelet's real device manager (pkg/kubelet/cm/devicemanager)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from k8stest.devicemanager import AdmissionError, DeviceManagerHarness, pod_manifest
from k8stest.fakeplugin import (
    UNHEALTHY,
    AllocationSpec,
    FakeDevice,
    FakeDevicePlugin,
    devices,
)
from k8stest.kubeclient import wait_for
from k8stest.kubeletapi import podresources_v1_pb2 as pr
from k8stest.kubeletapi import podresources_v1_pb2_grpc as pr_grpc

pytestmark = pytest.mark.k8s

RESOURCE = "example.com/foo"
ALLOC = AllocationSpec(
    dev_prefix="/dev/foo",
    mounts=(("/etc/foo", "/var/lib/foo", True),),
    env_name="FOO_DEVICES",
    annotations={"example.com/foo-annotation": "yes"},
    cdi_kind="example.com/foo",
)


@pytest.fixture
def plugin(device_manager: DeviceManagerHarness) -> Iterator[FakeDevicePlugin]:
    p = FakeDevicePlugin(
        device_manager.device_plugin_dir,
        RESOURCE,
        devices(3, numa=lambda i: (i % 2,)),
        allocation=ALLOC,
    )
    p.start()
    try:
        yield p
    finally:
        p.stop()


def test_plugin_registers_and_capacity_matches(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin
) -> None:
    res = device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    assert plugin.registrations == 1
    assert {d.id for d in res.devices} == {"dev0", "dev1", "dev2"}
    assert all(d.health == "Healthy" for d in res.devices)
    assert {d.id: d.numa for d in res.devices} == {"dev0": (0,), "dev1": (1,), "dev2": (0,)}


def test_unhealthy_device_lowers_allocatable_not_capacity(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin
) -> None:
    device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    plugin.set_devices([FakeDevice("dev0"), FakeDevice("dev1", UNHEALTHY), FakeDevice("dev2")])
    res = device_manager.wait_resource(RESOURCE, capacity=3, allocatable=2)
    assert {d.id: d.health for d in res.devices} == {
        "dev0": "Healthy",
        "dev1": "Unhealthy",
        "dev2": "Healthy",
    }
    with pytest.raises(AdmissionError, match="requested number of devices unavailable"):
        device_manager.admit(pod_manifest({RESOURCE: 3}))


def test_admitted_container_gets_device_nodes_mounts_and_cdi_devices(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin
) -> None:
    device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    pod = pod_manifest({"app": {RESOURCE: 2}, "sidecar": {}})
    opts = device_manager.admit(pod)

    assert len(plugin.allocations) == 1
    (ids,) = plugin.allocations[0]
    assert len(ids) == 2 and set(ids) <= {"dev0", "dev1", "dev2"}
    app = opts["app"]
    assert [(d.container_path, d.host_path, d.permissions) for d in app.devices] == [
        (f"/dev/foo{i}", f"/dev/foo{i}", "rw") for i in sorted(ids)
    ]
    assert [(m.container_path, m.host_path, m.read_only) for m in app.mounts] == [
        ("/etc/foo", "/var/lib/foo", True)
    ]
    assert app.envs == {"FOO_DEVICES": ",".join(sorted(ids))}
    assert app.annotations == {"example.com/foo-annotation": "yes"}
    assert app.cdi_devices == tuple(sorted(f"example.com/foo={i}" for i in ids))
    sidecar = opts["sidecar"]
    assert sidecar.devices == () and sidecar.cdi_devices == () and sidecar.envs == {}


def test_podresources_served_from_the_same_state(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin
) -> None:
    device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    pod = pod_manifest({RESOURCE: 1}, name="pr-pod", namespace="ns1")
    device_manager.admit(pod)
    (ids,) = plugin.allocations[0]

    with grpc.insecure_channel(f"unix://{device_manager.podresources_socket}") as ch:
        stub = pr_grpc.PodResourcesListerStub(ch)
        listed = stub.List(pr.ListPodResourcesRequest(), timeout=10)
        alloc = stub.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=10)

    (pod_res,) = listed.pod_resources
    assert (pod_res.name, pod_res.namespace) == ("pr-pod", "ns1")
    (ctr,) = pod_res.containers
    assert [(d.resource_name, list(d.device_ids)) for d in ctr.devices] == [(RESOURCE, ids)]
    assert sorted(i for d in alloc.devices for i in d.device_ids) == ["dev0", "dev1", "dev2"]


def test_refused_when_devices_are_exhausted_and_freed_on_removal(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin
) -> None:
    device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    first = pod_manifest({RESOURCE: 3})
    device_manager.admit(first)
    with pytest.raises(AdmissionError, match="requested number of devices unavailable"):
        device_manager.admit(pod_manifest({RESOURCE: 1}))
    device_manager.remove_pod(first["metadata"]["uid"])
    assert "ctr" in device_manager.admit(pod_manifest({RESOURCE: 1}))


def test_kubelet_restart_leads_to_reregistration(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin
) -> None:
    device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    assert plugin.registrations == 1

    device_manager.restart()

    wait_for("re-registration", lambda: plugin.registrations >= 2, timeout=20)
    res = device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    assert {d.id for d in res.devices} == {"dev0", "dev1", "dev2"}
    assert device_manager.starts == 2


def test_device_that_disappears_becomes_unavailable(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin
) -> None:
    device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    plugin.set_devices([FakeDevice("dev0"), FakeDevice("dev1")])
    res = device_manager.wait_resource(RESOURCE, capacity=2, allocatable=2)
    assert {d.id for d in res.devices} == {"dev0", "dev1"}
    with pytest.raises(AdmissionError):
        device_manager.admit(pod_manifest({RESOURCE: 3}))


def test_plugin_gone_makes_all_devices_unallocatable(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin
) -> None:
    device_manager.wait_resource(RESOURCE, capacity=3, allocatable=3)
    plugin.stop()
    # Upstream keeps the capacity for a 5 minute grace period; allocatable drops at once.
    res = device_manager.wait_resource(RESOURCE, capacity=3, allocatable=0)
    assert all(d.health == "Unhealthy" for d in res.devices)


def test_two_harnesses_run_side_by_side(
    device_manager: DeviceManagerHarness, plugin: FakeDevicePlugin, tmp_path: Path
) -> None:
    """The mount-namespace trick gives each harness its own kubelet.sock."""
    other = DeviceManagerHarness(device_manager.bins, tmp_path / "other", tmp_path / "other-dp")
    other.start()
    try:
        with FakeDevicePlugin(other.device_plugin_dir, "example.com/bar", devices(1)):
            other.wait_resource("example.com/bar", capacity=1)
            assert RESOURCE not in other.resources()
        assert "example.com/bar" not in device_manager.resources()
        device_manager.wait_resource(RESOURCE, capacity=3)
    finally:
        other.stop()
