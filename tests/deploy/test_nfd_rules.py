"""deploy/nfd's NodeFeatureRules against simulated nodes: each device kind labels its node, and only it."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest

from intel_device_plugins.sim import gpu, npu, qat
from intel_device_plugins.sim.fakefs import FakeTree
from tests.deploy.nfd_rules import NodeFeatures, load_rules, node_labels, pci_devices

RULES = load_rules(Path(__file__).parents[2] / "deploy" / "nfd")
GPU = "intel.feature.node.kubernetes.io/gpu"
NPU = "intel.feature.node.kubernetes.io/npu"
QAT = "intel.feature.node.kubernetes.io/qat"
NPU_IDS = ("0x7e4c", "0x643e", "0xad1d", "0x7d1d", "0xb03e", "0xfd3e", "0xd71d")
"""The NPU plugin's IDs (plugins/npu/discovery.py)."""


def labels(tree: FakeTree, loaded: Collection[str] = (), built_in: Collection[str] = ()) -> dict[str, str]:
    flags = {
        "kernel.loadedmodule": frozenset(loaded),
        "kernel.enabledmodule": frozenset(loaded) | set(built_in),
    }
    return node_labels(RULES, NodeFeatures(pci_devices(tree), flags))


def gpu_card(tree: FakeTree, device_id: str, pci_class: str = "0x030000", driver: str = "xe") -> str:
    card = gpu.add_card(tree, driver=driver, device_id=device_id)
    tree.write(f"{tree.sysfs_of(card.address)}/class", pci_class + "\n")
    return device_id.removeprefix("0x")


@pytest.fixture
def tree(tmp_path: Path) -> FakeTree:
    return FakeTree(tmp_path)


def test_the_npu_plugins_ids_are_the_rules_ids() -> None:
    from intel_device_plugins.plugins.npu import discovery

    assert set(NPU_IDS) == discovery.NPU_DEVICE_IDS


@pytest.mark.parametrize("pci_class", ["0x030000", "0x038000", "0x120000"])
def test_a_gpu_of_each_class_labels_its_node(tree: FakeTree, pci_class: str) -> None:
    device = gpu_card(tree, "0xe223", pci_class)

    got = labels(tree, loaded={"xe"})

    assert got[GPU] == "true"
    assert got[f"gpu.intel.com/device-id.{pci_class[2:6]}-{device}.present"] == "true"


def test_a_gpu_needs_its_driver_loaded_or_built_in(tree: FakeTree) -> None:
    gpu_card(tree, "0x56a0", driver="i915")

    assert GPU not in labels(tree)
    assert labels(tree, loaded={"i915"})[GPU] == "true"
    assert labels(tree, built_in={"i915"})[GPU] == "true"
    assert labels(tree, built_in={"xe"})[GPU] == "true"


@pytest.mark.parametrize("device_id", NPU_IDS)
def test_every_npu_labels_its_node_and_is_no_gpu(tree: FakeTree, device_id: str) -> None:
    npu.add_npu(tree, device_id=device_id)

    got = labels(tree, loaded={"intel_vpu"}, built_in={"xe", "i915"})

    assert got[NPU] == "true"
    assert GPU not in got
    assert not [k for k in got if k.startswith("gpu.intel.com/")]


def test_an_fpga_of_class_1200_is_no_gpu(tree: FakeTree) -> None:
    tree.pci_function(
        tree.next_pci_address(),
        vendor="0x8086",
        device="0x09c4",
        numa_node=0,
        driver="dfl-pci",
        pci_class="0x120000",
    )

    got = labels(tree, loaded={"xe", "dfl_pci"})

    assert got["intel.feature.node.kubernetes.io/fpga-arria10"] == "true"
    assert GPU not in got


@pytest.mark.parametrize("generation", ["4xxx", "420xx", "6xxx", "c6xx", "c4xxx"])
def test_every_qat_pf_the_plugin_serves_labels_its_node(tree: FakeTree, generation: str) -> None:
    qat.add_pf(tree, generation=generation, vfs=1)

    assert labels(tree)[QAT] == "true"


@pytest.mark.parametrize(
    ("device_id", "product"),
    [("0xe20b", "B580"), ("0xe20c", "B570"), ("0xe211", "Pro_B60"), ("0xe212", "Pro_B50"),
     ("0xe222", "Pro_B65"), ("0xe223", "Pro_B70")],
)  # fmt: skip
def test_b_series_cards_get_family_product_and_count(tree: FakeTree, device_id: str, product: str) -> None:
    gpu_card(tree, device_id)
    gpu_card(tree, device_id)

    got = labels(tree, loaded={"xe"})

    assert got["gpu.intel.com/family"] == "B_Series"
    assert got["gpu.intel.com/product"] == product
    assert got["gpu.intel.com/device.count"] == "2"


def test_a_mixed_node_has_a_present_label_per_model(tree: FakeTree) -> None:
    gpu_card(tree, "0xe211")
    gpu_card(tree, "0xe223")
    gpu_card(tree, "0x56c0", "0x038000", driver="i915")

    got = labels(tree, loaded={"xe", "i915"})

    present = {k for k, v in got.items() if k.endswith(".present") and v == "true"}
    assert present == {
        "gpu.intel.com/device-id.0300-e211.present",
        "gpu.intel.com/device-id.0300-e223.present",
        "gpu.intel.com/device-id.0380-56c0.present",
    }


@pytest.mark.parametrize(
    ("device_id", "pci_class", "family", "product"),
    [
        ("0x56c0", "0x038000", "Flex_Series", "Flex_170"),
        ("0x56c1", "0x038000", "Flex_Series", "Flex_140"),
        ("0x0bd5", "0x038000", "Max_Series", "Max_1550"),
        ("0x56a0", "0x030000", "A_Series", None),
    ],
)
def test_older_data_center_and_arc_cards_keep_their_labels(
    tree: FakeTree, device_id: str, pci_class: str, family: str, product: str | None
) -> None:
    gpu_card(tree, device_id, pci_class, driver="i915")

    got = labels(tree, loaded={"i915"})

    assert got["gpu.intel.com/family"] == family
    assert got.get("gpu.intel.com/product") == product


def test_other_vendors_and_other_intel_functions_label_nothing(tree: FakeTree) -> None:
    gpu_card(tree, "0x56a0")
    tree.write(f"{tree.sysfs_of('0000:10:00.0')}/vendor", "0x1002\n")  # an AMD card
    tree.pci_function(tree.next_pci_address(), vendor="0x8086", device="0x1572", numa_node=0, driver=None,
                      pci_class="0x020000")  # fmt: skip

    assert labels(tree, loaded={"xe", "i915", "amdgpu"}) == {}
