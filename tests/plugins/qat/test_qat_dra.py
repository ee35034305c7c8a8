"""QAT VFs as DRA devices, on the DPDK plugin's discovery and binding."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.dra.model import STANDARD_PCI_BUS_ID, AllocatedDevice
from intel_device_plugins.plugins.qat.discovery import DpdkConfig, QatPaths
from intel_device_plugins.plugins.qat.dra import (
    QAT_DEVICE_CLASSES,
    QatDriverProfile,
    device_name,
    service_attributes,
    services_value,
)
from intel_device_plugins.plugins.qat.plugin import QatDpdkPlugin
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.qat import FakeTreeBinder, add_pf, load_driver


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    fake = FakeTree(tmp_path / "node", numa_nodes=2)
    fake.write_numa_nodes()
    return fake


def profile(tree: FakeTree) -> QatDriverProfile:
    return QatDriverProfile(QatDpdkPlugin(QatPaths(tree.root), DpdkConfig(), binder=FakeTreeBinder(tree)))


def test_each_vf_is_a_device_with_its_services_and_pf(tree: FakeTree) -> None:
    crypto = add_pf(tree, vfs=2, services="sym;asym", vf_driver="4xxxvf", numa_node=1)
    compression = add_pf(tree, vfs=1, services="dc")
    load_driver(tree, "vfio-pci")
    inventory = profile(tree).scan()
    devices = inventory.by_name()
    assert sorted(devices) == sorted(device_name(a) for a in (*crypto.vfs, *compression.vfs))
    vf = devices[device_name(crypto.vfs[0])]
    assert vf.attributes["services"] == "sym;asym", "Intel's driver's spelling, not the plugin's cy"
    assert (vf.attributes["sym"], vf.attributes["asym"], vf.attributes["dc"]) == (True, True, False)
    assert vf.attributes["pfAddress"] == crypto.address
    assert vf.attributes[STANDARD_PCI_BUS_ID] == crypto.vfs[0]
    assert vf.attributes["numaNode"] == 1
    assert vf.health is Health.HEALTHY, "the driver binds VFs to vfio-pci as the plugin does"
    assert devices[device_name(compression.vfs[0])].attributes["dc"] is True


def test_a_vf_that_cannot_be_bound_is_unhealthy_naming_the_reason(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, vf_driver="4xxxvf")
    inventory = profile(tree).scan()  # no vfio-pci driver loaded: binding fails
    (device,) = inventory.devices
    assert device.health is Health.UNHEALTHY
    assert pf.vfs[0] in device.health_message


def test_claim_edits_number_the_vfs_from_one_in_allocation_order(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=3)
    load_driver(tree, "vfio-pci")
    qat = profile(tree)
    devices = qat.scan().by_name()
    chosen = [devices[device_name(pf.vfs[2])], devices[device_name(pf.vfs[0])]]
    edits = qat.claim_edits("uid", [(AllocatedDevice("qat", "n", d.name), d) for d in chosen])
    assert [edit.env for edit in edits] == [(f"QAT1={pf.vfs[2]}",), (f"QAT2={pf.vfs[0]}",)]
    assert any(node.container_path.endswith("/dev/vfio/vfio") for node in edits[0].nodes)


def test_every_resource_name_of_the_plugin_has_a_mapped_class() -> None:
    mapped = {device_class(spec)["spec"].get("extendedResourceName") for spec in QAT_DEVICE_CLASSES}
    assert {"qat.intel.com/generic", "qat.intel.com/cy", "qat.intel.com/sym-dc", "qat.intel.com/dc"} <= mapped


def test_vfs_are_named_as_intels_driver_names_them() -> None:
    assert device_name("0000:6b:00.1") == "qatvf-0000-6b-00-1"


@pytest.mark.parametrize(
    ("resource", "services"),
    [
        ("cy", "sym;asym"),
        ("sym-dc", "sym;dc"),
        ("asym-dc", "asym;dc"),
        ("dc", "dc"),
        ("sym", "sym"),
        ("dcc", "dcc"),
        ("generic", ""),
        ("decomp", "decomp"),
        ("dc-sym", "sym;dc"),
    ],
)
def test_services_are_spelled_in_intels_fixed_order(resource: str, services: str) -> None:
    assert services_value(resource) == services


def test_the_service_booleans_stay_beside_the_spelling() -> None:
    attributes = service_attributes("asym-dc")
    assert attributes == {
        "services": "asym;dc",
        "sym": False,
        "asym": True,
        "dc": True,
        "dcc": False,
        "decomp": False,
    }


def test_classes_select_intels_spelling_and_keep_the_plugins_resource_names() -> None:
    selectors = {spec.extended_resource_name: spec.selector for spec in QAT_DEVICE_CLASSES}
    assert selectors["qat.intel.com/cy"] == 'device.attributes["qat.intel.com"].services == "sym;asym"'
    assert selectors["qat.intel.com/generic"] == 'device.attributes["qat.intel.com"].services == ""'


def test_a_vf_without_a_known_pf_still_has_every_attribute(tree: FakeTree) -> None:
    add_pf(tree, vfs=1, services="dc", numa_node=-1)
    load_driver(tree, "vfio-pci")
    (device,) = profile(tree).scan().devices
    assert device.attributes["numaNode"] == -1
    assert "pfAddress" in device.attributes
