"""The generated stubs must match the .proto files, and the protos must match the kubelet's wire names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from intel_device_plugins.deviceplugin.api import deviceplugin_v1beta1_pb2 as dp
from intel_device_plugins.deviceplugin.api import podresources_v1_pb2 as pr

REPO = Path(__file__).resolve().parents[2]
API = Path("intel_device_plugins/deviceplugin/api")


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "tools" / "genproto.py"), str(tmp_path)], check=True)
    generated = sorted(p.name for p in (tmp_path / API).iterdir() if "_pb2" in p.name)
    assert generated, "generator produced nothing"
    for name in generated:
        fresh = (tmp_path / API / name).read_text()
        committed = (REPO / "src" / API / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make protos`"


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
