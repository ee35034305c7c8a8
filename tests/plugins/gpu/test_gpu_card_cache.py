"""Card facts are read once per card and re-read when the card is re-plugged."""

from __future__ import annotations

from pathlib import Path

from intel_device_plugins.deviceplugin.model import DeviceInfo
from intel_device_plugins.plugins.gpu.discovery import CardFactsCache, GpuOptions, scan_gpus
from intel_device_plugins.sim import gpu
from intel_device_plugins.sim.fakefs import FakeTree


def test_cached_scan_equals_uncached_scan(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path, numa_nodes=2)
    for numa in (0, 1, 1):
        gpu.add_card(tree, numa_node=numa, mei=True)
    options = GpuOptions(shared_dev_num=2, enable_monitoring=True)
    warm = CardFactsCache()
    scan_gpus(str(tmp_path), options, warm)
    assert scan_gpus(str(tmp_path), options, warm) == scan_gpus(str(tmp_path), options)


def test_static_facts_are_remembered_until_the_card_is_replugged(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path, numa_nodes=2)
    card = gpu.add_card(tree, numa_node=1)
    local = CardFactsCache()

    def scan() -> DeviceInfo:
        return scan_gpus(str(tmp_path), GpuOptions(), local).tree["i915"]["card0-0"]

    assert scan().numa_nodes == (1,)
    sysfs = tree.sysfs_of(card.address)
    tree.write(f"{sysfs}/numa_node", "0\n")
    assert scan().numa_nodes == (1,)  # same function, same answer: not read again
    gpu.remove_card(tree, card.index)
    gpu.add_card(tree, numa_node=0, address=card.address)
    assert scan().numa_nodes == (0,)  # re-plugged: a new sysfs directory, read afresh


def test_unreadable_vendor_is_not_remembered(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = gpu.add_card(tree)
    vendor = tree.path(f"{tree.sysfs_of(card.address)}/vendor")
    content = vendor.read_text()
    vendor.unlink()
    local = CardFactsCache()
    first = scan_gpus(str(tmp_path), GpuOptions(), local)
    assert first.tree == {} and "cannot read" in first.problems[0]
    vendor.write_text(content)
    assert "card0-0" in scan_gpus(str(tmp_path), GpuOptions(), local).tree["i915"]
