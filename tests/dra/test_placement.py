from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.dra.model import STANDARD_PCI_BUS_ID, STANDARD_PCIE_ROOT
from intel_device_plugins.dra.placement import (
    NUMA_NODE,
    STANDARD_NUMA_NODE,
    numa_attributes,
    pci_attributes,
    pci_attributes_of_path,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/sys/devices/pci0000:00/0000:00:02.0",
            {STANDARD_PCI_BUS_ID: "0000:00:02.0", STANDARD_PCIE_ROOT: "pci0000:00"},
        ),
        (
            "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/drm/card1",
            {STANDARD_PCI_BUS_ID: "0000:3b:00.0", STANDARD_PCIE_ROOT: "pci0000:3a"},
        ),
        ("/sys/devices/platform/vsgx", {}),
        ("/sys/devices/pci0000:00", {}),
        ("/elsewhere/pci0000:00/0000:00:02.0", {}),
    ],
)
def test_attributes_follow_the_resolved_path(path: str, expected: dict[str, str]) -> None:
    assert pci_attributes_of_path(path, "/sys/devices") == expected


def test_links_are_resolved_below_the_prefix(tmp_path: Path) -> None:
    function = tmp_path / "sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"
    (function / "dsa0").mkdir(parents=True)
    bus = tmp_path / "sys/bus/dsa/devices"
    bus.mkdir(parents=True)
    (bus / "dsa0").symlink_to(function / "dsa0")
    assert pci_attributes(str(tmp_path), "/sys/bus/dsa/devices/dsa0") == {
        STANDARD_PCI_BUS_ID: "0000:81:00.0",
        STANDARD_PCIE_ROOT: "pci0000:80",
    }


def test_one_numa_node_is_published_under_both_names_and_several_under_none() -> None:
    assert numa_attributes((1,)) == {NUMA_NODE: 1, STANDARD_NUMA_NODE: 1}
    assert numa_attributes((0, 1)) == {} and numa_attributes(()) == {}
