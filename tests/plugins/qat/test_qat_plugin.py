"""The QAT DPDK plugin's shell: binding VFs, bind failures, problem logging, hooks."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import Health, default_allocation
from intel_device_plugins.plugins.qat.discovery import DpdkConfig, QatPaths
from intel_device_plugins.plugins.qat.plugin import BIND_RETRY_SCANS, QatDpdkPlugin, SysfsBinder
from intel_device_plugins.plugins.qat.policy import Policy
from intel_device_plugins.sim.fakefs import FakeTree
from intel_device_plugins.sim.qat import FakeTreeBinder, add_pf, load_driver


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    fake = FakeTree(tmp_path / "node")
    fake.write_numa_nodes()
    return fake


@dataclass
class FailingBinder:
    """Fails for the listed addresses, binds the rest through the simulated kernel."""

    tree: FakeTree
    failing: set[str]
    calls: list[str] = field(default_factory=list)

    def rebind(self, address: str, current: str, target: str) -> None:
        self.calls.append(address)
        if address in self.failing:
            raise OSError(f"binding to {target} failed: Device or resource busy")
        FakeTreeBinder(self.tree).rebind(address, current, target)


def test_vfs_on_the_kernel_driver_are_rebound_and_become_healthy(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=3, vf_driver="4xxxvf")
    load_driver(tree, "vfio-pci")
    plugin = QatDpdkPlugin(QatPaths(tree.root), DpdkConfig(), binder=FakeTreeBinder(tree))
    devices = plugin.scan()["cy"]
    assert {info.health for info in devices.values()} == {Health.HEALTHY}
    assert all(tree.path(f"/sys/bus/pci/drivers/vfio-pci/{address}").is_symlink() for address in pf.vfs)
    assert not plugin.problems.current


def test_unbound_vfs_are_bound_without_an_unbind(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, vf_driver="")
    load_driver(tree, "vfio-pci")
    QatDpdkPlugin(QatPaths(tree.root), DpdkConfig()).scan()
    assert tree.path("/sys/bus/pci/drivers/vfio-pci/bind").read_text() == pf.vfs[0]


def test_sysfs_binder_writes_unbind_then_bind(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, vf_driver="4xxxvf")
    load_driver(tree, "vfio-pci")
    SysfsBinder(tree.path("/sys/bus/pci/drivers")).rebind(pf.vfs[0], "4xxxvf", "vfio-pci")
    assert tree.path("/sys/bus/pci/drivers/4xxxvf/unbind").read_text() == pf.vfs[0]
    assert tree.path("/sys/bus/pci/drivers/vfio-pci/bind").read_text() == pf.vfs[0]


def test_sysfs_binder_never_creates_a_missing_attribute(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, vf_driver="")
    with pytest.raises(OSError, match="binding to vfio-pci failed"):
        SysfsBinder(tree.path("/sys/bus/pci/drivers")).rebind(pf.vfs[0], "", "vfio-pci")
    assert not tree.path("/sys/bus/pci/drivers/vfio-pci/bind").exists()


def test_a_bind_that_has_no_effect_leaves_the_vf_unhealthy_and_says_so(
    tree: FakeTree, caplog: pytest.LogCaptureFixture
) -> None:
    pf = add_pf(tree, vfs=1, vf_driver="4xxxvf")
    load_driver(tree, "vfio-pci")
    with caplog.at_level(logging.WARNING):
        devices = QatDpdkPlugin(QatPaths(tree.root), DpdkConfig()).scan()["cy"]
    assert devices[pf.vfs[0]].health is Health.UNHEALTHY
    assert f"{pf.vfs[0]}: Unhealthy: binding to vfio-pci had no effect (bound to 4xxxvf)" in caplog.text


def test_a_failing_bind_marks_only_that_vf_unhealthy(
    tree: FakeTree, caplog: pytest.LogCaptureFixture
) -> None:
    pf = add_pf(tree, vfs=3, vf_driver="4xxxvf")
    load_driver(tree, "vfio-pci")
    binder = FailingBinder(tree, {pf.vfs[1]})
    with caplog.at_level(logging.WARNING):
        devices = QatDpdkPlugin(QatPaths(tree.root), DpdkConfig(), binder=binder).scan()["cy"]
    assert [devices[a].health for a in pf.vfs] == [Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY]
    assert f"{pf.vfs[1]}: Unhealthy: binding to vfio-pci failed: Device or resource busy" in caplog.text


def test_a_failed_bind_is_retried_only_every_so_many_scans(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=1, vf_driver="4xxxvf")
    load_driver(tree, "vfio-pci")
    binder = FailingBinder(tree, {pf.vfs[0]})
    plugin = QatDpdkPlugin(QatPaths(tree.root), DpdkConfig(), binder=binder)
    for _ in range(BIND_RETRY_SCANS):
        plugin.scan()
    assert len(binder.calls) == 1
    plugin.scan()
    assert len(binder.calls) == 2
    binder.failing.clear()
    for _ in range(BIND_RETRY_SCANS):
        plugin.scan()
    assert plugin.scan()["cy"][pf.vfs[0]].health is Health.HEALTHY


def test_a_persistent_problem_is_logged_once(tree: FakeTree, caplog: pytest.LogCaptureFixture) -> None:
    add_pf(tree, vfs=1, heartbeat="-1")
    plugin = QatDpdkPlugin(QatPaths(tree.root), DpdkConfig())
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            plugin.scan()
    assert caplog.text.count("heartbeat reports the device failed") == 1


def test_hooks_use_the_configured_policy_and_renumber_per_container(tree: FakeTree) -> None:
    add_pf(tree, vfs=2)
    add_pf(tree, vfs=2)
    plugin = QatDpdkPlugin(QatPaths(tree.root), DpdkConfig(), allocation_policy=Policy.BALANCED)
    devices = plugin.scan()["cy"]
    chosen = list(plugin.preferred_allocation("cy", sorted(devices), [], 2))
    assert [address.split(":")[1] for address in chosen] == ["10", "11"]
    allocation = plugin.post_allocate("cy", devices, chosen, default_allocation(devices, chosen))
    assert dict(allocation.envs) == {"QAT0": chosen[0], "QAT1": chosen[1]}


def test_static_facts_are_read_again_after_a_vf_disappears(tree: FakeTree) -> None:
    pf = add_pf(tree, vfs=2)
    plugin = QatDpdkPlugin(QatPaths(tree.root), DpdkConfig())
    assert plugin.scan()["cy"][pf.vfs[0]].nodes[0].container_path == f"{tree.root}/dev/vfio/0"
    pf_sysfs = tree.sysfs_of(pf.address)
    link = tree.path(f"{pf_sysfs}/virtfn0")
    target = link.readlink()
    link.unlink()
    assert pf.vfs[0] not in plugin.scan()["cy"]
    # The VF comes back in another IOMMU group (as after re-creating the VFs).
    tree.link(f"{tree.sysfs_of(pf.vfs[0])}/iommu_group", "/sys/kernel/iommu_groups/1")
    link.symlink_to(target)
    assert plugin.scan()["cy"][pf.vfs[0]].nodes[0].container_path == f"{tree.root}/dev/vfio/1"
