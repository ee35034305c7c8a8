"""Work-queue discovery of the DSA and IAA plugins, on simulated nodes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import DeviceNode, Health
from intel_device_plugins.deviceplugin.numa_cache import NumaCache
from intel_device_plugins.plugins.idxd.discovery import DSA, IAA, scan_work_queues
from intel_device_plugins.sim import idxd
from tests.builders import two_socket_node as node


def can_mknod(directory: Path) -> bool:
    probe = directory / "probe-chr"
    try:
        os.mknod(probe, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        return False
    probe.unlink()
    return True


def test_dedicated_user_queues_become_one_device_each(tmp_path: Path) -> None:
    node(tmp_path, "[[dsa]]\ncount = 2\nwqs = 2\nnuma_node = 1\n")
    tree = scan_work_queues(str(tmp_path), DSA, shared_dev_num=4).tree
    assert set(tree) == {"wq-user-dedicated"}
    devices = tree["wq-user-dedicated"]
    assert sorted(devices) == [
        "wq-user-dedicated-wq0.0-0",
        "wq-user-dedicated-wq0.1-0",
        "wq-user-dedicated-wq1.0-0",
        "wq-user-dedicated-wq1.1-0",
    ]
    info = devices["wq-user-dedicated-wq1.1-0"]
    assert info.health is Health.HEALTHY
    assert info.numa_nodes == (1,)
    assert info.nodes == (
        DeviceNode(f"{tmp_path}/dev/dsa/wq1.1", f"{tmp_path}/dev/dsa/wq1.1", "rw"),
        DeviceNode(f"{tmp_path}/dev/char/238:65", f"{tmp_path}/dev/char/238:65", "rw"),
    )


def test_shared_queue_is_advertised_shared_dev_num_times(tmp_path: Path) -> None:
    node(tmp_path, '[[dsa]]\nwqs = 2\nwq_mode = "mixed"\n')
    tree = scan_work_queues(str(tmp_path), DSA, shared_dev_num=3).tree
    assert sorted(tree["wq-user-shared"]) == [f"wq-user-shared-wq0.1-{i}" for i in range(3)]
    assert sorted(tree["wq-user-dedicated"]) == ["wq-user-dedicated-wq0.0-0"]
    assert len({id(info) for info in tree["wq-user-shared"].values()}) == 1


def test_kernel_queues_have_no_device_nodes(tmp_path: Path) -> None:
    node(tmp_path, '[[dsa]]\nwqs = 1\nwq_type = "kernel"\nwq_mode = "shared"\n')
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    info = discovery.tree["wq-kernel-shared"]["wq-kernel-shared-wq0.0-0"]
    assert info.nodes == ()
    assert info.health is Health.HEALTHY
    assert discovery.problems == ()


def test_disabled_queues_are_skipped_without_complaint(tmp_path: Path) -> None:
    node(tmp_path, '[[dsa]]\nwqs = 2\nwq_state = "disabled"\n')
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert discovery.tree == {}
    assert discovery.problems == ()


def test_no_idxd_driver_means_no_devices(tmp_path: Path) -> None:
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert discovery.tree == {}


@pytest.mark.parametrize("attribute", ["mode", "type", "state"])
def test_unreadable_attribute_skips_only_that_queue(tmp_path: Path, attribute: str) -> None:
    tree = node(tmp_path, "[[dsa]]\nwqs = 2\n")
    tree.remove(f"/sys/bus/dsa/devices/dsa0/wq0.0/{attribute}")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert sorted(discovery.tree["wq-user-dedicated"]) == ["wq-user-dedicated-wq0.1-0"]
    assert len(discovery.problems) == 1
    assert "dsa0/wq0.0" in discovery.problems[0] and attribute in discovery.problems[0]


@pytest.mark.parametrize(("attribute", "value"), [("mode", "sideways"), ("type", "User Type!")])
def test_garbage_attribute_skips_only_that_queue(tmp_path: Path, attribute: str, value: str) -> None:
    tree = node(tmp_path, "[[dsa]]\nwqs = 2\n")
    tree.write(f"/sys/bus/dsa/devices/dsa0/wq0.1/{attribute}", value + "\n")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert sorted(discovery.tree["wq-user-dedicated"]) == ["wq-user-dedicated-wq0.0-0"]
    assert "dsa0/wq0.1" in discovery.problems[0] and repr(value) in discovery.problems[0]


def test_missing_char_link_makes_that_queue_unhealthy(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[dsa]]\nwqs = 2\n")
    tree.remove("/dev/char/238:1")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    devices = discovery.tree["wq-user-dedicated"]
    assert devices["wq-user-dedicated-wq0.0-0"].health is Health.HEALTHY
    assert devices["wq-user-dedicated-wq0.1-0"].health is Health.UNHEALTHY
    assert len(discovery.problems) == 1
    assert "dsa0/wq0.1" in discovery.problems[0] and "238:1" in discovery.problems[0]


def test_char_link_to_another_node_makes_the_queue_unhealthy(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[dsa]]\nwqs = 2\n")
    tree.link("/dev/char/238:1", "/dev/dsa/wq0.0")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert discovery.tree["wq-user-dedicated"]["wq-user-dedicated-wq0.1-0"].health is Health.UNHEALTHY
    assert "points to" in discovery.problems[0]


def test_missing_node_makes_the_queue_unhealthy(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[dsa]]\nwqs = 1\n")
    tree.remove("/dev/dsa/wq0.0")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    info = discovery.tree["wq-user-dedicated"]["wq-user-dedicated-wq0.0-0"]
    assert info.health is Health.UNHEALTHY
    assert "missing" in discovery.problems[0]


def test_plain_file_node_without_sysfs_number_is_unhealthy(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[dsa]]\nwqs = 1\n")
    tree.remove("/sys/bus/dsa/devices/dsa0/wq0.0/dsa!wq0.0")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert discovery.tree["wq-user-dedicated"]["wq-user-dedicated-wq0.0-0"].health is Health.UNHEALTHY
    assert "not a character device" in discovery.problems[0]


def test_directory_in_place_of_node_is_unhealthy(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[dsa]]\nwqs = 1\n")
    tree.remove("/dev/dsa/wq0.0")
    tree.mkdir("/dev/dsa/wq0.0")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert discovery.tree["wq-user-dedicated"]["wq-user-dedicated-wq0.0-0"].health is Health.UNHEALTHY


def test_real_char_device_number_wins_over_sysfs(tmp_path: Path) -> None:
    if not can_mknod(tmp_path):
        pytest.skip("creating character devices needs CAP_MKNOD")
    tree = node(tmp_path, '[[dsa]]\nwqs = 2\nchar_devices = "real"\n')
    assert stat.S_ISCHR(os.stat(tmp_path / "dev/dsa/wq0.0").st_mode)
    healthy = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert all(i.health is Health.HEALTHY for i in healthy.tree["wq-user-dedicated"].values())
    # Same sysfs number, but the node now is another device: its own number decides.
    idxd.char_device(tree, "/dev/dsa/wq0.1", 238, 99, "real")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert discovery.tree["wq-user-dedicated"]["wq-user-dedicated-wq0.1-0"].health is Health.UNHEALTHY
    assert "238:99" in discovery.problems[0]


def test_iaa_sees_only_iax_devices(tmp_path: Path) -> None:
    node(tmp_path, "[[dsa]]\nwqs = 1\n[[iaa]]\ncount = 2\nwqs = 1\n")
    iaa = scan_work_queues(str(tmp_path), IAA, shared_dev_num=1).tree
    dsa = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1).tree
    # One numbering for both kinds: dsa0, then iax1 and iax2.
    assert sorted(iaa["wq-user-dedicated"]) == ["wq-user-dedicated-wq1.0-0", "wq-user-dedicated-wq2.0-0"]
    assert (
        iaa["wq-user-dedicated"]["wq-user-dedicated-wq2.0-0"].nodes[0].host_path
        == f"{tmp_path}/dev/iax/wq2.0"
    )
    assert sorted(dsa["wq-user-dedicated"]) == ["wq-user-dedicated-wq0.0-0"]
    assert (
        dsa["wq-user-dedicated"]["wq-user-dedicated-wq0.0-0"].nodes[0].host_path
        == f"{tmp_path}/dev/dsa/wq0.0"
    )


def test_numa_memo_follows_the_device_directory_identity(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[dsa]]\nwqs = 1\nnuma_node = 1\n")
    memo = NumaCache(tmp_path)
    device_dir = str(tmp_path / "sys/bus/dsa/devices/dsa0")
    pci_dir = tree.sysfs_of("0000:10:00.0")
    assert memo(device_dir) == (1,)
    tree.write(f"{pci_dir}/numa_node", "0\n")
    assert memo(device_dir) == (1,)  # same directory, same inode: remembered
    # Re-plugged: the kernel creates a new directory (new inode), the lookup is done again.
    accel = tree.path(f"{pci_dir}/dsa0")
    accel.rename(accel.with_name("old-dsa0"))
    accel.mkdir()
    assert memo(device_dir) == (0,)


def test_broken_accelerator_link_is_reported(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[dsa]]\ncount = 2\nwqs = 1\n")
    tree.remove("/sys/bus/dsa/devices/dsa0")
    tree.path("/sys/bus/dsa/devices/dsa0").symlink_to("nowhere")
    discovery = scan_work_queues(str(tmp_path), DSA, shared_dev_num=1)
    assert sorted(discovery.tree["wq-user-dedicated"]) == ["wq-user-dedicated-wq1.0-0"]
    assert discovery.problems[0].startswith("dsa0: cannot read")
