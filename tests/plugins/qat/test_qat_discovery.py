"""QAT DPDK-mode discovery on simulated nodes: one behaviour per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import DeviceNode, Discovery, Health, Mount
from intel_device_plugins.plugins.qat.discovery import (
    IGB_UIO,
    DpdkConfig,
    QatPaths,
    build_tree,
    find_vfs,
    resource_from_services,
)
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.qat import add_guest_vfs, add_pf


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    fake = FakeTree(tmp_path / "node", numa_nodes=2)
    fake.write_numa_nodes()
    return fake


def scan(tree: FakeTree, config: DpdkConfig | None = None) -> Discovery:
    paths = QatPaths(tree.root)
    config = config or DpdkConfig()
    found = find_vfs(paths, config)
    result = build_tree(paths, found.vfs, config)
    return Discovery(result.tree, found.problems + result.problems)


def test_vfs_are_found_through_their_pf_and_named_by_services(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=4, services="sym;asym")
    result = scan(tree)
    assert set(result.tree) == {"cy"}
    assert sorted(result.tree["cy"]) == sorted(pf.vfs)
    assert result.problems == ()


def test_ids_are_vf_addresses_and_each_vf_gets_its_vfio_group(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=2)
    devices = scan(tree).tree["cy"]
    first = devices[pf.vfs[0]]
    root = str(tree.root)
    assert first.nodes == (
        DeviceNode(f"{root}/dev/vfio/0", f"{root}/dev/vfio/0"),
        DeviceNode(f"{root}/dev/vfio/vfio", f"{root}/dev/vfio/vfio"),
    )
    assert devices[pf.vfs[1]].nodes[0].container_path == f"{root}/dev/vfio/1"
    assert first.health is Health.HEALTHY


def test_noiommu_groups_use_the_noiommu_node(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, iommu="noiommu")
    info = scan(tree).tree["cy"][pf.vfs[0]]
    assert info.nodes[0].container_path == f"{tree.root}/dev/vfio/noiommu-0"


def test_igb_uio_gives_the_uio_node_and_a_writable_sysfs_mount(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, vf_driver=IGB_UIO)
    info = scan(tree, DpdkConfig(dpdk_driver=IGB_UIO)).tree["cy"][pf.vfs[0]]
    root = str(tree.root)
    assert info.nodes == (DeviceNode(f"{root}/dev/uio0", f"{root}/dev/uio0"),)
    assert info.mounts == (
        Mount(f"{root}/sys/class/uio/uio0/device", f"{root}/sys/class/uio/uio0/device", read_only=False),
    )


def test_numa_node_comes_from_the_vf(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, numa_node=1)
    assert scan(tree).tree["cy"][pf.vfs[0]].numa_nodes == (1,)


def test_each_device_carries_a_qat_env_with_its_address(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=2)
    devices = scan(tree).tree["cy"]
    assert set(devices[pf.vfs[0]].envs.values()) == {pf.vfs[0]}
    assert all(key.startswith("QAT") for info in devices.values() for key in info.envs)


@pytest.mark.parametrize(
    ("services", "resource"),
    [
        ("sym;asym", "cy"),
        ("asym;sym", "cy"),
        ("dc", "dc"),
        ("sym", "sym"),
        ("asym;dc", "asym-dc"),
        ("dc;sym", "dc-sym"),
        ("decomp", "decomp"),
        (" sym;asym \n", "cy"),
    ],
)
def test_services_become_resource_names(services: str, resource: str) -> None:
    assert resource_from_services(services) == resource


def test_every_separator_is_replaced_not_only_the_first_two() -> None:
    # Upstream leaves a ';' after the second one, which the kubelet rejects as a resource name.
    assert resource_from_services("sym;asym;dc;decomp") == "sym-asym-dc-decomp"


@pytest.mark.parametrize("services", ["", "sym asym", "dc;$", "ü"])
def test_services_that_cannot_be_a_resource_name_are_refused(services: str) -> None:
    assert resource_from_services(services) is None


def test_invalid_services_fall_back_to_generic_with_a_problem(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, services="sym asym")
    result = scan(tree)
    assert list(result.tree) == ["generic"]
    assert any(pf.address in problem and "valid resource name" in problem for problem in result.problems)


def test_a_pf_that_is_down_is_named_from_debugfs_dev_cfg(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, services="dc", state="down")
    assert list(scan(tree).tree) == ["dc"]
    tree.write(f"/sys/kernel/debug/qat_4xxx_{pf.address}/dev_cfg", "[GENERAL]\nServicesEnabled = asym;dc\n")
    assert list(scan(tree).tree) == ["asym-dc"]


def test_debugfs_is_found_when_the_pf_sits_behind_a_bridge(tree: FakeTree) -> None:
    # Upstream derives the debugfs root from the PF's depth and only gets it right directly under
    # the root complex; here the PF is one level deeper and its services must still be read.
    add_pf(tree, vfs=1, services="dc", state="down", behind_bridge=True)
    assert list(scan(tree).tree) == ["dc"]


def test_missing_dev_cfg_means_generic_without_a_problem(tree: FakeTree) -> None:
    add_pf(tree, vfs=1, state="down", dev_cfg=False)
    result = scan(tree)
    assert list(result.tree) == ["generic"]
    assert result.problems == ()


def test_garbage_dev_cfg_means_generic_with_a_problem_naming_the_pf(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=2, state="down")
    tree.write(f"/sys/kernel/debug/qat_4xxx_{pf.address}/dev_cfg", "\x00\x01 not an ini file\n[[[")
    result = scan(tree)
    assert list(result.tree) == ["generic"]
    assert len(result.tree["generic"]) == 2
    assert [p for p in result.problems if p.startswith(pf.address)], result.problems


def test_unreadable_dev_cfg_means_generic_with_a_problem(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, state="down", dev_cfg=False)
    # A directory where the file should be: reading fails with an error other than "not found".
    tree.mkdir(f"/sys/kernel/debug/qat_4xxx_{pf.address}/dev_cfg")
    result = scan(tree)
    assert list(result.tree) == ["generic"]
    assert any(pf.address in problem and "cannot read" in problem for problem in result.problems)


def test_unreadable_heartbeat_is_unhealthy_with_a_problem(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, heartbeat="")
    tree.mkdir(f"/sys/kernel/debug/qat_4xxx_{pf.address}/heartbeat/status")
    result = scan(tree)
    assert result.tree["cy"][pf.vfs[0]].health is Health.UNHEALTHY
    assert any(pf.address in problem and "heartbeat" in problem for problem in result.problems)


def test_older_generations_are_always_generic(tree: FakeTree) -> None:
    add_pf(tree, generation="c6xx", vfs=2, services="dc")
    assert list(scan(tree, DpdkConfig(kernel_vf_drivers=("c6xxvf",))).tree) == ["generic"]


def test_only_the_enabled_vf_drivers_are_taken(tree: FakeTree) -> None:
    add_pf(tree, generation="c6xx", vfs=2)
    add_pf(tree, vfs=3)
    result = scan(tree)
    assert {resource: len(devices) for resource, devices in result.tree.items()} == {"cy": 3}


def test_max_num_devices_caps_the_vfs(tree: FakeTree) -> None:
    add_pf(tree, vfs=16)
    add_pf(tree, vfs=16)
    assert len(scan(tree, DpdkConfig(max_devices=20)).tree["cy"]) == 20


def test_virtfn_links_are_taken_in_numeric_order(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=12)
    found = find_vfs(QatPaths(tree.root), DpdkConfig(max_devices=11))
    assert [vf.address for vf in found.vfs] == list(pf.vfs[:11])


def test_heartbeat_failure_makes_all_vfs_of_that_pf_unhealthy(tree: FakeTree) -> None:
    bad = add_pf(tree, vfs=2, heartbeat="-1")
    good = add_pf(tree, vfs=2)
    devices = scan(tree).tree["cy"]
    assert {devices[a].health for a in bad.vfs} == {Health.UNHEALTHY}
    assert {devices[a].health for a in good.vfs} == {Health.HEALTHY}


def test_missing_heartbeat_file_is_healthy(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, heartbeat="")
    assert scan(tree).tree["cy"][pf.vfs[0]].health is Health.HEALTHY


def test_garbage_heartbeat_is_unhealthy_with_a_problem(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, heartbeat="banana")
    result = scan(tree)
    assert result.tree["cy"][pf.vfs[0]].health is Health.UNHEALTHY
    assert any(pf.address in problem and "banana" in problem for problem in result.problems)


def test_a_vf_not_bound_to_the_dpdk_driver_is_unhealthy(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=2, vf_driver="4xxxvf")
    result = scan(tree)
    assert {info.health for info in result.tree["cy"].values()} == {Health.UNHEALTHY}
    assert any(pf.vfs[0] in problem and "4xxxvf" in problem for problem in result.problems)


def test_bind_failure_reason_is_reported_for_that_vf(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=2, vf_driver="")
    paths, config = QatPaths(tree.root), DpdkConfig()
    result = build_tree(paths, find_vfs(paths, config).vfs, config, {pf.vfs[0]: "binding failed: EBUSY"})
    assert any(p == f"{pf.vfs[0]}: Unhealthy: binding failed: EBUSY" for p in result.problems)


def test_a_vf_without_iommu_group_is_unhealthy_and_the_rest_are_served(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=3)
    tree.remove(f"{tree.sysfs_of(pf.vfs[1])}/iommu_group")
    result = scan(tree)
    healths = {address: info.health for address, info in result.tree["cy"].items()}
    assert healths == {pf.vfs[0]: Health.HEALTHY, pf.vfs[1]: Health.UNHEALTHY, pf.vfs[2]: Health.HEALTHY}
    assert any(pf.vfs[1] in problem and "IOMMU group" in problem for problem in result.problems)


def test_a_broken_virtfn_link_skips_that_vf_only(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=3)
    pf_sysfs = tree.sysfs_of(pf.address)
    tree.path(f"{pf_sysfs}/virtfn1").unlink()
    tree.path(f"{pf_sysfs}/virtfn1").symlink_to("../does-not-exist")
    result = scan(tree)
    assert sorted(result.tree["cy"]) == [pf.vfs[0], pf.vfs[2]]
    assert any(problem.startswith(pf.address) and "virtfn1" in problem for problem in result.problems)


def test_a_vm_without_pfs_finds_vfs_by_device_id(tree: FakeTree) -> None:
    addresses = add_guest_vfs(tree, generation="4xxx", vfs=3, numa_node=0, vf_driver="vfio-pci", iommu="vfio")
    add_guest_vfs(tree, generation="c6xx", vfs=1, numa_node=0, vf_driver="vfio-pci", iommu="vfio")
    result = scan(tree)
    # Without a PF there is no service configuration to read.
    assert sorted(result.tree["generic"]) == sorted(addresses)


def test_a_vm_device_with_unreadable_id_is_skipped_with_a_problem(tree: FakeTree) -> None:
    addresses = add_guest_vfs(tree, generation="4xxx", vfs=2, numa_node=0, vf_driver="vfio-pci", iommu="vfio")
    tree.remove(f"{tree.sysfs_of(addresses[0])}/device")
    result = scan(tree)
    assert sorted(result.tree["generic"]) == [addresses[1]]
    assert any(addresses[0] in problem for problem in result.problems)


def test_pfs_without_vfs_do_not_trigger_the_vm_fallback(tree: FakeTree) -> None:
    add_pf(tree, vfs=0)
    add_guest_vfs(tree, generation="4xxx", vfs=1, numa_node=0, vf_driver="vfio-pci", iommu="vfio")
    assert scan(tree).tree == {}


def test_no_qat_at_all_is_an_empty_tree(tree: FakeTree) -> None:
    assert scan(tree) == Discovery({}, ())


def test_a_broken_pf_driver_link_skips_that_pf_only(tree: FakeTree) -> None:
    broken = add_pf(tree, vfs=2)
    good = add_pf(tree, vfs=2)
    link = tree.path(f"/sys/bus/pci/drivers/4xxx/{broken.address}")
    link.unlink()
    link.symlink_to("../../../../devices/gone")
    result = scan(tree)
    assert sorted(result.tree["cy"]) == sorted(good.vfs)
    assert any(problem.startswith(broken.address) and "driver link" in problem for problem in result.problems)
