"""Small helpers the plugins share (the scan result itself is ``deviceplugin.model.Discovery``)."""

from __future__ import annotations

import re
from pathlib import Path

from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of
from intel_device_plugins.flags import MAX_SHARED_DEV_NUM, GoFlagParser, shared_dev_num
from intel_device_plugins.plugins.flagnames import SHARED_DEV_NUM

PCI_ID = re.compile(r"^0x[0-9a-fA-F]{4}$")
"""A PCI vendor or device ID as sysfs writes it; anything else in those files is garbage."""


def numa_or_problem(device_dir: Path, prefix: str, label: str, problems: list[str]) -> tuple[int, ...]:
    """NUMA nodes of a sysfs device; unreadable topology is a problem line, not a lost device."""
    try:
        return numa_nodes_of(device_dir, Path(prefix or "/"))
    except TopologyError as error:
        problems.append(f"{label}: {error}; no NUMA topology reported")
        return ()


def add_shared_dev_num(parser: GoFlagParser, shared_thing: str) -> None:
    """Upstream's ``-shared-dev-num``: how many containers may share one ``shared_thing``."""
    parser.add_flag(
        SHARED_DEV_NUM,
        type=shared_dev_num,
        default=1,
        help=f"number of containers that may share one {shared_thing} (at most {MAX_SHARED_DEV_NUM})",
    )
