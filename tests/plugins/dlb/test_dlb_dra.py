"""DLB PFs and VFs as DRA devices."""

from __future__ import annotations

from pathlib import Path

from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.dra.model import STANDARD_PCI_BUS_ID, STANDARD_PCIE_ROOT, AllocatedDevice
from intel_device_plugins.dra.placement import pci_device_name
from intel_device_plugins.plugins.dlb.dra import DLB_DEVICE_CLASSES, DlbDriverProfile
from intel_device_plugins.sim.dlb import add_dlb
from intel_device_plugins.sim.fakefs import FakeTree


def test_pfs_and_vfs_are_devices_with_their_role(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path, numa_nodes=2)
    tree.write_numa_nodes()
    tree.mkdir("/dev")
    add_dlb(tree)
    add_dlb(tree, vfs=2, numa_node=1)
    inventory = DlbDriverProfile(str(tmp_path)).scan()
    roles = {device.attributes["node"]: device.attributes["role"] for device in inventory.devices}
    assert roles == {"dlb0": "pf", "dlb2": "vf", "dlb3": "vf"}, "the PF with VFs (dlb1) stays unpublished"
    vf = next(device for device in inventory.devices if device.attributes["node"] == "dlb2")
    assert vf.name == pci_device_name(str(vf.attributes[STANDARD_PCI_BUS_ID]))
    assert vf.attributes["numaNode"] == 1
    assert str(vf.attributes[STANDARD_PCIE_ROOT]).startswith("pci")
    (edit,) = DlbDriverProfile(str(tmp_path)).claim_edits("u", [(AllocatedDevice("r", "n", vf.name), vf)])
    assert [n.host_path for n in edit.nodes] == [f"{tmp_path}/dev/dlb2"]


def test_classes_select_by_role_and_map_the_plugins_resources() -> None:
    classes = [device_class(spec) for spec in DLB_DEVICE_CLASSES]
    assert [c["spec"]["extendedResourceName"] for c in classes] == ["dlb.intel.com/pf", "dlb.intel.com/vf"]
    assert 'role == "vf"' in classes[1]["spec"]["selectors"][0]["cel"]["expression"]
