"""The result type of this project's discovery functions (DSA, IAA, NPU, SGX).

Discovery functions return the device tree together with the problems they met (one line each,
naming the device) and never log; the plugin shell hands the problems to
:class:`~intel_device_plugins.deviceplugin.problems.ProblemLog`.
"""

from __future__ import annotations

from dataclasses import dataclass

from intel_device_plugins.deviceplugin.model import DeviceTree


@dataclass(frozen=True)
class Discovery:
    """A scan's result: the tree to serve and the problems found on the way."""

    tree: DeviceTree
    problems: tuple[str, ...] = ()
