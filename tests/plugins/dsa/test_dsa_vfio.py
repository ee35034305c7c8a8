"""DSA's vfio-pci mode: discovery of passed-through functions and the per-container VFIO_BDF env."""

from __future__ import annotations

from pathlib import Path

from intel_device_plugins.deviceplugin.model import (
    ContainerAllocation,
    DeviceNode,
    Health,
    default_allocation,
)
from intel_device_plugins.plugins.idxd.plugin import DsaVfioPlugin
from intel_device_plugins.plugins.idxd.vfio import scan_vfio, with_bdf_envs
from tests.builders import two_socket_node as node


def test_dsa_bound_to_vfio_pci_is_one_device_per_function(tmp_path: Path) -> None:
    node(tmp_path, '[[dsa]]\ncount = 2\ndriver = "vfio-pci"\nnuma_node = 1\n[[dsa]]\nwqs = 1\n')
    discovery = scan_vfio(str(tmp_path))
    devices = discovery.tree["vfio"]
    assert sorted(devices) == ["0000:10:00.0", "0000:11:00.0"]
    info = devices["0000:11:00.0"]
    assert info.health is Health.HEALTHY
    assert info.numa_nodes == (1,)
    assert info.nodes == (
        DeviceNode(f"{tmp_path}/dev/vfio/1", f"{tmp_path}/dev/vfio/1", "rw"),
        DeviceNode(f"{tmp_path}/dev/vfio/vfio", f"{tmp_path}/dev/vfio/vfio", "rw"),
    )
    assert dict(info.envs) == {}
    assert discovery.problems == ()


def test_other_pci_devices_and_ids_are_ignored(tmp_path: Path) -> None:
    node(tmp_path, '[[dsa]]\ndriver = "vfio-pci"\ndevice_id = "0x0cfe"\n[[gpu]]\ncount = 1\n')
    discovery = scan_vfio(str(tmp_path))
    assert discovery.tree == {"vfio": {}}
    assert discovery.problems == ()


def test_unbound_dsa_is_reported_and_skipped(tmp_path: Path) -> None:
    tree = node(tmp_path, '[[dsa]]\ncount = 2\ndriver = "vfio-pci"\n')
    tree.remove("/sys/bus/pci/devices/0000:10:00.0/driver")
    discovery = scan_vfio(str(tmp_path))
    assert sorted(discovery.tree["vfio"]) == ["0000:11:00.0"]
    assert discovery.problems == ("0000:10:00.0: DSA 0x0b25 is bound to no driver (expected vfio-pci)",)


def test_missing_iommu_group_skips_and_missing_group_node_is_unhealthy(tmp_path: Path) -> None:
    tree = node(tmp_path, '[[dsa]]\ncount = 2\ndriver = "vfio-pci"\n')
    tree.remove("/sys/bus/pci/devices/0000:10:00.0/iommu_group")
    tree.remove("/dev/vfio/1")
    discovery = scan_vfio(str(tmp_path))
    assert list(discovery.tree["vfio"]) == ["0000:11:00.0"]
    assert discovery.tree["vfio"]["0000:11:00.0"].health is Health.UNHEALTHY
    assert any("0000:10:00.0" in p and "IOMMU group" in p for p in discovery.problems)
    assert any("0000:11:00.0" in p and "/dev/vfio/1" in p for p in discovery.problems)


def test_unreadable_device_id_skips_only_that_function(tmp_path: Path) -> None:
    tree = node(tmp_path, '[[dsa]]\ncount = 2\ndriver = "vfio-pci"\n')
    tree.remove("/sys/bus/pci/devices/0000:10:00.0/device")
    discovery = scan_vfio(str(tmp_path))
    assert list(discovery.tree["vfio"]) == ["0000:11:00.0"]
    assert "0000:10:00.0" in discovery.problems[0]


def test_bdf_envs_are_numbered_per_container_in_request_order(tmp_path: Path) -> None:
    node(tmp_path, '[[dsa]]\ncount = 3\ndriver = "vfio-pci"\n')
    plugin = DsaVfioPlugin(prefix=str(tmp_path))
    devices = plugin.scan()["vfio"]
    first_ids = ["0000:12:00.0", "0000:10:00.0"]
    first = plugin.post_allocate("vfio", devices, first_ids, default_allocation(devices, first_ids))
    second_ids = ["0000:11:00.0"]
    second = plugin.post_allocate("vfio", devices, second_ids, default_allocation(devices, second_ids))
    assert dict(first.envs) == {"VFIO_BDF0": "0000:12:00.0", "VFIO_BDF1": "0000:10:00.0"}
    # The second container starts again at 0 and sees nothing of the first one's addresses.
    assert dict(second.envs) == {"VFIO_BDF0": "0000:11:00.0"}
    assert [n.host_path for n in first.nodes] == [f"{tmp_path}/dev/vfio/{n}" for n in ("2", "vfio", "0")]


def test_bdf_envs_replace_stale_numbering_but_keep_other_envs() -> None:
    allocation = ContainerAllocation(envs={"VFIO_BDF7": "old", "OTHER": "x"})
    assert dict(with_bdf_envs(allocation, ["0000:aa:00.0"]).envs) == {
        "OTHER": "x",
        "VFIO_BDF0": "0000:aa:00.0",
    }


def test_garbage_device_id_is_reported(tmp_path: Path) -> None:
    tree = node(tmp_path, '[[dsa]]\ncount = 2\ndriver = "vfio-pci"\n')
    tree.write("/sys/bus/pci/devices/0000:11:00.0/device", "dsa?\n")
    discovery = scan_vfio(str(tmp_path))
    assert list(discovery.tree["vfio"]) == ["0000:10:00.0"]
    path = f"{tmp_path}/sys/bus/pci/devices/0000:11:00.0/device"
    assert discovery.problems == (f"0000:11:00.0: garbage device ID 'dsa?' in {path}; skipped",)
