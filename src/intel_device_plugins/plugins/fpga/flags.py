"""The FPGA flag the device plugin and the DRA driver share, apart from the device-plugin server, so
the driver's import of it does not load grpcio and protobuf."""

from __future__ import annotations

from intel_device_plugins.flags import GoFlagParser
from intel_device_plugins.plugins.flagnames import FPGA_MODE
from intel_device_plugins.plugins.fpga.discovery import Mode


def add_mode_flag(parser: GoFlagParser) -> None:
    """``-mode``, shared by the device plugin and the DRA driver."""
    parser.add_flag(
        FPGA_MODE, type=Mode, choices=list(Mode), default=Mode.AF, help="af, region or regiondevel"
    )
