"""DSA and IAA work queues as DRA devices, on simulated nodes."""

from __future__ import annotations

import os
from pathlib import Path

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.model import (
    STANDARD_PCI_BUS_ID,
    STANDARD_PCIE_ROOT,
    AllocatedDevice,
    Device,
    Inventory,
)
from intel_device_plugins.dra.placement import pci_device_name
from intel_device_plugins.plugins.idxd.discovery import DSA, IAA
from intel_device_plugins.plugins.idxd.dra import (
    DSA_DEVICE_CLASSES,
    IAA_DEVICE_CLASSES,
    WorkQueueDriverProfile,
    scan_queue_devices,
)
from intel_device_plugins.plugins.idxd.plugin import WorkQueuePlugin
from tests.builders import two_socket_node as node


def by_kernel_name(inventory: Inventory) -> dict[str, Device]:
    """The queues keyed ``dsa0-wq0-1`` after the kernel's names, which the ``device`` and ``queue``
    attributes keep; the device names are PCI-based."""
    return {
        f"{device.attributes['device']}-{str(device.attributes['queue']).replace('.', '-')}": device
        for device in inventory.devices
    }


def test_user_queues_become_devices_with_their_settings(tmp_path: Path) -> None:
    node(tmp_path, "[[dsa]]\ncount = 2\nwqs = 2\nnuma_node = 1\nwq_mode = 'mixed'\n")
    inventory = scan_queue_devices(str(tmp_path), DSA)
    assert inventory.problems == ()
    devices = by_kernel_name(inventory)
    assert sorted(devices) == ["dsa0-wq0-0", "dsa0-wq0-1", "dsa1-wq1-0", "dsa1-wq1-1"]
    for kernel_name, device in devices.items():
        queue = kernel_name.rsplit("-", 1)[1]
        assert device.name == pci_device_name(str(device.attributes[STANDARD_PCI_BUS_ID]), f"wq{queue}")
    modes = {name: device.attributes["mode"] for name, device in devices.items()}
    assert set(modes.values()) == {"dedicated", "shared"}
    for device in devices.values():
        assert device.allow_multiple_allocations == (device.attributes["mode"] == "shared")
        assert device.attributes["type"] == "user"
        assert device.attributes["size"] == 16
        assert device.attributes["priority"] == 10
        assert device.attributes["numaNode"] == 1
        assert str(device.attributes[STANDARD_PCIE_ROOT]).startswith("pci")
        assert device.health is Health.HEALTHY
    first = devices["dsa0-wq0-0"]
    assert first.attributes["device"] == "dsa0"
    assert first.cdi is not None
    assert first.cdi.nodes[0].host_path == f"{tmp_path}/dev/dsa/wq0.0"
    # udev's /dev/char link reaches the container at its own path, with the node it resolves to as
    # its host path: CDI runtimes refuse a symlink as a device node.
    char = first.cdi.nodes[1]
    assert os.path.islink(char.container_path), char
    assert char.container_path.startswith(f"{tmp_path}/dev/char/")
    assert char.host_path == f"{tmp_path}/dev/dsa/wq0.0"
    assert (
        devices["dsa0-wq0-0"].attributes[STANDARD_PCI_BUS_ID]
        != devices["dsa1-wq1-0"].attributes[STANDARD_PCI_BUS_ID]
    )


def test_kernel_queues_are_not_published_and_iaa_uses_its_own_driver_name(tmp_path: Path) -> None:
    node(tmp_path, "[[iaa]]\nwqs = 1\n[[dsa]]\nwqs = 2\nwq_type = 'kernel'\n")
    assert scan_queue_devices(str(tmp_path), DSA).devices == ()
    profile = WorkQueueDriverProfile(IAA, str(tmp_path))
    assert profile.driver_name == "iaa.intel.com"
    assert list(by_kernel_name(profile.scan())) == ["iax0-wq0-0"]


def test_a_queue_whose_node_fails_the_checks_is_published_unhealthy_with_the_reason(tmp_path: Path) -> None:
    node(tmp_path, "[[dsa]]\nwqs = 1\n")
    os.unlink(tmp_path / "dev/dsa/wq0.0")
    inventory = scan_queue_devices(str(tmp_path), DSA)
    (device,) = inventory.devices
    assert device.health is Health.UNHEALTHY
    assert "wq0.0" in device.health_message and "missing" in device.health_message
    assert any("dsa0/wq0.0" in problem for problem in inventory.problems)


def test_claim_edits_give_each_allocated_queue_its_nodes(tmp_path: Path) -> None:
    node(tmp_path, "[[dsa]]\nwqs = 2\n")
    profile = WorkQueueDriverProfile(DSA, str(tmp_path))
    devices = profile.scan().by_name()
    allocated = [
        (AllocatedDevice("wq", "node-a", name), devices[name])
        for name in ("0000-10-00-0-wq1", "0000-10-00-0-wq0")
    ]
    edits = profile.claim_edits("uid-1", allocated)
    assert [edit.qualified_name for edit in edits] == [
        "k8s.dsa.intel.com/claim=uid-1-0000-10-00-0-wq1",
        "k8s.dsa.intel.com/claim=uid-1-0000-10-00-0-wq0",
    ]
    assert edits[0].nodes[0].container_path.endswith("/dev/dsa/wq0.1")


def test_classes_map_each_user_queue_resource_the_plugin_advertises(tmp_path: Path) -> None:
    node(tmp_path, "[[dsa]]\ncount = 2\nwqs = 2\nwq_mode = 'mixed'\n[[iaa]]\nwqs = 2\nwq_mode = 'mixed'\n")
    for kind, classes in ((DSA, DSA_DEVICE_CLASSES), (IAA, IAA_DEVICE_CLASSES)):
        advertised = {
            f"{kind.namespace}/{resource}" for resource in WorkQueuePlugin(kind, prefix=str(tmp_path)).scan()
        }
        mapped = {spec.extended_resource_name: spec for spec in classes if spec.extended_resource_name}
        assert advertised == set(mapped), kind
        for name, spec in mapped.items():
            mode = name.rsplit("-", 1)[1]
            assert spec.selector == f'device.attributes["{kind.namespace}"].mode == "{mode}"'
            assert spec.driver == kind.namespace
        assert classes[0].name == kind.namespace and classes[0].selector is None
