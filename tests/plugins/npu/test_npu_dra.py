"""NPUs as DRA devices."""

from __future__ import annotations

import os
from pathlib import Path

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.dra.model import STANDARD_PCI_BUS_ID
from intel_device_plugins.dra.placement import pci_device_name
from intel_device_plugins.plugins.npu.dra import NPU_DEVICE_CLASSES, NpuDriverProfile
from tests.builders import two_socket_node as node


def test_each_npu_is_a_device_with_its_id_and_placement(tmp_path: Path) -> None:
    node(tmp_path, "[[npu]]\ncount = 2\nnuma_node = 1\ndevice_id = '0x643e'\n[[npu]]\nvendor = '0x1002'\n")
    inventory = NpuDriverProfile(str(tmp_path)).scan()
    devices = {str(device.attributes["node"]): device for device in inventory.devices}
    assert sorted(devices) == ["accel0", "accel1"]
    first = devices["accel0"]
    assert first.name == pci_device_name(str(first.attributes[STANDARD_PCI_BUS_ID]))
    assert first.attributes["pciId"] == "0x643e"
    assert first.attributes["numaNode"] == 1
    assert first.attributes[STANDARD_PCI_BUS_ID] != devices["accel1"].attributes[STANDARD_PCI_BUS_ID]
    assert first.cdi is not None and first.cdi.nodes[0].host_path == f"{tmp_path}/dev/accel/accel0"


def test_an_npu_without_its_node_is_unhealthy_with_the_reason(tmp_path: Path) -> None:
    node(tmp_path, "[[npu]]\n")
    os.unlink(tmp_path / "dev/accel/accel0")
    (device,) = NpuDriverProfile(str(tmp_path)).scan().devices
    assert device.health is Health.UNHEALTHY
    assert "accel0" in device.health_message


def test_the_class_maps_the_plugins_resource() -> None:
    (spec,) = NPU_DEVICE_CLASSES
    assert device_class(spec)["spec"]["extendedResourceName"] == "npu.intel.com/accel"
