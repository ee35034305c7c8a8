"""NPU discovery, flags and the plugin shell, on simulated nodes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.model import DeviceNode, Health
from intel_device_plugins.plugins.npu import cli
from intel_device_plugins.plugins.npu.discovery import NPU_DEVICE_IDS, scan_npus
from intel_device_plugins.plugins.npu.plugin import NpuPlugin
from tests.builders import two_socket_node as node


@pytest.mark.parametrize("device_id", sorted(NPU_DEVICE_IDS))
def test_every_supported_device_id_is_found(tmp_path: Path, device_id: str) -> None:
    node(tmp_path, f'[[npu]]\ndevice_id = "{device_id}"\nnuma_node = 1\n')
    devices = scan_npus(str(tmp_path), 1).tree["accel"]
    assert list(devices) == ["accel0-0"]
    info = devices["accel0-0"]
    assert info.health is Health.HEALTHY
    assert info.nodes == (DeviceNode(f"{tmp_path}/dev/accel/accel0", f"{tmp_path}/dev/accel/accel0", "rw"),)
    assert info.numa_nodes == (1,)


def test_shared_dev_num_multiplies_ids(tmp_path: Path) -> None:
    node(tmp_path, "[[npu]]\ncount = 2\n")
    devices = scan_npus(str(tmp_path), 3).tree["accel"]
    assert sorted(devices) == [f"accel{n}-{i}" for n in range(2) for i in range(3)]
    assert devices["accel1-0"] == devices["accel1-2"] != devices["accel0-0"]


def test_foreign_accel_devices_are_ignored_silently(tmp_path: Path) -> None:
    node(
        tmp_path,
        '[[npu]]\nvendor = "0x1022"\ndevice_id = "0x1502"\n[[npu]]\ndevice_id = "0x1020"\n[[npu]]\n',
    )
    discovery = scan_npus(str(tmp_path), 1)
    assert list(discovery.tree["accel"]) == ["accel2-0"]
    assert discovery.problems == ()


def test_missing_accel_class_means_zero_devices_not_a_crash(tmp_path: Path) -> None:
    discovery = scan_npus(str(tmp_path), 1)
    assert discovery.tree == {"accel": {}}
    assert "sys/class/accel" in discovery.problems[0]


def test_unreadable_vendor_skips_only_that_npu(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[npu]]\ncount = 2\n")
    tree.remove("/sys/class/accel/accel0/device/vendor")
    discovery = scan_npus(str(tmp_path), 1)
    assert list(discovery.tree["accel"]) == ["accel1-0"]
    assert discovery.problems[0].startswith("accel0: cannot read")


def test_missing_node_is_unhealthy(tmp_path: Path) -> None:
    node(tmp_path, "[[npu]]\nnode = false\n[[npu]]\n")
    discovery = scan_npus(str(tmp_path), 2)
    devices = discovery.tree["accel"]
    assert devices["accel0-1"].health is Health.UNHEALTHY
    assert devices["accel1-1"].health is Health.HEALTHY
    assert discovery.problems == (
        f"accel0: device node {tmp_path}/dev/accel/accel0 is missing; reported Unhealthy",
    )


def test_entries_not_named_accelN_are_ignored(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[npu]]\n")
    tree.link("/sys/class/accel/accel_foo", "/sys/class/accel/accel0")
    assert list(scan_npus(str(tmp_path), 1).tree["accel"]) == ["accel0-0"]


def test_plugin_logs_a_missing_class_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    plugin = NpuPlugin(prefix=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        assert plugin.scan() == {"accel": {}}
        assert plugin.scan() == {"accel": {}}
    assert len([r for r in caplog.records if "sys/class/accel" in r.getMessage()]) == 1
    assert plugin.watch_paths() == (tmp_path / "dev/accel",)


def test_flags(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.build_parser().parse_args(["--shared-dev-num=2", "-prefix", "/x"])
    (plugin,) = cli.build_plugins(args)
    assert isinstance(plugin, NpuPlugin)
    assert (plugin.shared_dev_num, plugin.prefix) == (2, "/x")
    with pytest.raises(SystemExit):
        cli.main(["-shared-dev-num", "0"])
    assert "shared-dev-num" in capsys.readouterr().err


def test_garbage_ids_skip_only_that_npu(tmp_path: Path) -> None:
    tree = node(tmp_path, "[[npu]]\ncount = 2\n")
    tree.write("/sys/class/accel/accel1/device/device", "\x00\x01garbage\n")
    discovery = scan_npus(str(tmp_path), 1)
    assert list(discovery.tree["accel"]) == ["accel0-0"]
    assert discovery.problems[0].startswith("accel1: garbage PCI IDs")
