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
    Severity,
    Taint,
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


def name_of(card: gpu.SimulatedCard, pci_id: str = "0x56c0") -> str:
    """The device name Intel's driver gives the card: its address with dashes, then its PCI ID."""
    return f"{card.address.replace(':', '-').replace('.', '-')}-{pci_id}"


def only(tree: FakeTree) -> Device:
    (device,) = devices(tree).values()
    return device


def test_i915_card_with_local_memory(tree: FakeTree) -> None:
    card = gpu.add_card(tree, driver="i915", device_id="0x56c0", numa_node=1, memory_bytes=16 * GIB)

    device = devices(tree)[name_of(card)]

    assert dict(device.attributes) == {
        "driver": "i915",
        "pciId": "0x56c0",
        "family": "Data Center Flex",
        "model": "Flex 170",
        "sriov": False,
        "type": "gpu",
        "sriovRole": "none",
        "health": "Healthy",
        "pciAddress": card.address,
        "pciRoot": card.address[5:7],
        "partitionOf": "",
        "numaNode": 1,
        "resource.kubernetes.io/numaNode": 1,
        STANDARD_PCI_BUS_ID: card.address,
        STANDARD_PCIE_ROOT: f"pci{card.address[:7]}",
    }
    assert name_of(card) == f"0000-{card.address[5:7]}-00-0-0x56c0"
    assert dict(device.capacity) == {
        "memory": Capacity(str(16 * GIB), RequestPolicy(default=str(16 * GIB))),
        "millicores": Capacity("1000", RequestPolicy(default="0")),
    }
    assert device.allow_multiple_allocations
    assert device.health is Health.HEALTHY and device.health_message == ""


def test_xe_card_memory_is_the_sum_of_its_tiles(tree: FakeTree) -> None:
    gpu.add_card(tree, driver="xe", device_id="0xe20b", tiles=2, memory_bytes=12 * GIB + 1)

    device = only(tree)

    assert device.attributes["driver"] == "xe"
    assert device.attributes["pciId"] == "0xe20b"
    assert (device.attributes["family"], device.attributes["model"]) == ("Arc B-Series", "B580")
    assert device.capacity["memory"].value == str(12 * GIB + 1)


def test_card_without_local_memory_is_taken_whole_by_millicores(tree: FakeTree) -> None:
    gpu.add_card(tree, device_id="0x4680")  # an integrated GPU: no local memory, no known model

    device = only(tree)

    assert dict(device.capacity) == {
        "memory": Capacity("0", RequestPolicy(default="0")),
        "millicores": Capacity("1000", RequestPolicy(default="1000")),
    }
    assert (device.attributes["family"], device.attributes["model"]) == ("Unknown", "Unknown")
    assert device.attributes["pciId"] == "0x4680"


def test_unreadable_memory_size_is_a_problem_not_a_guess(tree: FakeTree) -> None:
    gpu.add_card(tree, memory_bytes=GIB)
    tree.write("/sys/class/drm/card0/lmem_total_bytes", "lots\n")
    profile = GpuDriverProfile(prefix=str(tree.root))

    inventory = profile.scan()

    (device,) = inventory.devices
    assert device.capacity["memory"].value == "0"
    assert device.capacity["millicores"].request_policy == RequestPolicy(default="1000")
    assert any("card0" in p and "lmem_total_bytes" in p and "'lots'" in p for p in inventory.problems)
    assert scan_gpus(str(tree.root), GpuOptions()).problems == ()  # the device plugin does not read it


def test_xe_tile_with_garbage_size_drops_the_memory_capacity(tree: FakeTree) -> None:
    card = gpu.add_card(tree, driver="xe", tiles=2, memory_bytes=8 * GIB)
    tree.write(f"{tree.sysfs_of(card.address)}/tile1/physical_vram_size_bytes", "-5\n")
    profile = GpuDriverProfile(prefix=str(tree.root))

    inventory = profile.scan()

    assert inventory.devices[0].capacity["memory"].value == "0"
    assert any("card0" in p and "physical_vram_size_bytes" in p for p in inventory.problems)


def test_card_whose_device_nodes_vanished_is_unhealthy_with_the_reason(tree: FakeTree) -> None:
    well = gpu.add_card(tree, memory_bytes=GIB)
    sick = gpu.add_card(tree, memory_bytes=GIB)
    tree.remove("/dev/dri/renderD129")

    found = devices(tree)

    assert found[name_of(well)].health is Health.HEALTHY
    assert found[name_of(well)].attributes["health"] == "Healthy"
    assert found[name_of(well)].health_issues == ()
    unhealthy = found[name_of(sick)]
    assert unhealthy.health is Health.UNHEALTHY
    assert unhealthy.attributes["health"] == "Unhealthy"
    assert "renderD129" in unhealthy.health_message
    (issue,) = unhealthy.health_issues
    assert (issue.category, issue.severity) == ("DeviceNodesMissing", Severity.WARNING)
    assert "renderD129" in issue.message
    assert unhealthy.cdi is not None  # the remaining node: running claims still resolve it


def test_card_with_no_device_nodes_left_cannot_be_prepared(tree: FakeTree) -> None:
    gpu.add_card(tree)
    tree.remove("/dev/dri/card0")
    tree.remove("/dev/dri/renderD128")
    profile = GpuDriverProfile(prefix=str(tree.root))
    (device,) = profile.scan().devices

    assert device.health is Health.UNHEALTHY and device.cdi is None
    (issue,) = device.health_issues
    assert (issue.category, issue.severity) == ("DeviceAbsent", Severity.CRITICAL)
    with pytest.raises(ClaimPreparationError, match=device.name):
        profile.claim_edits("uid-1", [(AllocatedDevice("gpu", "node-a", device.name), device)])


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

    found = {name: d for name, d in devices(tree).items() if not name.endswith("-monitor")}
    roles = {
        name: (d.attributes["sriovRole"], d.attributes["type"], d.attributes["sriov"])
        for name, d in found.items()
    }

    assert roles == {
        "0000-10-00-0-0x56c0": ("pf", "gpu", True),
        "0000-10-00-1-0x56c0": ("vf", "vf", False),
        "0000-10-00-2-0x56c0": ("vf", "vf", False),
        "0000-11-00-0-0x56c0": ("pf", "gpu", True),
        "0000-12-00-0-0x56c0": ("none", "gpu", False),
    }


def test_card_behind_a_bridge_is_under_the_bridge_root_complex(tree: FakeTree) -> None:
    bridge = tree.pci_function("0000:40:01.0", vendor="0x8086", device="0x4fa1", numa_node=0, driver=None)
    parent = "/" + str(bridge.sysfs_dir.relative_to(tree.root))
    card = gpu.add_card(tree, address="0000:41:00.0", parent=parent)

    device = devices(tree)["0000-41-00-0-0x56c0"]

    assert device.attributes[STANDARD_PCIE_ROOT] == "pci0000:40"
    assert device.attributes["pciRoot"] == "40"
    assert device.attributes[STANDARD_PCI_BUS_ID] == device.attributes["pciAddress"] == card.address


def test_allow_and_deny_lists_apply_as_in_the_device_plugin(tree: FakeTree) -> None:
    flex170 = gpu.add_card(tree, device_id="0x56c0")
    flex140 = gpu.add_card(tree, device_id="0x56c1")

    assert set(devices(tree, GpuOptions(deny_ids=frozenset({"0x56c0"})))) == {name_of(flex140, "0x56c1")}
    assert set(devices(tree, GpuOptions(allow_ids=frozenset({"0x56c0"})))) == {name_of(flex170)}


def test_claim_edits_rename_the_card_under_the_claim_kind(tree: FakeTree) -> None:
    card = gpu.add_card(tree)
    profile = GpuDriverProfile(prefix=str(tree.root), options=GpuOptions(by_path=ByPath.SINGLE))
    device = profile.scan().by_name()[name_of(card)]

    (edit,) = profile.claim_edits("uid-1", [(AllocatedDevice("gpu", "node-a", device.name), device)])

    assert edit.qualified_name == f"{claim_cdi_kind('gpu.intel.com')}=uid-1-{name_of(card)}"
    assert [node.host_path for node in edit.nodes] == [
        str(tree.path("/dev/dri/card0")),
        str(tree.path("/dev/dri/renderD128")),
    ]
    assert len(edit.mounts) == 2  # the card's two by-path links


def test_mixed_node_cards_differ_in_driver_memory_and_device_id(tmp_path: Path) -> None:
    tree = build_node(parse_node_spec(profile_text("mixed")), tmp_path / "node")

    found = devices(tree)

    kinds = {
        (d.attributes["driver"], d.attributes["pciId"], d.capacity["memory"].value, d.attributes["sriovRole"])
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
        "selectors": [
            {
                "cel": {
                    "expression": 'device.attributes["gpu.intel.com"].partitionOf == "" || '
                    'device.attributes["gpu.intel.com"].type == "monitor"'
                }
            }
        ],
        "allocationMode": "All",
        "adminAccess": True,
        "tolerations": [{"operator": "Exists"}],
        "capacity": {"requests": {"memory": "0", "millicores": "0"}},
    }


@pytest.mark.parametrize(
    ("text", "memory"),
    [("0x400000000\n", str(16 * GIB)), ("1125899906842624\n", str(1 << 50)), ("1125899906842625\n", "0")],
)
def test_memory_may_be_hex_and_is_bounded(tree: FakeTree, text: str, memory: str) -> None:
    gpu.add_card(tree, memory_bytes=GIB)
    tree.write("/sys/class/drm/card0/lmem_total_bytes", text)

    device = only(tree)

    assert device.capacity["memory"].value == memory


def test_a_pf_with_vfs_and_its_vfs_are_partitions_drawing_on_one_counter_set(tmp_path: Path) -> None:
    build_node(parse_node_spec('[[gpu]]\ndriver = "i915"\nvfs = 3\n[[gpu]]\ndriver = "xe"\n'), tmp_path)
    inventory = GpuDriverProfile(str(tmp_path)).scan()
    devices = dict(inventory.by_name())
    pf, vf1, vf2, vf3 = (f"0000-10-00-{f}-0x56c0" for f in range(4))
    plain = "0000-11-00-0-0x56c0"
    assert devices.pop(f"{pf}-monitor").consumes_counters == ()
    assert sorted(devices) == [pf, vf1, vf2, vf3, plain]
    (counters,) = inventory.counter_sets
    assert (counters.name, dict(counters.counters)) == (f"{pf}-functions", {"functions": "3"})
    draws = {
        name: {c.counter_set: dict(c.counters) for c in device.consumes_counters}
        for name, device in devices.items()
    }
    assert draws[pf] == {f"{pf}-functions": {"functions": "3"}}
    assert draws[vf1] == draws[vf2] == draws[vf3] == {f"{pf}-functions": {"functions": "1"}}
    assert draws[plain] == {}, "a card without SR-IOV is not a partition"
    for name in (pf, vf1, vf2, vf3):
        assert devices[name].allow_multiple_allocations is False
        assert devices[name].attributes["partitionOf"] == pf
        assert all(c.request_policy is None for c in devices[name].capacity.values())
    assert devices[plain].allow_multiple_allocations is True
    assert devices[plain].attributes["partitionOf"] == ""


def test_the_device_plugin_still_serves_the_vfs_only(tmp_path: Path) -> None:
    build_node(parse_node_spec('[[gpu]]\ndriver = "i915"\nvfs = 2\n'), tmp_path)
    tree = scan_gpus(str(tmp_path), GpuOptions()).tree
    assert sorted(tree["i915"]) == ["card1-0", "card2-0"]


def test_a_pf_with_vfs_has_a_monitoring_view_only_admin_access_gets(tmp_path: Path) -> None:
    """The view draws no counters (the scheduler checks them for admin access too) and is tainted, so
    a workload neither selects it by accident nor gets it prepared by tolerating the taint."""
    build_node(parse_node_spec('[[gpu]]\ndriver = "i915"\nvfs = 2\n'), tmp_path)
    profile = GpuDriverProfile(str(tmp_path))
    devices = profile.scan().by_name()
    pf = devices["0000-10-00-0-0x56c0"]
    view = devices["0000-10-00-0-0x56c0-monitor"]

    assert view.consumes_counters == () and pf.consumes_counters
    assert dict(view.attributes) == {**pf.attributes, "type": "monitor"}
    assert view.cdi == pf.cdi and view.health_issues == pf.health_issues
    assert Taint("gpu.intel.com/monitoring-only", "NoSchedule") in view.taints
    assert all(
        t.key != "gpu.intel.com/monitoring-only" for d in devices.values() if d is not view for t in d.taints
    )
    (edit,) = profile.claim_edits(
        "uid-1", [(AllocatedDevice("all", "node", view.name, admin_access=True), view)]
    )
    assert [n.host_path for n in edit.nodes] == [n.host_path for n in (pf.cdi.nodes if pf.cdi else ())]
    with pytest.raises(ClaimPreparationError, match="only for admin access"):
        profile.claim_edits("uid-2", [(AllocatedDevice("gpu", "node", view.name), view)])


def test_the_monitoring_selector_takes_no_partition_but_every_card_and_view(tmp_path: Path) -> None:
    """What ``MONITORING_SELECTOR`` selects, evaluated here by its two attributes."""
    build_node(parse_node_spec('[[gpu]]\ndriver = "i915"\nvfs = 2\n[[gpu]]\ndriver = "xe"\n'), tmp_path)
    devices = GpuDriverProfile(str(tmp_path)).scan().by_name()

    taken = {
        name
        for name, d in devices.items()
        if d.attributes["partitionOf"] == "" or d.attributes["type"] == "monitor"
    }

    assert taken == {"0000-10-00-0-0x56c0-monitor", "0000-11-00-0-0x56c0"}
    assert all(not devices[name].consumes_counters for name in taken)
