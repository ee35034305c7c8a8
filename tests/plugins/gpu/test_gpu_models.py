"""The one table of Intel GPU models: Intel's DRA driver's IDs and strings, Panther Lake, Unknown."""

from __future__ import annotations

import pytest

from intel_device_plugins.plugins.gpu.models import (
    FAMILIES,
    MODELS,
    UNKNOWN,
    GpuModel,
    device_ids_of_family,
    model_of,
)

INTEL_DRA_DRIVER_MODELS = {
    "0x4626": ("Alder Lake-P", "Iris Xe"),
    "0x56a0": ("A770", "Arc A-Series"),
    "0x56a1": ("A750", "Arc A-Series"),
    "0x56a2": ("A580", "Arc A-Series"),
    "0x56a5": ("A380", "Arc A-Series"),
    "0x56a6": ("A310", "Arc A-Series"),
    "0x56b0": ("A30M", "Arc Pro A-Series"),
    "0x56b1": ("A40/A50", "Arc Pro A-Series"),
    "0x56b2": ("A60M", "Arc Pro A-Series"),
    "0x56b3": ("A60", "Arc Pro A-Series"),
    "0x56c0": ("Flex 170", "Data Center Flex"),
    "0x56c1": ("Flex 140", "Data Center Flex"),
    "0x7d67": ("Arrow Lake-S", "Intel Graphics"),
    "0x0b69": ("Max 1550", "Data Center Max"),
    "0x0bd0": ("Max 1550", "Data Center Max"),
    "0x0bd5": ("Max 1550", "Data Center Max"),
    "0x0bd6": ("Max 1450", "Data Center Max"),
    "0x0bd9": ("Max 1100", "Data Center Max"),
    "0x0bda": ("Max 1100", "Data Center Max"),
    "0x0bdb": ("Max 1100", "Data Center Max"),
    "0xa7a0": ("Raptor Lake-P", "Iris Xe"),
    "0xb080": ("B390", "Arc B-Series"),
    "0xb081": ("B370", "Arc B-Series"),
    "0xb082": ("B390", "Arc B-Series"),
    "0xb083": ("B370", "Arc B-Series"),
    "0xb084": ("B390", "Arc B-Series"),
    "0xb085": ("B370", "Arc B-Series"),
    "0xb086": ("B390", "Arc B-Series"),
    "0xb087": ("B370", "Arc B-Series"),
    "0xe20b": ("B580", "Arc B-Series"),
    "0xe20c": ("B570", "Arc B-Series"),
    "0xe211": ("B60", "Arc Pro B-Series"),
    "0xe212": ("B50", "Arc Pro B-Series"),
    "0xe222": ("B65", "Arc Pro B-Series"),
    "0xe223": ("B70", "Arc Pro B-Series"),
}
"""Every ID Intel's GPU DRA driver 0.11 names, with its exact model and family strings."""


def test_every_id_of_intels_driver_has_its_model_and_family() -> None:
    assert len(INTEL_DRA_DRIVER_MODELS) == 35
    for pci_id, (model, family) in INTEL_DRA_DRIVER_MODELS.items():
        assert model_of(pci_id) == GpuModel(model, family), pci_id


def test_panther_lake_ids_beyond_intels_list_are_intel_graphics() -> None:
    extra = set(MODELS) - set(INTEL_DRA_DRIVER_MODELS)

    assert extra == {"0xb08f", "0xb090", "0xb0a0", "0xb0b0"}
    assert {model_of(pci_id) for pci_id in extra} == {GpuModel("Panther Lake", "Intel Graphics")}


@pytest.mark.parametrize("pci_id", ["0x4680", "", None, "garbage"])
def test_an_id_not_in_the_table_is_unknown_never_absent(pci_id: str | None) -> None:
    assert model_of(pci_id) == UNKNOWN == GpuModel("Unknown", "Unknown")


def test_ids_match_in_any_case_and_with_whitespace_as_sysfs_gives_them() -> None:
    assert model_of("0xE20B\n") == GpuModel("B580", "Arc B-Series")


def test_the_table_is_frozen_and_its_families_are_the_known_ones() -> None:
    with pytest.raises(TypeError):
        MODELS["0x1234"] = UNKNOWN  # type: ignore[index]
    assert {known.family for known in MODELS.values()} == set(FAMILIES)
    assert all(pci_id == pci_id.lower() and len(pci_id) == 6 for pci_id in MODELS)


def test_family_ids_for_nfd_rules_are_bare_hex_sorted() -> None:
    assert device_ids_of_family("Data Center Flex") == ("56c0", "56c1")
    assert device_ids_of_family("Arc Pro B-Series") == ("e211", "e212", "e222", "e223")
    assert device_ids_of_family("Voodoo") == ()
