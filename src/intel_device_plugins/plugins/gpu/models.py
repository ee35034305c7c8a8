"""Intel GPU models by PCI device ID: the one table the GPU DRA driver and the GPU labels use.

The ``model`` and ``family`` strings are the ones Intel's own GPU DRA driver (``gpu.intel.com``,
release 0.11) publishes, so selectors written for it (``family.startsWith("Arc")``,
``family == "Data Center Flex"``, ``model == "B580"``) select the same cards here. Beyond its list the
table has the Panther Lake IDs the Linux ``xe`` driver knows (``INTEL_PTL_IDS``) that Intel's driver
does not name. An ID not in the table is :data:`UNKNOWN`: both strings ``"Unknown"``, never absent,
because a selector naming an attribute a candidate lacks aborts the whole allocation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


@dataclass(frozen=True)
class GpuModel:
    """What a PCI device ID tells of a GPU: its marketing name and product family."""

    model: str
    family: str


UNKNOWN: Final = GpuModel("Unknown", "Unknown")

ARC_A: Final = "Arc A-Series"
ARC_B: Final = "Arc B-Series"
ARC_PRO_A: Final = "Arc Pro A-Series"
ARC_PRO_B: Final = "Arc Pro B-Series"
FLEX: Final = "Data Center Flex"
MAX: Final = "Data Center Max"
IRIS_XE: Final = "Iris Xe"
INTEL_GRAPHICS: Final = "Intel Graphics"

FAMILIES: Final = (ARC_A, ARC_B, ARC_PRO_A, ARC_PRO_B, FLEX, MAX, IRIS_XE, INTEL_GRAPHICS)


def _table(rows: tuple[tuple[str, str, str], ...]) -> Mapping[str, GpuModel]:
    table: dict[str, GpuModel] = {}
    for pci_id, model, family in rows:
        if pci_id in table:
            raise ValueError(f"GPU model table: PCI device ID {pci_id} listed twice")
        table[pci_id] = GpuModel(model, family)
    return MappingProxyType(table)


MODELS: Final[Mapping[str, GpuModel]] = _table(
    (
        # Integrated (Alder Lake, Raptor Lake, Arrow Lake)
        ("0x4626", "Alder Lake-P", IRIS_XE),
        ("0xa7a0", "Raptor Lake-P", IRIS_XE),
        ("0x7d67", "Arrow Lake-S", INTEL_GRAPHICS),
        # Alchemist
        ("0x56a0", "A770", ARC_A),
        ("0x56a1", "A750", ARC_A),
        ("0x56a2", "A580", ARC_A),
        ("0x56a5", "A380", ARC_A),
        ("0x56a6", "A310", ARC_A),
        ("0x56b0", "A30M", ARC_PRO_A),
        ("0x56b1", "A40/A50", ARC_PRO_A),
        ("0x56b2", "A60M", ARC_PRO_A),
        ("0x56b3", "A60", ARC_PRO_A),
        ("0x56c0", "Flex 170", FLEX),
        ("0x56c1", "Flex 140", FLEX),
        # Ponte Vecchio
        ("0x0b69", "Max 1550", MAX),
        ("0x0bd0", "Max 1550", MAX),
        ("0x0bd5", "Max 1550", MAX),
        ("0x0bd6", "Max 1450", MAX),
        ("0x0bd9", "Max 1100", MAX),
        ("0x0bda", "Max 1100", MAX),
        ("0x0bdb", "Max 1100", MAX),
        # Battlemage
        ("0xe20b", "B580", ARC_B),
        ("0xe20c", "B570", ARC_B),
        ("0xe211", "B60", ARC_PRO_B),
        ("0xe212", "B50", ARC_PRO_B),
        ("0xe222", "B65", ARC_PRO_B),
        ("0xe223", "B70", ARC_PRO_B),
        # Panther Lake: the Arc B-series parts as Intel's driver names them, the rest by platform
        ("0xb080", "B390", ARC_B),
        ("0xb081", "B370", ARC_B),
        ("0xb082", "B390", ARC_B),
        ("0xb083", "B370", ARC_B),
        ("0xb084", "B390", ARC_B),
        ("0xb085", "B370", ARC_B),
        ("0xb086", "B390", ARC_B),
        ("0xb087", "B370", ARC_B),
        ("0xb08f", "Panther Lake", INTEL_GRAPHICS),
        ("0xb090", "Panther Lake", INTEL_GRAPHICS),
        ("0xb0a0", "Panther Lake", INTEL_GRAPHICS),
        ("0xb0b0", "Panther Lake", INTEL_GRAPHICS),
    )
)
"""PCI device ID (lowercase, ``0x`` and four hex digits, as sysfs ``device`` holds it) → model."""


def model_of(pci_id: str | None) -> GpuModel:
    """The model of a PCI device ID in any case; :data:`UNKNOWN` for an ID not in the table or none."""
    if not pci_id:
        return UNKNOWN
    return MODELS.get(pci_id.strip().lower(), UNKNOWN)


def device_ids_of_family(family: str) -> tuple[str, ...]:
    """The IDs of one family, four hex digits without ``0x`` (as NFD's ``pci.device`` rules match them),
    sorted; empty for a family the table does not have."""
    return tuple(sorted(pci_id[2:] for pci_id, known in MODELS.items() if known.family == family))
