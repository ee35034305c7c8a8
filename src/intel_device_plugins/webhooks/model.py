"""Typed model of the ``fpga.intel.com/v2`` custom resources; ``webhooks/crds.py`` renders their CRDs from it.

Declared in the project's CRD model language (``kube/crdmodel.py``); every field is required.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Final

from intel_device_plugins.kube.crdmodel import Model, field
from intel_device_plugins.webhooks.store import FpgaKind

INTERFACE_ID_PATTERN: Final = "^[0-9a-f]{8,32}$"
AFU_ID_PATTERN: Final = "^[0-9a-f]{8,40}$"
# Exactly one of the two modes (upstream's ^af|region$ also accepts anything starting with "af").
MODE_PATTERN: Final = "^(af|region)$"


def _id(json_name: str, pattern: str, description: str) -> Any:
    return field(json_name, description, {"type": "string", "pattern": pattern}, default="")


@dataclasses.dataclass(frozen=True)
class AcceleratorFunctionSpec(Model):
    """A named accelerator function: pods ask for ``fpga.intel.com/<name>`` instead of the plugin's name."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("afuId", "interfaceId", "mode")

    afu_id: str = _id("afuId", AFU_ID_PATTERN, "ID of the accelerator function unit (hex).")
    interface_id: str = _id("interfaceId", INTERFACE_ID_PATTERN, "ID of the FPGA region interface (hex).")
    mode: str = _id(
        "mode", MODE_PATTERN, "af: the function is preprogrammed; region: the plugin programs the region."
    )


@dataclasses.dataclass(frozen=True)
class FpgaRegionSpec(Model):
    """A named FPGA region: pods ask for ``fpga.intel.com/<name>`` to get the region itself."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("interfaceId",)

    interface_id: str = _id("interfaceId", INTERFACE_ID_PATTERN, "ID of the FPGA region interface (hex).")


SPEC_CLASSES: Final[dict[FpgaKind, type[Model]]] = {
    FpgaKind.ACCELERATOR_FUNCTION: AcceleratorFunctionSpec,
    FpgaKind.FPGA_REGION: FpgaRegionSpec,
}

DESCRIPTIONS: Final = {
    FpgaKind.ACCELERATOR_FUNCTION: "AcceleratorFunction gives an FPGA accelerator function a friendly name.",
    FpgaKind.FPGA_REGION: "FpgaRegion maps a friendly name to an FPGA region.",
}
