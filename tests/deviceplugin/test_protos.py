"""The protos must match the kubelet's wire names (their codecs are checked in tests/kubeletapi)."""

from __future__ import annotations

from k8stest.kubeletapi import deviceplugin_v1beta1_pb2 as dp
from k8stest.kubeletapi import dra_health_v1_pb2 as health
from k8stest.kubeletapi import dra_health_v1alpha1_pb2 as health_alpha
from k8stest.kubeletapi import dra_v1_pb2 as dra
from k8stest.kubeletapi import podresources_v1_pb2 as pr


def test_device_plugin_wire_names() -> None:
    services = dp.DESCRIPTOR.services_by_name
    assert dp.DESCRIPTOR.package == "v1beta1"
    assert set(services["DevicePlugin"].methods_by_name) == {
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    }
    assert set(services["Registration"].methods_by_name) == {"Register"}
    fields = {f.name: f.number for f in dp.ContainerAllocateResponse.DESCRIPTOR.fields}
    assert fields == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
    fields = {f.name: f.number for f in dp.ContainerPreferredAllocationRequest.DESCRIPTOR.fields}
    assert fields == {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    assert {f.name: f.number for f in dp.Device.DESCRIPTOR.fields} == {"ID": 1, "health": 2, "topology": 3}
    fields = {f.name: f.number for f in dp.RegisterRequest.DESCRIPTOR.fields}
    assert fields == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}


def test_pod_resources_wire_names() -> None:
    assert pr.DESCRIPTOR.package == "v1"
    methods = set(pr.DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name)
    assert methods == {"List", "GetAllocatableResources", "Get"}
    fields = {f.name: f.number for f in pr.ContainerResources.DESCRIPTOR.fields}
    assert fields == {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5}
    assert "share_id" in {f.name for f in pr.ClaimResource.DESCRIPTOR.fields}


def test_dra_wire_names() -> None:
    """The kubelet calls these full names; the registration strings are ``<package>.<service>``."""
    assert (
        dra.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    )
    methods = set(dra.DESCRIPTOR.services_by_name["DRAPlugin"].methods_by_name)
    assert methods == {"NodePrepareResources", "NodeUnprepareResources"}
    fields = {f.name: f.number for f in dra.Device.DESCRIPTOR.fields}
    assert fields == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert {f.name: f.number for f in dra.Claim.DESCRIPTOR.fields} == {"namespace": 1, "uid": 2, "name": 3}
    for module, package in ((health, "v1"), (health_alpha, "v1alpha1")):
        service = module.DESCRIPTOR.services_by_name["DRAResourceHealth"]
        assert service.full_name == f"{package}.DRAResourceHealth"
        assert set(service.methods_by_name) == {"NodeWatchResources"}
        fields = {f.name: f.number for f in module.DeviceHealth.DESCRIPTOR.fields}
        assert fields == {
            "device": 1,
            "health": 2,
            "last_updated_time": 3,
            "health_check_timeout_seconds": 4,
            "message": 5,
        }
