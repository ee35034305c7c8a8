"""The GPU DRA profile on simulated nodes: devices, attributes, capacities, health, SR-IOV, classes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import Health
from intel_device_plugins.dra.classes import device_class
from intel_device_plugins.dra.model import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    STANDARD_PCI_BUS_ID,
    STANDARD_PCIE_ROOT,
    AllocatedDevice,
    Capacity,
    Device,
    RequestPolicy,
)
from intel_device_plugins.dra.profile import ClaimPreparationError, claim_cdi_kind
from intel_device_plugins.plugins.gpu.discovery import ByPath, GpuOptions, scan_gpus
from intel_device_plugins.plugins.gpu.dra import (
    ADMIN_ACCESS_NAMESPACE_LABEL,
    GPU_DEVICE_CLASSES,
    GpuDriverProfile,
    monitoring_claim_template,
)
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.node import build_node, parse_node_spec
from intel_device_plugins.sim.profiles import profile_text

GIB = 1 << 30
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    fake = FakeTree(tmp_path / "node", numa_nodes=2)
    fake.mkdir("/sys/class/drm")
    fake.mkdir("/dev/dri/by-path")
    fake.write_numa_nodes()
    return fake


def devices(tree: FakeTree, options: GpuOptions | None = None) -> dict[str, Device]:
    profile = GpuDriverProfile(prefix=str(tree.root), options=options or GpuOptions())
    return dict(profile.scan().by_name())


def test_i915_card_with_local_memory(tree: FakeTree) -> None:
    card = gpu.add_card(tree, driver="i915", device_id="0x56c0", numa_node=1, memory_bytes=16 * GIB)

    device = devices(tree)["card0"]

    assert dict(device.attributes) == {
        "driver": "i915",
        "pciId": "0x56c0",
        "family": "Flex",
        "model": "Flex 170",
        "sriov": "none",
        "numaNode": 1,
        "resource.kubernetes.io/numaNode": 1,
        STANDARD_PCI_BUS_ID: card.address,
        STANDARD_PCIE_ROOT: f"pci{card.address[:7]}",
    }
    assert dict(device.capacity) == {
        "memory": Capacity(str(16 * GIB), RequestPolicy(default=str(16 * GIB))),
        "millicores": Capacity("1000", RequestPolicy(default="0")),
    }
    assert device.allow_multiple_allocations
    assert device.health is Health.HEALTHY and device.health_message == ""


def test_xe_card_memory_is_the_sum_of_its_tiles(tree: FakeTree) -> None:
    gpu.add_card(tree, driver="xe", device_id="0xe20b", tiles=2, memory_bytes=12 * GIB + 1)

    device = devices(tree)["card0"]

    assert device.attributes["driver"] == "xe"
    assert device.attributes["pciId"] == "0xe20b"
    assert (device.attributes["family"], device.attributes["model"]) == ("Arc", "B580")
    assert device.capacity["memory"].value == str(12 * GIB + 1)


def test_card_without_local_memory_is_taken_whole_by_millicores(tree: FakeTree) -> None:
    gpu.add_card(tree, device_id="0x4680")  # an integrated GPU: no local memory, no known model

    device = devices(tree)["card0"]

    assert dict(device.capacity) == {"millicores": Capacity("1000", RequestPolicy(default="1000"))}
    assert "family" not in device.attributes and "model" not in device.attributes
    assert device.attributes["pciId"] == "0x4680"


def test_unreadable_memory_size_is_a_problem_not_a_guess(tree: FakeTree) -> None:
    gpu.add_card(tree, memory_bytes=GIB)
    tree.write("/sys/class/drm/card0/lmem_total_bytes", "lots\n")
    profile = GpuDriverProfile(prefix=str(tree.root))

    inventory = profile.scan()

    (device,) = inventory.devices
    assert "memory" not in device.capacity
    assert device.capacity["millicores"].request_policy == RequestPolicy(default="1000")
    assert any("card0" in p and "lmem_total_bytes" in p and "'lots'" in p for p in inventory.problems)
    assert scan_gpus(str(tree.root), GpuOptions()).problems == ()  # the device plugin does not read it


def test_xe_tile_with_garbage_size_drops_the_memory_capacity(tree: FakeTree) -> None:
    card = gpu.add_card(tree, driver="xe", tiles=2, memory_bytes=8 * GIB)
    tree.write(f"{tree.sysfs_of(card.address)}/tile1/physical_vram_size_bytes", "-5\n")
    profile = GpuDriverProfile(prefix=str(tree.root))

    inventory = profile.scan()

    assert "memory" not in inventory.devices[0].capacity
    assert any("card0" in p and "physical_vram_size_bytes" in p for p in inventory.problems)


def test_card_whose_device_nodes_vanished_is_unhealthy_with_the_reason(tree: FakeTree) -> None:
    gpu.add_card(tree, memory_bytes=GIB)
    gpu.add_card(tree, memory_bytes=GIB)
    tree.remove("/dev/dri/renderD129")

    found = devices(tree)

    assert found["card0"].health is Health.HEALTHY
    assert found["card1"].health is Health.UNHEALTHY
    assert "renderD129" in found["card1"].health_message
    assert found["card1"].cdi is not None  # the remaining node: running claims still resolve it


def test_card_with_no_device_nodes_left_cannot_be_prepared(tree: FakeTree) -> None:
    gpu.add_card(tree)
    tree.remove("/dev/dri/card0")
    tree.remove("/dev/dri/renderD128")
    profile = GpuDriverProfile(prefix=str(tree.root))
    device = profile.scan().by_name()["card0"]

    assert device.health is Health.UNHEALTHY and device.cdi is None
    with pytest.raises(ClaimPreparationError, match="card0"):
        profile.claim_edits("uid-1", [(AllocatedDevice("gpu", "node-a", "card0"), device)])


def test_sriov_roles_of_a_pf_with_vfs_its_vfs_a_capable_pf_and_a_plain_card(tmp_path: Path) -> None:
    spec = """
    [node]
    numa_nodes = 1
    [[gpu]]
    count = 1
    vfs = 2
    [[gpu]]
    count = 1
    totalvfs = 8
    [[gpu]]
    count = 1
    """
    tree = build_node(parse_node_spec(spec), tmp_path / "node")

    roles = {name: device.attributes["sriov"] for name, device in devices(tree).items()}

    assert roles == {"card0": "pf", "card1": "vf", "card2": "vf", "card3": "pf", "card4": "none"}


def test_card_behind_a_bridge_is_under_the_bridge_root_complex(tree: FakeTree) -> None:
    bridge = tree.pci_function("0000:40:01.0", vendor="0x8086", device="0x4fa1", numa_node=0, driver=None)
    parent = "/" + str(bridge.sysfs_dir.relative_to(tree.root))
    card = gpu.add_card(tree, address="0000:41:00.0", parent=parent)

    device = devices(tree)["card0"]

    assert device.attributes[STANDARD_PCIE_ROOT] == "pci0000:40"
    assert device.attributes[STANDARD_PCI_BUS_ID] == card.address


def test_allow_and_deny_lists_apply_as_in_the_device_plugin(tree: FakeTree) -> None:
    gpu.add_card(tree, device_id="0x56c0")
    gpu.add_card(tree, device_id="0x56c1")

    assert set(devices(tree, GpuOptions(deny_ids=frozenset({"0x56c0"})))) == {"card1"}
    assert set(devices(tree, GpuOptions(allow_ids=frozenset({"0x56c0"})))) == {"card0"}


def test_claim_edits_rename_the_card_under_the_claim_kind(tree: FakeTree) -> None:
    gpu.add_card(tree)
    profile = GpuDriverProfile(prefix=str(tree.root), options=GpuOptions(by_path=ByPath.SINGLE))
    device = profile.scan().by_name()["card0"]

    (edit,) = profile.claim_edits("uid-1", [(AllocatedDevice("gpu", "node-a", "card0"), device)])

    assert edit.qualified_name == f"{claim_cdi_kind('gpu.intel.com')}=uid-1-card0"
    assert [node.host_path for node in edit.nodes] == [
        str(tree.path("/dev/dri/card0")),
        str(tree.path("/dev/dri/renderD128")),
    ]
    assert len(edit.mounts) == 2  # the card's two by-path links


def test_mixed_node_cards_differ_in_driver_memory_and_device_id(tmp_path: Path) -> None:
    tree = build_node(parse_node_spec(profile_text("mixed")), tmp_path / "node")

    found = devices(tree)

    kinds = {
        (d.attributes["driver"], d.attributes["pciId"], d.capacity["memory"].value, d.attributes["sriov"])
        for d in found.values()
    }
    assert kinds == {("i915", "0x56c0", str(16 * GIB), "pf"), ("xe", "0xe20b", str(12 * GIB), "none")}


def test_every_device_fits_the_api_limits(tmp_path: Path) -> None:
    tree = build_node(parse_node_spec(profile_text("default")), tmp_path / "node")

    found = devices(tree)

    assert found
    for name, device in found.items():
        assert DNS_LABEL.match(name)
        assert len(device.attributes) + len(device.capacity) <= MAX_ATTRIBUTES_AND_CAPACITIES


def test_profile_watches_what_the_device_plugin_watches(tree: FakeTree) -> None:
    profile = GpuDriverProfile(prefix=str(tree.root))

    assert profile.driver_name == "gpu.intel.com"
    assert set(profile.watch_paths()) == {tree.path("/dev/dri"), tree.path("/sys/class/drm")}
    assert set(profile.uevent_subsystems()) == {"drm", "pci"}


def test_unreadable_drm_class_publishes_nothing_and_says_why(tmp_path: Path) -> None:
    profile = GpuDriverProfile(prefix=str(tmp_path / "empty"))

    inventory = profile.scan()

    assert inventory.devices == ()
    assert len(inventory.problems) == 1 and "sys/class/drm" in inventory.problems[0]


def test_device_classes_select_by_driver_and_serve_the_extended_resources() -> None:
    classes = {c["metadata"]["name"]: c["spec"] for c in map(device_class, GPU_DEVICE_CLASSES)}

    assert set(classes) == {"gpu.intel.com", "i915.gpu.intel.com", "xe.gpu.intel.com"}
    assert "extendedResourceName" not in classes["gpu.intel.com"]
    assert classes["i915.gpu.intel.com"]["extendedResourceName"] == "gpu.intel.com/i915"
    assert classes["xe.gpu.intel.com"]["extendedResourceName"] == "gpu.intel.com/xe"
    (selector,) = classes["xe.gpu.intel.com"]["selectors"]
    assert selector["cel"]["expression"] == (
        'device.driver == "gpu.intel.com" && (device.attributes["gpu.intel.com"].driver == "xe")'
    )


def test_monitoring_template_asks_admin_access_to_every_card() -> None:
    template = monitoring_claim_template("monitoring")
    assert ADMIN_ACCESS_NAMESPACE_LABEL == "resource.kubernetes.io/admin-access"

    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert template["metadata"]["namespace"] == "monitoring"
    assert request["exactly"] == {
        "deviceClassName": "gpu.intel.com",
        "allocationMode": "All",
        "adminAccess": True,
    }


@pytest.mark.parametrize(
    ("text", "memory"),
    [("0x400000000\n", str(16 * GIB)), ("1125899906842624\n", str(1 << 50)), ("1125899906842625\n", None)],
)
def test_memory_may_be_hex_and_is_bounded(tree: FakeTree, text: str, memory: str | None) -> None:
    gpu.add_card(tree, memory_bytes=GIB)
    tree.write("/sys/class/drm/card0/lmem_total_bytes", text)

    device = devices(tree)["card0"]

    assert (device.capacity["memory"].value if "memory" in device.capacity else None) == memory


def test_a_pf_with_vfs_and_its_vfs_are_partitions_drawing_on_one_counter_set(tmp_path: Path) -> None:
    build_node(parse_node_spec('[[gpu]]\ndriver = "i915"\nvfs = 3\n[[gpu]]\ndriver = "xe"\n'), tmp_path)
    inventory = GpuDriverProfile(str(tmp_path)).scan()
    devices = inventory.by_name()
    assert sorted(devices) == ["card0", "card1", "card2", "card3", "card4"]
    (counters,) = inventory.counter_sets
    assert (counters.name, dict(counters.counters)) == ("card0-functions", {"functions": "3"})
    draws = {
        name: {c.counter_set: dict(c.counters) for c in device.consumes_counters}
        for name, device in devices.items()
    }
    assert draws["card0"] == {"card0-functions": {"functions": "3"}}
    assert draws["card1"] == draws["card2"] == draws["card3"] == {"card0-functions": {"functions": "1"}}
    assert draws["card4"] == {}, "a card without SR-IOV is not a partition"
    for name in ("card0", "card1", "card2", "card3"):
        assert devices[name].allow_multiple_allocations is False
        assert devices[name].attributes["partitionOf"] == "card0"
        assert all(c.request_policy is None for c in devices[name].capacity.values())
    assert devices["card4"].allow_multiple_allocations is True


def test_the_device_plugin_still_serves_the_vfs_only(tmp_path: Path) -> None:
    build_node(parse_node_spec('[[gpu]]\ndriver = "i915"\nvfs = 2\n'), tmp_path)
    tree = scan_gpus(str(tmp_path), GpuOptions()).tree
    assert sorted(tree["i915"]) == ["card1-0", "card2-0"]
