"""Attribute reads that a broken tree cannot wedge: a page at most, regular files only."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of
from intel_device_plugins.sysfs import PAGE_SIZE, UnreadableAttribute, read_attribute, read_int, read_trimmed


def finishes(function: object, *args: object, timeout: float = 3.0) -> object:
    """Run ``function(*args)`` on a daemon thread; fail (instead of hanging the suite) if it blocks."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(function(*args))  # type: ignore[operator]
        except Exception as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{function} blocked for {timeout} s"
    return outcome[0]


def test_a_regular_attribute_is_read(tmp_path: Path) -> None:
    (tmp_path / "vendor").write_text("0x8086\n")
    assert read_attribute(tmp_path / "vendor") == "0x8086\n"
    assert read_trimmed(tmp_path / "vendor") == "0x8086"


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "vendor"
    os.mkfifo(fifo)
    error = finishes(read_attribute, fifo)
    assert isinstance(error, UnreadableAttribute)
    assert str(error) == f"{fifo}: is a FIFO, not a regular file"
    assert finishes(read_trimmed, fifo) is None


def test_a_link_to_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    link = tmp_path / "vendor"
    link.symlink_to("/dev/zero")
    error = finishes(read_attribute, link)
    assert isinstance(error, UnreadableAttribute)
    assert "is a character device" in str(error)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "sriov_numvfs").mkdir()
    with pytest.raises(UnreadableAttribute, match="is a directory"):
        read_attribute(tmp_path / "sriov_numvfs")
    assert read_int(tmp_path / "sriov_numvfs") is None


def test_more_than_a_page_is_refused(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"1" * (PAGE_SIZE + 1))
    (tmp_path / "page").write_bytes(b"1" * PAGE_SIZE)
    with pytest.raises(UnreadableAttribute, match="more than 4096 bytes"):
        read_attribute(tmp_path / "big")
    assert len(read_attribute(tmp_path / "page")) == PAGE_SIZE


def test_missing_and_unreadable_keep_their_errno(tmp_path: Path) -> None:
    with pytest.raises(UnreadableAttribute) as missing:
        read_attribute(tmp_path / "nothing")
    assert missing.value.errno == errno.ENOENT
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(UnreadableAttribute) as looping:
        read_attribute(loop)
    assert looping.value.errno == errno.ELOOP


def test_numa_file_that_is_a_fifo_is_a_topology_error_not_a_hang(tmp_path: Path) -> None:
    device = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:02.0"
    device.mkdir(parents=True)
    os.mkfifo(device / "numa_node")
    error = finishes(numa_nodes_of, device, tmp_path)
    assert isinstance(error, TopologyError)
    assert "numa_node: is a FIFO" in str(error)


@pytest.mark.parametrize("value", ["1024", str(2**63), str(2**64)])
def test_numa_node_beyond_what_linux_supports_is_a_topology_error(tmp_path: Path, value: str) -> None:
    device = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:02.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text(value + "\n")
    (device / "local_cpulist").write_text("0-3\n")
    with pytest.raises(TopologyError, match="out of range"):
        numa_nodes_of(device, tmp_path)
