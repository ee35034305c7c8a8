"""Card facts are read once per card and re-read when the card is re-plugged or re-bound under other DRM
numbers."""

from __future__ import annotations

from pathlib import Path

from intel_device_plugins.deviceplugin.model import DeviceInfo, Health
from intel_device_plugins.plugins.gpu.discovery import CardFactsCache, GpuOptions, scan_gpus
from intel_device_plugins.plugins.gpu.dra import GpuDriverProfile
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


def test_a_rebind_under_other_drm_numbers_is_followed(tmp_path: Path) -> None:
    """Unbind and bind keep the PCI function's directory, but the DRM minors may come back renumbered:
    the cached card must not keep expecting (or handing out) the old nodes."""
    tree = FakeTree(tmp_path)
    first = gpu.add_card(tree, mei=True)
    gpu.add_card(tree)
    local = CardFactsCache()
    options = GpuOptions(enable_monitoring=True)
    before = scan_gpus(str(tmp_path), options, local)
    assert set(before.tree["i915"]) == {"card0-0", "card1-0"}
    pci_dir = tree.path(tree.sysfs_of(first.address))
    identity_before = (pci_dir.stat().st_ino, pci_dir.stat().st_ctime_ns)

    assert gpu.rebind(tree, 0, "i915", renumber_to=2) == 2

    assert (pci_dir.stat().st_ino, pci_dir.stat().st_ctime_ns) == identity_before  # as on sysfs
    after = scan_gpus(str(tmp_path), options, local)
    assert after == scan_gpus(str(tmp_path), options)  # the warm cache sees what a fresh scan sees
    assert set(after.tree["i915"]) == {"card1-0", "card2-0"}
    moved = after.tree["i915"]["card2-0"]
    dri = tree.path("/dev/dri")
    assert moved.health is Health.HEALTHY and after.problems == ()
    assert [n.host_path for n in moved.nodes] == [str(dri / "card2"), str(dri / "renderD130")]
    assert [Path(m.host_path).name for m in moved.mounts] == [
        f"pci-{first.address}-card",
        f"pci-{first.address}-render",
    ]
    assert moved.cdi is not None and moved.cdi.name == "card2"
    monitoring = [n.host_path for n in after.tree["monitoring"]["all"].nodes]
    assert str(dri / "card2") in monitoring and str(dri / "card0") not in monitoring

    # The other card takes the freed number 0: each card gets its own nodes, none the other's.
    assert gpu.rebind(tree, 1, "i915", renumber_to=0) == 0
    again = scan_gpus(str(tmp_path), options, local)
    assert again == scan_gpus(str(tmp_path), options)
    assert [n.host_path for n in again.tree["i915"]["card0-0"].nodes] == [
        str(dri / "card0"),
        str(dri / "renderD128"),
    ]


def test_the_dra_driver_follows_a_renumbering_rebind(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = gpu.add_card(tree, driver="xe")
    profile = GpuDriverProfile(prefix=str(tmp_path))
    assert set(profile.scan().by_name()) == {"card0"}

    gpu.rebind(tree, 0, "xe", renumber_to=3)

    inventory = profile.scan()
    assert inventory == GpuDriverProfile(prefix=str(tmp_path)).scan()
    device = inventory.by_name()["card3"]
    assert set(inventory.by_name()) == {"card3"} and device.health is Health.HEALTHY
    assert device.cdi is not None
    dri = tree.path("/dev/dri")
    assert [n.host_path for n in device.cdi.nodes] == [str(dri / "card3"), str(dri / "renderD131")]
    assert device.attributes["resource.kubernetes.io/pciBusID"] == card.address


def test_a_renumbered_card_unplugs_completely(tmp_path: Path) -> None:
    tree = FakeTree(tmp_path)
    card = gpu.add_card(tree, mei=True)
    gpu.rebind(tree, 0, "i915", renumber_to=4)
    assert tree.path("/dev/mei0").exists() and tree.path("/dev/dri/card4").exists()

    gpu.remove_card(tree, 4)

    assert sorted(p.name for p in tree.path("/dev").rglob("*") if not p.is_dir()) == []
    assert not tree.path(f"/sys/bus/pci/devices/{card.address}").exists()
    assert list(tree.path("/sys/class/drm").iterdir()) == []
