"""What the DSA, IAA, NPU and SGX plugins share: the discovery result type and two small helpers.

Discovery functions return the device tree together with the problems they met (one line each,
naming the device) and never log; the plugin shell hands the problems to
:class:`~intel_device_plugins.deviceplugin.problems.ProblemLog`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from intel_device_plugins.deviceplugin.cli import PluginArgumentParser
from intel_device_plugins.deviceplugin.model import DeviceTree
from intel_device_plugins.deviceplugin.topology import TopologyError, numa_nodes_of
from intel_device_plugins.flags import MAX_SHARED_DEV_NUM, shared_dev_num

PCI_ID = re.compile(r"^0x[0-9a-fA-F]{4}$")
"""A PCI vendor or device ID as sysfs writes it; anything else in those files is garbage."""


@dataclass(frozen=True)
class Discovery:
    """A scan's result: the tree to serve and the problems found on the way."""

    tree: DeviceTree
    problems: tuple[str, ...] = ()


def numa_or_problem(device_dir: Path, prefix: str, label: str, problems: list[str]) -> tuple[int, ...]:
    """NUMA nodes of a sysfs device; unreadable topology is a problem line, not a lost device."""
    try:
        return numa_nodes_of(device_dir, Path(prefix or "/"))
    except TopologyError as error:
        problems.append(f"{label}: {error}; no NUMA topology reported")
        return ()


def add_shared_dev_num(parser: PluginArgumentParser, shared_thing: str) -> None:
    """Upstream's ``-shared-dev-num``: how many containers may share one ``shared_thing``."""
    parser.add_flag(
        "shared-dev-num",
        type=shared_dev_num,
        default=1,
        help=f"number of containers that may share one {shared_thing} (at most {MAX_SHARED_DEV_NUM})",
    )
