"""Typed model of the ``fpga.intel.com/v2`` custom resources; ``webhooks/crds.py`` renders their CRDs from it.

Each field carries its JSON name, OpenAPI schema and whether it is required, as the operator's model does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from intel_device_plugins.webhooks.store import FpgaKind

INTERFACE_ID_PATTERN: Final = "^[0-9a-f]{8,32}$"
AFU_ID_PATTERN: Final = "^[0-9a-f]{8,40}$"
# Exactly one of the two modes (upstream's ^af|region$ also accepts anything starting with "af").
MODE_PATTERN: Final = "^(af|region)$"


def _field(json_name: str, pattern: str, description: str) -> Any:
    schema = {"type": "string", "pattern": pattern, "description": description}
    return dataclasses.field(metadata={"json": json_name, "schema": schema, "required": True})


@dataclasses.dataclass(frozen=True)
class AcceleratorFunctionSpec:
    """A named accelerator function: pods ask for ``fpga.intel.com/<name>`` instead of the plugin's name."""

    afu_id: str = _field("afuId", AFU_ID_PATTERN, "ID of the accelerator function unit (hex).")
    interface_id: str = _field("interfaceId", INTERFACE_ID_PATTERN, "ID of the FPGA region interface (hex).")
    mode: str = _field(
        "mode", MODE_PATTERN, "af: the function is preprogrammed; region: the plugin programs the region."
    )


@dataclasses.dataclass(frozen=True)
class FpgaRegionSpec:
    """A named FPGA region: pods ask for ``fpga.intel.com/<name>`` to get the region itself."""

    interface_id: str = _field("interfaceId", INTERFACE_ID_PATTERN, "ID of the FPGA region interface (hex).")


SPEC_CLASSES: Final[dict[FpgaKind, type]] = {
    FpgaKind.ACCELERATOR_FUNCTION: AcceleratorFunctionSpec,
    FpgaKind.FPGA_REGION: FpgaRegionSpec,
}

DESCRIPTIONS: Final = {
    FpgaKind.ACCELERATOR_FUNCTION: "AcceleratorFunction gives an FPGA accelerator function a friendly name.",
    FpgaKind.FPGA_REGION: "FpgaRegion maps a friendly name to an FPGA region.",
}
