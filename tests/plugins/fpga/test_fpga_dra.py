"""FPGA ports and regions as DRA devices."""

from __future__ import annotations

from pathlib import Path

import pytest

from intel_device_plugins.dra.model import (
    STANDARD_PCI_BUS_ID,
    STANDARD_PCIE_ROOT,
    AllocatedDevice,
    Device,
    Inventory,
)
from intel_device_plugins.dra.parameters import ParameterError, decode, merged
from intel_device_plugins.dra.placement import pci_device_name
from intel_device_plugins.dra.profile import ClaimPreparationError
from intel_device_plugins.plugins.fpga.discovery import CRI_HOOK_PATH, Mode
from intel_device_plugins.plugins.fpga.dra import FpgaDriverProfile
from intel_device_plugins.sim.fpga import ARRIA10_INTERFACE, NLB0_AFU
from tests.builders import two_socket_node as node

NODE = "[[fpga]]\ncount = 2\nports = 1\nnuma_node = 1\n"


def by_kernel_name(inventory: Inventory, attribute: str) -> dict[str, Device]:
    """The devices keyed by the kernel's name for them (``dfl-port-0``, ``dfl-fme-1``), which the
    ``port``/``fme`` attribute keeps; the device names are PCI-based."""
    return {str(device.attributes[attribute]): device for device in inventory.devices}


def test_af_mode_publishes_each_port_with_its_ids(tmp_path: Path) -> None:
    node(tmp_path, NODE)
    inventory = FpgaDriverProfile(str(tmp_path), Mode.AF).scan()
    assert inventory.problems == ()
    devices = by_kernel_name(inventory, "port")
    assert sorted(devices) == ["dfl-port-0", "dfl-port-1"]
    port = devices["dfl-port-0"]
    assert port.name == pci_device_name(str(port.attributes[STANDARD_PCI_BUS_ID]), "port0")
    assert port.attributes["region"] != devices["dfl-port-1"].attributes["region"]
    assert port.attributes["interfaceId"] == ARRIA10_INTERFACE.replace("-", "")
    assert port.attributes["afuId"] == NLB0_AFU.replace("-", "")
    assert port.attributes["numaNode"] == 1
    assert str(port.attributes[STANDARD_PCIE_ROOT]).startswith("pci")
    assert port.cdi is not None and port.cdi.create_runtime_hooks == ()


def region_claim(profile: FpgaDriverProfile, device: Device, *config: dict[str, object]) -> AllocatedDevice:
    """The allocation as the claim reader gives it: ``config`` entries decoded and merged in order."""
    kinds = profile.parameter_kinds
    decoded = [decode(kinds, "fpga.intel.com", c, "parameters") for c in config]
    return AllocatedDevice("fpga", "node", device.name, config=merged(kinds, decoded))


FPGA_CONFIG = {"apiVersion": "fpga.intel.com/v1alpha1", "kind": "FpgaConfig"}


def test_region_mode_prepares_the_hook_and_the_requested_function(tmp_path: Path) -> None:
    node(tmp_path, NODE)
    profile = FpgaDriverProfile(str(tmp_path), Mode.REGION)
    devices = by_kernel_name(profile.scan(), "fme")
    assert sorted(devices) == ["dfl-fme-0", "dfl-fme-1"]
    region = devices["dfl-fme-1"]
    assert region.name == pci_device_name(str(region.attributes[STANDARD_PCI_BUS_ID]), "region")
    claim = region_claim(
        profile, region, {"afuId": "AAAA-bbbb"}, {**FPGA_CONFIG, "afuId": "d8424dc4a4a3c413f89e433683f9040b"}
    )
    (edit,) = profile.claim_edits("u", [(claim, region)])
    assert edit.create_runtime_hooks == (CRI_HOOK_PATH,)
    assert edit.env == (
        f"FPGA_REGION_1={region.attributes['interfaceId']}",
        "FPGA_AFU_1=d8424dc4a4a3c413f89e433683f9040b",
    ), "the claim's last entry naming a function wins, the deprecated bare form merging with the kind"
    assert [n.host_path for n in edit.nodes] == [f"{tmp_path}/dev/dfl-port.1"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"afuId": " - "}, r"parameters.afuId: ' - ' is not an AFU ID"),
        ({"afuId": "../../etc"}, r"parameters.afuId: '../../etc' is not an AFU ID"),
        ({"afuId": 7}, r"parameters.afuId: must be a string"),
        ({**FPGA_CONFIG, "afu": "00"}, r"parameters.afu: unknown field of FpgaConfig"),
        (
            {"apiVersion": "fpga.intel.com/v1", "kind": "FpgaConfig"},
            r"parameters: apiVersion .* is not known",
        ),
    ],
)
def test_region_claims_without_a_usable_function_fail_naming_the_field(
    tmp_path: Path, config: dict[str, object], message: str
) -> None:
    node(tmp_path, NODE)
    profile = FpgaDriverProfile(str(tmp_path), Mode.REGION)
    with pytest.raises(ParameterError, match=message):
        region_claim(profile, by_kernel_name(profile.scan(), "fme")["dfl-fme-0"], config)


def test_an_overlong_function_id_fails_at_prepare_naming_the_request(tmp_path: Path) -> None:
    node(tmp_path, NODE)
    profile = FpgaDriverProfile(str(tmp_path), Mode.REGION)
    region = by_kernel_name(profile.scan(), "fme")["dfl-fme-0"]
    claim = region_claim(profile, region, {**FPGA_CONFIG, "afuId": "a" * 200})
    with pytest.raises(ClaimPreparationError, match=r"request fpga: afuId 'a+' is not a valid ID"):
        profile.claim_edits("u", [(claim, region)])


def test_region_claim_naming_no_function_leaves_it_to_the_containers_variables(tmp_path: Path) -> None:
    """The scheduler's claim for ``fpga.intel.com/region-…`` carries no configuration: the hook still
    runs, and no variable of the claim hides the ones the webhook gave the container. A claim with two
    regions, one configured, sets the pair of that one only."""
    node(tmp_path, NODE)
    profile = FpgaDriverProfile(str(tmp_path), Mode.REGION)
    devices = by_kernel_name(profile.scan(), "fme")
    plain = region_claim(profile, devices["dfl-fme-0"])
    configured = region_claim(profile, devices["dfl-fme-1"], {"afuId": NLB0_AFU})
    first, second = profile.claim_edits(
        "u", [(plain, devices["dfl-fme-0"]), (configured, devices["dfl-fme-1"])]
    )
    assert first.create_runtime_hooks == second.create_runtime_hooks == (CRI_HOOK_PATH,)
    assert first.env == ()
    assert second.env == (
        f"FPGA_REGION_2={devices['dfl-fme-1'].attributes['interfaceId']}",
        f"FPGA_AFU_2={NLB0_AFU.replace('-', '').lower()}",
    )


def test_regiondevel_gives_the_fme_node_and_no_hook(tmp_path: Path) -> None:
    node(tmp_path, NODE)
    region = by_kernel_name(FpgaDriverProfile(str(tmp_path), Mode.REGIONDEVEL).scan(), "fme")["dfl-fme-0"]
    assert region.cdi is not None and region.cdi.create_runtime_hooks == ()
    assert any("fme" in n.host_path for n in region.cdi.nodes)
